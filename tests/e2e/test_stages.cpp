// The model as Stages with per-micro-batch slots:
//  - several micro-batches in flight on one Stage, their forwards and backwards in any order over
//    distinct slots, give every micro-batch exactly the gradient it gets alone;
//  - a model cut into Stages held by one process, activations and gradients passed by copy, gives
//    the loss and every gradient of the uncut model bit for bit;
//  - the forward-only path gives the training forward's logits exactly and leaves slots alone.
// Dropout, --reset-position-ids and --reset-attention-mask are on throughout, so a slot that
// handed a backward another micro-batch's masks, positions or document starts would show.
#include <cstring>
#include <map>
#include <string>

#include "model/gpt.h"
#include "model/stage.h"
#include "ops/elementwise.h"
#include "stage_testing.h"
#include "testing.h"

namespace mt {
namespace {

using namespace test;  // the stage test helpers (stage_testing.h)

struct Variant {
  const char* name;
  bool llama;
  bool tied;
  DType dtype = DType::f32;
  RecomputeGranularity recompute = RecomputeGranularity::none;
  RecomputeMethod method = RecomputeMethod::uniform;
  int64_t recompute_layers = 1;
  AttentionImpl attention = AttentionImpl::flash;
};

void PrintTo(const Variant& v, std::ostream* os) { *os << v.name; }

ModelConfig make_config(const Variant& v, int64_t layers) {
  ModelConfig c = test::tiny_gpt(v.llama, 9);
  c.num_layers = layers;
  c.untie_embeddings_and_output_weights = !v.tied;
  c.params_dtype = v.dtype;
  c.recompute_granularity = v.recompute;
  c.recompute_method = v.method;
  c.recompute_num_layers = v.recompute_layers;
  c.attention_impl = v.attention;
  c.finalize();
  return c;
}

class SlotSchedules : public ::testing::TestWithParam<Variant> {};

TEST_P(SlotSchedules, AnyOrderOfForwardsAndBackwardsGivesEachMicroBatchItsOwnGradient) {
  const ModelConfig c = make_config(GetParam(), 3);
  const PerMicroBatch reference = run_schedule(c, sequential(4), 1);
  // All four forwards, then the backwards in reverse order (four slots).
  const std::vector<Step> reverse = {{true, 0},  {true, 1},  {true, 2},  {true, 3},
                                     {false, 3}, {false, 2}, {false, 1}, {false, 0}};
  // 1F1B-like interleaving on two slots (each reused once its backward has run).
  const std::vector<Step> interleaved = {{true, 0},  {true, 1}, {false, 0}, {true, 2},
                                         {false, 1}, {true, 3}, {false, 2}, {false, 3}};
  for (const auto& [name, steps, slots] :
       {std::tuple{"reverse", reverse, 4}, std::tuple{"interleaved", interleaved, 2}}) {
    const PerMicroBatch got = run_schedule(c, steps, slots);
    for (int k = 0; k < 4; ++k) {
      EXPECT_EQ(got.losses[k], reference.losses[k]) << name << " micro-batch " << k;
      expect_identical(got.grads[k], reference.grads[k], std::string(name) + " micro-batch " + std::to_string(k));
    }
  }
  // Distinct micro-batches do have distinct gradients (the comparison has teeth).
  EXPECT_NE(reference.grads[0].begin()->second, reference.grads[1].begin()->second);
}

// With the backwards in forward order the gradients can be summed in one buffer and still match
// bit for bit (untied: the output layer's share comes from the forwards, the rest from the
// backwards, each in micro-batch order either way).
TEST(SlotSchedules, InterleavedScheduleAccumulatesTheSequentialGradient) {
  const ModelConfig c = make_config({"llama", true, false}, 3);
  std::vector<Batch> batches;
  for (int k = 0; k < 4; ++k) batches.emplace_back(c, 10 + 7 * k);
  Grads result[2];
  for (int run = 0; run < 2; ++run) {
    StageOptions options;
    options.slots = 2;
    Stage stage(c, StageRange::whole(c), kBatch, cpu_backend(), nullptr, options);
    init(stage.params());
    const std::vector<Step> steps = run == 0 ? sequential(4)
                                             : std::vector<Step>{{true, 0},  {true, 1}, {false, 0}, {true, 2},
                                                                 {false, 1}, {true, 3}, {false, 2}, {false, 3}};
    for (const Step& step : steps)
      if (step.forward)
        stage.forward(step.mb % 2, batches[step.mb].view(), {}, training(40 + step.mb));
      else
        stage.backward(step.mb % 2, {});
    result[run] = grads_of(stage.params());
  }
  expect_identical(result[1], result[0], "interleaved");
}

INSTANTIATE_TEST_SUITE_P(
    Variants, SlotSchedules,
    ::testing::Values(Variant{"gpt2_tied", false, true}, Variant{"llama", true, false},
                      Variant{"gpt2_full_recompute", false, true, DType::f32, RecomputeGranularity::full,
                              RecomputeMethod::uniform, 2},
                      Variant{"llama_bf16", true, false, DType::bf16},
                      Variant{"llama_bf16_full_recompute", true, false, DType::bf16, RecomputeGranularity::full,
                              RecomputeMethod::uniform, 2},
                      Variant{"gpt2_unfused_block_recompute", false, true, DType::f32, RecomputeGranularity::full,
                              RecomputeMethod::block, 1, AttentionImpl::unfused}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(SlotSchedules, MisuseIsAnError) {
  const ModelConfig c = make_config({"gpt2", false, true}, 2);
  StageOptions options;
  options.slots = 2;
  Stage stage(c, StageRange::whole(c), kBatch, cpu_backend(), nullptr, options);
  Batch batch(c, 1);
  EXPECT_THROW(stage.backward(0, {}), Error);  // nothing in flight
  stage.forward(0, batch.view(), {}, training(1));
  EXPECT_TRUE(stage.slot_busy(0));
  EXPECT_THROW(stage.forward(0, batch.view(), {}, training(2)), Error);  // slot 0 awaits its backward
  EXPECT_THROW(stage.forward(2, batch.view(), {}, training(2)), Error);  // no slot 2
  stage.forward(1, batch.view(), {}, training(2));
  stage.backward(0, {});
  EXPECT_FALSE(stage.slot_busy(0));
  EXPECT_THROW(stage.backward(0, {}), Error);  // one backward per forward
  stage.backward(1, {});
  // An evaluation forward (grad_scale 0) keeps nothing: the slot stays free.
  stage.forward(0, batch.view(), {}, ForwardOptions{});
  EXPECT_FALSE(stage.slot_busy(0));
  EXPECT_THROW(stage.backward(0, {}), Error);
}

// A stage without the head does not keep its output per micro-batch (it is sent on at once, and
// its backward never reads it): every slot costs the same, and the one shared output buffer is
// all that is carved once.
TEST(SlotSchedules, OutputIsNotKeptPerSlot) {
  const ModelConfig c = make_config({"gpt2", false, true}, 2);
  auto bytes = [&](int slots) {
    StageOptions options;
    options.slots = slots;
    return Stage(c, {0, 2, true, false}, kBatch, cpu_backend(), nullptr, options).activation_bytes();
  };
  const size_t one = bytes(1), three = bytes(3);
  const size_t per_slot = (three - one) / 2;
  const size_t output = static_cast<size_t>(c.seq_length * kBatch * c.hidden_size) * 4;  // f32 [s·b, h]
  EXPECT_EQ(one - per_slot, output);
}

// ---- A model cut into stages ----

class CutStages : public ::testing::TestWithParam<Variant> {};

TEST_P(CutStages, ThreeStagesReproduceTheUncutModelBitForBit) {
  // [0, 2) with the embedding, [2, 3), [3, 6) with the final norm, output layer and loss.
  expect_cut_matches_uncut(make_config(GetParam(), 6),
                           {{0, 2, true, false}, {2, 3, false, false}, {3, 6, false, true}}, GetParam().name);
}

// A stage may hold only the embedding or only the head; a middle stage may receive f32 hidden
// states (a bf16 stage takes either dtype).
TEST(CutStages, StagesWithoutLayersAndF32Handoffs) {
  expect_cut_matches_uncut(make_config({"gpt2", false, true}, 6),
                           {{0, 0, true, false}, {0, 3, false, false}, {3, 6, false, false}, {6, 6, false, true}},
                           "embedding-only and head-only stages");
  const ModelConfig c = make_config({"llama_bf16", true, false, DType::bf16}, 4);
  Batch batch(c, 8);
  Stage first(c, {0, 2, true, false}, kBatch, cpu_backend(), nullptr);
  Stage second(c, {2, 4, false, true}, kBatch, cpu_backend(), nullptr);
  init(first.params());
  init(second.params());
  const TensorView h = first.forward(0, batch.view(), {}, training(2)).hidden;
  ASSERT_EQ(h.dtype, DType::bf16);
  test::HostTensor widened(DType::f32, h.shape);
  cast(widened.view(), h);
  const double from_bf16 = second.forward(0, batch.view(), h, ForwardOptions{}).loss.loss_sum;
  const double from_f32 = second.forward(0, batch.view(), widened.view(), ForwardOptions{}).loss.loss_sum;
  EXPECT_EQ(from_f32, from_bf16);
}

INSTANTIATE_TEST_SUITE_P(
    Variants, CutStages,
    ::testing::Values(Variant{"gpt2_tied", false, true}, Variant{"gpt2_untied", false, false},
                      Variant{"llama_untied", true, false}, Variant{"llama_tied", true, true},
                      Variant{"gpt2_bf16", false, true, DType::bf16},
                      Variant{"llama_recompute_uniform2", true, false, DType::f32, RecomputeGranularity::full,
                              RecomputeMethod::uniform, 2},
                      Variant{"gpt2_recompute_block1", false, true, DType::f32, RecomputeGranularity::full,
                              RecomputeMethod::block, 1},
                      Variant{"llama_bf16_recompute_uniform2", true, false, DType::bf16, RecomputeGranularity::full,
                              RecomputeMethod::uniform, 2}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(CutStages, StagesHoldOnlyTheirParametersUnderGlobalNames) {
  const ModelConfig c = make_config({"gpt2", false, true}, 6);
  Stage middle(c, {2, 4, false, false}, kBatch, cpu_backend(), nullptr);
  std::vector<std::string> names;
  for (const Param& p : middle.params().params()) names.push_back(p.name);
  EXPECT_EQ(names.front(), "decoder.layers.2.input_layernorm.weight");
  EXPECT_EQ(names.back(), "decoder.layers.3.mlp.linear_fc2.bias");
  for (const std::string& n : names) EXPECT_EQ(n.find("embedding"), std::string::npos) << n;
  EXPECT_THROW(Stage(c, {4, 7, false, true}, kBatch, cpu_backend(), nullptr), Error);  // past the last layer
  EXPECT_THROW(Stage(c, {3, 2, false, false}, kBatch, cpu_backend(), nullptr), Error);  // reversed
  Batch batch(c, 1);
  test::HostTensor wrong(DType::f32, {3, c.hidden_size});
  EXPECT_THROW(middle.forward(0, batch.view(), wrong.view(), training(1)), Error);  // wrong input shape
  Stage first(c, {0, 2, true, false}, kBatch, cpu_backend(), nullptr);
  EXPECT_THROW(first.forward(0, batch.view(), wrong.view(), training(1)), Error);  // the first stage embeds tokens
}

// The groups a backward reports finished (and a forward needs) in turn: embedding, each layer,
// head. For every kind of stage they must tile params() in order, or data parallelism would start
// a bucket's reduction early, or never, and the overlapped gather would skip a bucket.
TEST(CutStages, ParameterGroupsTileEveryKindOfStage) {
  for (const bool tied : {true, false}) {
    const ModelConfig c = make_config({"model", /*llama=*/!tied, tied}, 4);
    const StageRange kinds[] = {StageRange::whole(c), {0, 2, true, false}, {1, 3, false, false},
                                {2, 4, false, true}, {0, 0, true, false},  {4, 4, false, true},
                                {0, 4, false, false}, {0, 0, true, true}};
    for (const StageRange& r : kinds) {
      SCOPED_TRACE("layers [" + std::to_string(r.first_layer) + ", " + std::to_string(r.last_layer) + ")" +
                   (r.embedding ? " + embedding" : "") + (r.head ? " + head" : "") + (tied ? ", tied" : ""));
      const ParamStore store(c, r, cpu_backend(), nullptr);
      std::vector<ParamStore::IndexRange> groups = {store.embedding_params()};
      for (int64_t i = r.first_layer; i < r.last_layer; ++i) groups.push_back(store.layer_params(i));
      groups.push_back(store.head_params());
      size_t next = 0;
      for (const ParamStore::IndexRange& g : groups) {
        EXPECT_EQ(g.first, next);
        EXPECT_LE(g.first, g.second);
        next = g.second;
      }
      EXPECT_EQ(next, store.params().size());
      // Each group holds what its name says.
      for (size_t i = store.embedding_params().first; i < store.embedding_params().second; ++i)
        EXPECT_NE(store.params()[i].name.find("embedding"), std::string::npos) << store.params()[i].name;
      for (int64_t l = r.first_layer; l < r.last_layer; ++l)
        for (size_t i = store.layer_params(l).first; i < store.layer_params(l).second; ++i)
          EXPECT_EQ(store.params()[i].name.rfind("decoder.layers." + std::to_string(l) + ".", 0), 0u)
              << store.params()[i].name;
      EXPECT_EQ(store.embedding_params().second > 0, r.embedding);
      EXPECT_EQ(store.head_params().second > store.head_params().first, r.head);
    }
  }
}

// ---- The forward-only path ----

class ForwardOnly : public ::testing::TestWithParam<Variant> {};

TEST_P(ForwardOnly, GivesTheTrainingForwardsLogitsExactly) {
  const ModelConfig c = make_config(GetParam(), 3);
  const int64_t N = c.seq_length * kBatch, V = c.padded_vocab_size();
  GptModelOptions options;
  options.head_chunk_tokens = N;  // the whole logits in the one chunk last_logits_chunk shows
  GptModel model(c, kBatch, cpu_backend(), nullptr, options);
  init(model.params());
  Batch batch(c, 4);
  ForwardOptions eval;
  eval.dropout = false;
  const LossSums train_loss = model.forward(batch.view(), eval);
  const TensorView chunk = model.last_logits_chunk();
  ASSERT_EQ(chunk.numel(), N * V);
  const std::vector<float> expected(chunk.f32(), chunk.f32() + chunk.numel());

  test::HostTensor logits(DType::f32, {N, V});
  const LossSums only = model.forward_only(batch.view(), logits.view());
  EXPECT_EQ(only.loss_sum, train_loss.loss_sum);
  EXPECT_EQ(only.num_tokens, train_loss.num_tokens);
  double max_diff = 0.0;
  for (int64_t i = 0; i < N * V; ++i) max_diff = std::max(max_diff, std::fabs(double(logits.f32()[i]) - expected[i]));
  EXPECT_EQ(max_diff, 0.0);

  // Without labels: logits only, through three stages.
  const StageRange ranges[3] = {{0, 1, true, false}, {1, 2, false, false}, {2, 3, false, true}};
  test::HostTensor staged(DType::f32, {N, V});
  TensorView hidden;
  MicroBatch inputs = batch.view();
  inputs.labels = TensorView();
  StageOptions inference;
  inference.slots = 0;
  std::vector<std::unique_ptr<Stage>> stages;
  for (const StageRange& r : ranges) {
    stages.push_back(std::make_unique<Stage>(c, r, kBatch, cpu_backend(), nullptr, inference));
    init(stages.back()->params());
    hidden = stages.back()->forward_only(inputs, hidden, r.head ? staged.view() : TensorView()).hidden;
  }
  for (int64_t i = 0; i < N * V; ++i) ASSERT_EQ(staged.f32()[i], expected[i]) << "logit " << i;
}

// Evaluation's use: the loss sums through the output layer's chunks (here 5 rows, fewer than N).
TEST_P(ForwardOnly, GivesTheEvaluationForwardsLossExactly) {
  const ModelConfig c = make_config(GetParam(), 3);
  GptModelOptions options;
  options.head_chunk_tokens = 5;
  GptModel model(c, kBatch, cpu_backend(), nullptr, options);
  init(model.params());
  Batch batch(c, 9);
  ForwardOptions eval;
  eval.dropout = false;
  const LossSums expected = model.forward(batch.view(), eval);
  const LossSums got = model.forward_only(batch.view());
  EXPECT_EQ(got.loss_sum, expected.loss_sum);
  EXPECT_EQ(got.num_tokens, expected.num_tokens);
  EXPECT_GT(got.loss_sum, 0.0);
}

TEST_P(ForwardOnly, LeavesASlotInFlightUntouched) {
  const ModelConfig c = make_config(GetParam(), 3);
  Batch a(c, 5), b(c, 6);
  Grads grads[2];
  double loss[2];
  for (int run = 0; run < 2; ++run) {
    GptModel model(c, kBatch, cpu_backend(), nullptr);
    init(model.params());
    loss[run] = model.forward(a.view(), training(3)).loss_sum;
    if (run == 1) model.forward_only(b.view());  // an evaluation between forward and backward
    model.backward();
    grads[run] = grads_of(model.params());
  }
  EXPECT_EQ(loss[1], loss[0]);
  expect_identical(grads[1], grads[0], "with a forward-only pass in between");
}

INSTANTIATE_TEST_SUITE_P(Variants, ForwardOnly,
                         ::testing::Values(Variant{"gpt2_tied", false, true}, Variant{"llama", true, false},
                                           Variant{"llama_bf16", true, false, DType::bf16},
                                           Variant{"gpt2_unfused", false, true, DType::f32, RecomputeGranularity::none,
                                                   RecomputeMethod::uniform, 1, AttentionImpl::unfused}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace mt
