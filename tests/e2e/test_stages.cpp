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
#include "testing.h"

namespace mt {
namespace {

struct Variant {
  const char* name;
  bool llama;
  bool tied;
  DType dtype = DType::f32;
  RecomputeGranularity recompute = RecomputeGranularity::none;
  RecomputeMethod method = RecomputeMethod::uniform;
  int64_t recompute_layers = 1;
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
  c.finalize();
  return c;
}

constexpr int64_t kBatch = 2;

// One micro-batch with a loss mask and documents (position ids restart, attention stays inside).
struct Batch {
  test::HostTensor tokens, labels, mask, positions, doc_start;
  Batch(const ModelConfig& c, uint64_t seed)
      : tokens(test::randint({kBatch, c.seq_length}, static_cast<int32_t>(c.vocab_size), seed)),
        labels(test::randint({kBatch, c.seq_length}, static_cast<int32_t>(c.vocab_size), seed + 100)),
        mask(test::randn({kBatch, c.seq_length}, seed + 200)),
        positions(DType::i32, {kBatch, c.seq_length}),
        doc_start(DType::i32, {kBatch, c.seq_length}) {
    test::HostTensor breaks = test::randint({kBatch, c.seq_length}, 4, seed + 300);
    for (int64_t j = 0; j < kBatch; ++j) {
      int32_t start = 0;
      for (int64_t i = 0; i < c.seq_length; ++i) {
        const int64_t at = j * c.seq_length + i;
        if (i > 0 && breaks.i32()[at] == 0) start = static_cast<int32_t>(i);
        doc_start.i32()[at] = start;
        positions.i32()[at] = static_cast<int32_t>(i) - start;
        mask.f32()[at] = mask.f32()[at] > -0.8f ? 1.0f : 0.0f;
      }
    }
  }
  MicroBatch view() {
    return {tokens.view(), labels.view(), mask.view(), positions.view(), doc_start.view()};
  }
};

ForwardOptions training(uint64_t round) {
  ForwardOptions o;
  o.dropout_round = round;
  o.grad_scale = 0.5f;
  return o;
}

void init(ParamStore& params) {
  params.init(7);
  params.zero_grads();
}

using Grads = std::map<std::string, std::vector<float>>;

Grads grads_of(ParamStore& params) {
  Grads g;
  for (const Param& p : params.params()) g[p.name].assign(p.grad.f32(), p.grad.f32() + p.grad.numel());
  return g;
}

void expect_identical(const Grads& actual, const Grads& expected, const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (const auto& [name, want] : expected) {
    const auto it = actual.find(name);
    ASSERT_NE(it, actual.end()) << what << ": no gradient for " << name;
    ASSERT_EQ(it->second.size(), want.size()) << what << ": " << name;
    size_t differ = 0;
    for (size_t i = 0; i < want.size(); ++i) differ += it->second[i] != want[i];
    EXPECT_EQ(differ, 0u) << what << ": " << name << " differs in " << differ << " of " << want.size() << " entries";
  }
}

// ---- Several micro-batches in flight on one Stage ----

// A schedule step: the forward or backward of micro-batch mb, in slot mb % slots.
struct Step {
  bool forward;
  int mb;
};

// Runs the schedule and returns each micro-batch's gradient and loss. Float addition does not
// commute bit for bit, so the gradients of interleaved micro-batches summed in one buffer would
// differ from the sequential run's in the last bits without anything being wrong; so the
// gradients are zeroed before every step and each step's contribution is added to its
// micro-batch's total (forward first: the output layer's share is made in the forward). A slot
// mix-up (another micro-batch's masks, positions or saved tensors) changes those totals.
struct PerMicroBatch {
  std::vector<Grads> grads;
  std::vector<double> losses;
};

PerMicroBatch run_schedule(const ModelConfig& c, const std::vector<Step>& schedule, int slots) {
  StageOptions options;
  options.slots = slots;
  Stage stage(c, StageRange::whole(c), kBatch, cpu_backend(), nullptr, options);
  init(stage.params());
  const int micro_batches = static_cast<int>(schedule.size() / 2);
  std::vector<Batch> batches;
  for (int k = 0; k < micro_batches; ++k) batches.emplace_back(c, 10 + 7 * k);
  PerMicroBatch out;
  out.grads.resize(micro_batches);
  out.losses.resize(micro_batches);
  for (const Step& step : schedule) {
    stage.params().zero_grads();
    if (step.forward)
      out.losses[step.mb] = stage.forward(step.mb % slots, batches[step.mb].view(), {}, training(40 + step.mb)).loss.loss_sum;
    else
      EXPECT_TRUE(stage.backward(step.mb % slots, {}).empty());  // the first stage returns no input gradient
    Grads& total = out.grads[step.mb];
    for (const auto& [name, g] : grads_of(stage.params())) {
      std::vector<float>& t = total[name];
      t.resize(g.size());
      for (size_t i = 0; i < g.size(); ++i) t[i] += g[i];
    }
  }
  return out;
}

std::vector<Step> sequential(int n) {
  std::vector<Step> s;
  for (int k = 0; k < n; ++k) {
    s.push_back({true, k});
    s.push_back({false, k});
  }
  return s;
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
                      Variant{"llama_bf16", true, false, DType::bf16}),
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

// ---- A model cut into stages ----

class CutStages : public ::testing::TestWithParam<Variant> {};

TEST_P(CutStages, ThreeStagesReproduceTheUncutModelBitForBit) {
  const ModelConfig c = make_config(GetParam(), 6);
  Batch batch(c, 3);
  const ForwardOptions fo = training(5);

  GptModel whole(c, kBatch, cpu_backend(), nullptr);
  init(whole.params());
  const double loss = whole.forward(batch.view(), fo).loss_sum;
  whole.backward();
  const Grads expected = grads_of(whole.params());

  // [0, 2) with the embedding, [2, 3), [3, 6) with the final norm, output layer and loss.
  const StageRange ranges[3] = {{0, 2, true, false}, {2, 3, false, false}, {3, 6, false, true}};
  std::vector<std::unique_ptr<Stage>> stages;
  for (const StageRange& r : ranges) {
    stages.push_back(std::make_unique<Stage>(c, r, kBatch, cpu_backend(), nullptr));
    init(stages.back()->params());
  }
  TensorView hidden;
  StageForward out;
  for (auto& stage : stages) {
    out = stage->forward(0, batch.view(), hidden, fo);
    hidden = out.hidden;
  }
  EXPECT_TRUE(out.hidden.empty());
  EXPECT_EQ(out.loss.loss_sum, loss);
  // Tied embeddings: the last stage holds a copy of the word embedding as its output layer. The
  // embedding group's reduction, done before the first stage's backward (one micro-batch),
  // repeats the uncut model's order of accumulation: the output layer's share first.
  if (!c.untie_embeddings_and_output_weights) {
    const Param& copy = stages[2]->params().get("embedding.word_embeddings.weight");
    EXPECT_TRUE(copy.shared_embedding);
    copy_tensor(stages[0]->params().get("embedding.word_embeddings.weight").grad, copy.grad);
  }
  TensorView grad;
  for (int k = 2; k >= 0; --k) {
    test::HostTensor passed(DType::f32, {grad.empty() ? 1 : grad.numel()});
    if (!grad.empty()) {  // by copy, as a pipeline would send it
      std::memcpy(passed.bytes.data(), grad.data, grad.bytes());
      grad = passed.view().reshape(grad.shape);
    }
    grad = stages[k]->backward(0, grad);
  }
  EXPECT_TRUE(grad.empty());
  Grads got;
  for (auto& stage : stages)
    for (auto& [name, g] : grads_of(stage->params()))
      if (!stage->range().embedding && name == "embedding.word_embeddings.weight")
        continue;  // the tied copy (checked through the first stage's gradient)
      else
        got[name] = g;
  expect_identical(got, expected, GetParam().name);
}

INSTANTIATE_TEST_SUITE_P(
    Variants, CutStages,
    ::testing::Values(Variant{"gpt2_tied", false, true}, Variant{"gpt2_untied", false, false},
                      Variant{"llama_untied", true, false}, Variant{"llama_tied", true, true},
                      Variant{"gpt2_bf16", false, true, DType::bf16},
                      Variant{"llama_recompute_uniform2", true, false, DType::f32, RecomputeGranularity::full,
                              RecomputeMethod::uniform, 2},
                      Variant{"gpt2_recompute_block1", false, true, DType::f32, RecomputeGranularity::full,
                              RecomputeMethod::block, 1}),
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
  std::vector<std::unique_ptr<Stage>> stages;
  for (const StageRange& r : ranges) {
    stages.push_back(std::make_unique<Stage>(c, r, kBatch, cpu_backend(), nullptr, StageOptions{0}));  // inference: no slots
    init(stages.back()->params());
    hidden = stages.back()->forward_only(inputs, hidden, r.head ? staged.view() : TensorView()).hidden;
  }
  for (int64_t i = 0; i < N * V; ++i) ASSERT_EQ(staged.f32()[i], expected[i]) << "logit " << i;
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
                                           Variant{"llama_bf16", true, false, DType::bf16}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace mt
