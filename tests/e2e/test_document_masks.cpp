// Packed documents in one sample (Megatron's --reset-position-ids and --reset-attention-mask):
// per-token position ids and document starts carried by MicroBatch into GptModel. Given as the
// sequence index / plain causal they change nothing, bit for bit; the gradients with them match
// finite differences; and with both flags a document's tokens get the same losses wherever in
// the sample it sits, as if trained alone at offset 0.
#include <cmath>
#include <string>
#include <vector>

#include "app/commands.h"
#include "model/gpt.h"
#include "testing.h"
#include "train/train_data.h"
#include "train/trainer.h"

namespace mt {
namespace {

using test::HostTensor;

ModelConfig tiny(bool llama, AttentionImpl impl = AttentionImpl::flash) { return test::tiny_gpt(llama, 11, impl); }

std::string name(bool llama, AttentionImpl impl) {
  return std::string(llama ? "llama" : "gpt2") + (impl == AttentionImpl::flash ? " flash" : " unfused");
}

// Positions restarting at the given starts of every row (Megatron's reset after each EOD).
HostTensor positions_from_starts(int64_t b, int64_t s, const std::vector<std::vector<int64_t>>& starts) {
  HostTensor pos(DType::i32, {b, s});
  for (int64_t j = 0; j < b; ++j) {
    int64_t start = 0;
    for (int64_t i = 0; i < s; ++i) {
      for (int64_t d : starts[j % starts.size()])
        if (d == i) start = i;
      pos.i32()[j * s + i] = static_cast<int32_t>(i - start);
    }
  }
  return pos;
}

// Document starts [b, s] from the same starts (the last start <= i).
HostTensor document_starts(int64_t b, int64_t s, const std::vector<std::vector<int64_t>>& starts) {
  HostTensor pos = positions_from_starts(b, s, starts);
  for (int64_t k = 0; k < b * s; ++k) pos.i32()[k] = static_cast<int32_t>(k % s - pos.i32()[k]);
  return pos;
}

// Every gradient of the model, concatenated.
std::vector<uint8_t> all_grads(GptModel& m) {
  std::vector<uint8_t> out;
  for (Param& p : m.params().params()) {
    const uint8_t* g = static_cast<const uint8_t*>(p.grad.data);
    out.insert(out.end(), g, g + p.grad.bytes());
  }
  return out;
}

struct StepResult {
  double loss = 0.0;
  std::vector<uint8_t> grads;
};

StepResult train_step(GptModel& m, const MicroBatch& batch, uint64_t round) {
  m.params().zero_grads();
  ForwardOptions fo;
  fo.first_sample = round;
  fo.grad_scale = 0.5f;
  StepResult r;
  r.loss = m.forward(batch, fo).loss_sum;
  m.backward();
  r.grads = all_grads(m);
  return r;
}

// ---- --reset-position-ids ------------------------------------------------------------------

TEST(DocumentMasks, PositionIdsEqualToSequenceIndexChangeNothing) {
  for (bool llama : {false, true}) {
    SCOPED_TRACE(name(llama, AttentionImpl::flash));
    const ModelConfig c = tiny(llama);
    const int64_t b = 2, s = c.seq_length;
    GptModel model(c, b, cpu_backend(), nullptr);
    model.params().init(7);
    HostTensor tokens = test::randint({b, s}, 37, 1), labels = test::randint({b, s}, 37, 2);
    HostTensor plain = positions_from_starts(b, s, {{}});
    MicroBatch batch{tokens.view(), labels.view(), TensorView()};
    const StepResult without = train_step(model, batch, 3);
    batch.position_ids = plain.view();
    const StepResult with = train_step(model, batch, 3);
    EXPECT_EQ(with.loss, without.loss);
    EXPECT_TRUE(with.grads == without.grads) << "gradients differ";
    // Restarted positions do reach the model.
    HostTensor reset = positions_from_starts(b, s, {{4}, {2, 7}});
    batch.position_ids = reset.view();
    EXPECT_NE(train_step(model, batch, 3).loss, without.loss);
  }
}

TEST(DocumentMasks, LearnedPositionGradientLandsOnTheGivenRows) {
  const ModelConfig c = tiny(false);
  const int64_t b = 2, s = c.seq_length;
  GptModel model(c, b, cpu_backend(), nullptr);
  model.params().init(7);
  HostTensor tokens = test::randint({b, s}, 37, 1), labels = test::randint({b, s}, 37, 2);
  HostTensor pos(DType::i32, {b, s});
  for (int64_t k = 0; k < b * s; ++k) pos.i32()[k] = static_cast<int32_t>(k % 3);  // rows 0, 1, 2 only
  const MicroBatch batch{tokens.view(), labels.view(), TensorView(), pos.view()};
  train_step(model, batch, 1);
  const TensorView g = model.params().grads().position_embeddings;
  const int64_t h = g.dim(1);
  for (int64_t row = 0; row < g.dim(0); ++row) {
    double norm = 0.0;
    for (int64_t c2 = 0; c2 < h; ++c2) norm += std::fabs(g.f32()[row * h + c2]);
    if (row < 3)
      EXPECT_GT(norm, 0.0) << "position row " << row;
    else
      EXPECT_EQ(norm, 0.0) << "position row " << row << " is never used";
  }
  // A position past the table is an error naming it, not a wild read.
  pos.i32()[5] = static_cast<int32_t>(c.max_position_embeddings);
  ForwardOptions fo;
  EXPECT_THROW(model.forward(batch, fo), Error);
}

// ---- --reset-attention-mask ----------------------------------------------------------------

TEST(DocumentMasks, DocumentStartZeroChangesNothing) {
  for (bool llama : {false, true})
    for (AttentionImpl impl : {AttentionImpl::flash, AttentionImpl::unfused}) {
      SCOPED_TRACE(name(llama, impl));
      const ModelConfig c = tiny(llama, impl);
      const int64_t b = 2, s = c.seq_length;
      GptModel model(c, b, cpu_backend(), nullptr);
      model.params().init(7);
      HostTensor tokens = test::randint({b, s}, 37, 1), labels = test::randint({b, s}, 37, 2);
      HostTensor zero = document_starts(b, s, {{}});
      MicroBatch batch{tokens.view(), labels.view(), TensorView()};
      const StepResult without = train_step(model, batch, 3);
      batch.document_start = zero.view();
      const StepResult with = train_step(model, batch, 3);
      EXPECT_EQ(with.loss, without.loss);
      EXPECT_TRUE(with.grads == without.grads) << "gradients differ";
      HostTensor docs = document_starts(b, s, {{4}, {2, 7}});
      batch.document_start = docs.view();
      EXPECT_NE(train_step(model, batch, 3).loss, without.loss);
      // A start after the token itself is an error, not a row with nothing to attend to.
      docs.i32()[3] = 4;
      ForwardOptions fo;
      EXPECT_THROW(model.forward(batch, fo), Error);
    }
}

// Whole-model gradients with both flags (dropout on, masks fixed by the round) against central
// finite differences, for the entries with the largest gradient of every parameter.
void gradcheck_with_documents(bool llama, AttentionImpl impl) {
  SCOPED_TRACE(name(llama, impl));
  const ModelConfig c = tiny(llama, impl);
  const int64_t b = 2, s = c.seq_length;
  GptModel model(c, b, cpu_backend(), nullptr);
  model.params().init(7);
  for (Param& p : model.params().params())
    if (p.init == InitKind::ones || p.init == InitKind::zeros)
      for (int64_t i = 0; i < p.value.numel(); ++i)
        p.value.f32()[i] += 0.1f * RngStream{3, stream_id(p.name)}.normal(static_cast<uint64_t>(i));
  HostTensor tokens = test::randint({b, s}, 37, 11), labels = test::randint({b, s}, 37, 12);
  const std::vector<std::vector<int64_t>> starts = {{3, 4, 9}, {6}};
  HostTensor pos = positions_from_starts(b, s, starts), docs = document_starts(b, s, starts);
  const MicroBatch batch{tokens.view(), labels.view(), TensorView(), pos.view(), docs.view()};
  ForwardOptions train;
  train.first_sample = 5;
  train.grad_scale = 0.7f;
  model.params().zero_grads();
  model.forward(batch, train);
  model.backward();
  ForwardOptions probe = train;
  probe.grad_scale = 0.0f;
  auto loss = [&] { return 0.7 * model.forward(batch, probe).loss_sum; };
  for (Param& p : model.params().params()) {
    std::vector<std::pair<float, int64_t>> order;
    for (int64_t i = 0; i < p.grad.numel(); ++i) order.push_back({-std::fabs(p.grad.f32()[i]), i});
    const size_t k = std::min<size_t>(5, order.size());
    std::partial_sort(order.begin(), order.begin() + k, order.end());
    double num = 0.0, den = 0.0;
    for (size_t e = 0; e < k; ++e) {
      float* w = p.value.f32() + order[e].second;
      const float saved = *w;
      const double h = 1e-2;
      *w = static_cast<float>(saved + h);
      const double up = loss();
      *w = static_cast<float>(saved - h);
      const double down = loss();
      *w = saved;
      const double fd = (up - down) / (2 * h), g = p.grad.f32()[order[e].second];
      num += (fd - g) * (fd - g);
      den += fd * fd;
    }
    const double rel = std::sqrt(num / std::max(den, 1e-20));
    EXPECT_LT(rel, 2e-2) << p.name << " relative error " << rel;
    EXPECT_GT(den, 1e-14) << p.name << " has no gradient at the probed entries";
  }
}

TEST(DocumentMasks, Gpt2StyleGradientsMatchFiniteDifferences) { gradcheck_with_documents(false, AttentionImpl::flash); }
TEST(DocumentMasks, LlamaStyleUnfusedGradientsMatchFiniteDifferences) {
  gradcheck_with_documents(true, AttentionImpl::unfused);
}

// The defining property of the two flags together: the second document of a packed sample gets
// the same logits, loss and gradients as the same document trained alone at offset 0 (no
// dropout: its draws are indexed by position in the sample).
TEST(DocumentMasks, SecondDocumentTrainsAsIfAlone) {
  for (bool llama : {false, true})
    for (AttentionImpl impl : {AttentionImpl::flash, AttentionImpl::unfused}) {
      SCOPED_TRACE(name(llama, impl));
      const ModelConfig c = tiny(llama, impl);
      const int64_t s = c.seq_length, a = 4, len = s - a, V = 37;  // document A: tokens 0..3 (3 = EOD)
      HostTensor packed_tokens = test::randint({1, s}, V, 21), packed_labels = test::randint({1, s}, V, 22);
      packed_tokens.i32()[a - 1] = V - 1;  // EOD
      HostTensor alone_tokens = test::randint({1, s}, V, 23), alone_labels = test::randint({1, s}, V, 24);
      HostTensor packed_mask = test::zeros({1, s}), alone_mask = test::zeros({1, s});
      for (int64_t i = 0; i < len; ++i) {
        alone_tokens.i32()[i] = packed_tokens.i32()[a + i];
        alone_labels.i32()[i] = packed_labels.i32()[a + i];
        alone_mask.f32()[i] = packed_mask.f32()[a + i] = 1.0f;  // the loss of document B only
      }
      HostTensor packed_pos = positions_from_starts(1, s, {{a}}), packed_docs = document_starts(1, s, {{a}});
      const MicroBatch packed{packed_tokens.view(), packed_labels.view(), packed_mask.view(), packed_pos.view(),
                              packed_docs.view()};
      const MicroBatch alone{alone_tokens.view(), alone_labels.view(), alone_mask.view()};

      GptModel model(c, 1, cpu_backend(), nullptr);
      model.params().init(9);
      ForwardOptions eval;
      eval.dropout = false;
      model.forward(packed, eval);
      const TensorView logits = model.last_logits_chunk();
      const int64_t vp = logits.dim(1);
      ASSERT_EQ(logits.dim(0), s);
      std::vector<float> packed_logits(logits.f32() + a * vp, logits.f32() + s * vp);
      model.forward(alone, eval);
      std::vector<double> alone_logits(model.last_logits_chunk().f32(), model.last_logits_chunk().f32() + len * vp);
      test::expect_close(packed_logits.data(), alone_logits, 1e-5, 1e-4, "logits of document B");

      ForwardOptions train = eval;
      train.grad_scale = 1.0f;
      model.params().zero_grads();
      const double loss_packed = model.forward(packed, train).loss_sum;
      model.backward();
      std::vector<std::vector<float>> grads_packed;
      for (Param& p : model.params().params()) grads_packed.emplace_back(p.grad.f32(), p.grad.f32() + p.grad.numel());
      model.params().zero_grads();
      const double loss_alone = model.forward(alone, train).loss_sum;
      model.backward();
      EXPECT_NEAR(loss_packed, loss_alone, 1e-5 * std::fabs(loss_alone));
      size_t k = 0;
      for (Param& p : model.params().params()) {
        std::vector<double> want(p.grad.f32(), p.grad.f32() + p.grad.numel());
        test::expect_close(grads_packed[k++].data(), want, 1e-6, 1e-3, p.name.c_str());
      }
      // Without the flags document A leaks into B: the property is not trivially true.
      const MicroBatch leaky{packed_tokens.view(), packed_labels.view(), packed_mask.view()};
      EXPECT_GT(std::fabs(model.forward(leaky, eval).loss_sum - loss_alone), 1e-3);
    }
}

// The data path: a source built with --reset-position-ids hands the micro-batch positions that
// restart after each EOD (mock data: sequences 1, 2, ..., L-1 then EOD = V-1); without it none.
TEST(DocumentMasks, MicroBatchCarriesResetPositionsFromTheDataset) {
  const int64_t V = 128, s = 64, b = 8;
  const TrainData plain = build_mock_train_data(V, s, 1234, false, {b, 0, 0});
  const TrainData reset = build_mock_train_data(V, s, 1234, false, {b, 0, 0}, SampleExtras{true, false});
  std::vector<int64_t> idx(b);
  for (int64_t j = 0; j < b; ++j) idx[j] = j;
  MicroBatchBuffer without, with;
  without.fill(*plain.train, idx);
  with.fill(*reset.train, idx);
  EXPECT_TRUE(without.position_ids.empty());
  EXPECT_TRUE(without.view(s).position_ids.empty());
  ASSERT_EQ(with.position_ids.size(), static_cast<size_t>(b * s));
  EXPECT_EQ(with.tokens, without.tokens);
  const MicroBatch batch = with.view(s);
  ASSERT_FALSE(batch.position_ids.empty());
  EXPECT_EQ(batch.position_ids.data, with.position_ids.data());
  int64_t restarts = 0;
  for (int64_t j = 0; j < b; ++j)
    for (int64_t i = 0; i < s; ++i) {
      const int64_t k = j * s + i;
      const bool after_eod = i > 0 && with.tokens[k - 1] == V - 1;
      const int32_t want = i == 0 || after_eod ? 0 : with.position_ids[k - 1] + 1;
      EXPECT_EQ(with.position_ids[k], want) << "sample " << j << " token " << i;
      restarts += after_eod;
    }
  EXPECT_GT(restarts, 0) << "no EOD inside these samples: the test proves nothing";
}

TEST(DocumentMasks, MicroBatchCarriesDocumentStartsFromTheDataset) {
  const int64_t V = 128, s = 64, b = 8;
  // --reset-attention-mask alone: document starts, no position ids.
  const TrainData data = build_mock_train_data(V, s, 1234, false, {b, 0, 0}, SampleExtras{false, true});
  std::vector<int64_t> idx(b);
  for (int64_t j = 0; j < b; ++j) idx[j] = j;
  MicroBatchBuffer buf;
  buf.fill(*data.train, idx);
  EXPECT_TRUE(buf.position_ids.empty());
  ASSERT_EQ(buf.document_start.size(), static_cast<size_t>(b * s));
  const MicroBatch batch = buf.view(s);
  EXPECT_TRUE(batch.position_ids.empty());
  ASSERT_FALSE(batch.document_start.empty());
  int64_t restarts = 0;
  for (int64_t j = 0; j < b; ++j)
    for (int64_t i = 0; i < s; ++i) {
      const int64_t k = j * s + i;
      const bool after_eod = i > 0 && buf.tokens[k - 1] == V - 1;
      const int32_t want = i == 0 ? 0 : after_eod ? static_cast<int32_t>(i) : buf.document_start[k - 1];
      EXPECT_EQ(buf.document_start[k], want) << "sample " << j << " token " << i;
      restarts += after_eod;
    }
  EXPECT_GT(restarts, 0) << "no EOD inside these samples: the test proves nothing";
}

// `megatron train` accepts both flags and they reach the model: the same run with and without
// them gives different losses once a sample holds an EOD (mock data, seq 128: about 1 in 16).
TEST(DocumentMasks, TrainWithBothFlags) {
  ModelConfig m = tiny(true);
  m.seq_length = 128;
  m.max_position_embeddings = 128;
  m.hidden_dropout = m.attention_dropout = 0.0f;
  m.vocab_size = 64;
  TrainConfig t;
  t.micro_batch_size = 4;
  t.global_batch_size = 8;
  t.train_iters = 6;
  t.log_interval = 100;
  t.eval_iters = 0;
  t.schedule.lr = 1e-3;
  Trainer plain(m, t);
  const TrainResult a = plain.run([](const std::string&) {});
  t.reset_position_ids = t.reset_attention_mask = true;
  Trainer reset(m, t);
  const TrainResult r = reset.run([](const std::string&) {});
  ASSERT_EQ(a.iterations.size(), r.iterations.size());
  double most = 0.0;
  for (size_t i = 0; i < a.iterations.size(); ++i) {
    EXPECT_TRUE(std::isfinite(r.iterations[i].loss));
    most = std::max(most, std::fabs(a.iterations[i].loss - r.iterations[i].loss));
  }
  EXPECT_GT(most, 1e-6);

  // The command line: both flags accepted, a run completes.
  ::testing::internal::CaptureStdout();
  const int rc = cmd_train({"--num-layers", "1", "--hidden-size", "32", "--num-attention-heads", "4", "--seq-length",
                            "64", "--vocab-size", "64", "--mock-data", "--micro-batch-size", "2",
                            "--global-batch-size", "4", "--train-iters", "2", "--lr", "1e-3", "--eval-iters", "1",
                            "--log-interval", "1", "--reset-position-ids", "--reset-attention-mask",
                            "--position-embedding-type", "rope"});
  const std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(rc, 0);
  EXPECT_NE(out.find(" iteration        2/       2 |"), std::string::npos) << out;
}

}  // namespace
}  // namespace mt
