// The inference engine (infer/engine.h) against the training model's own forward: every logit of
// a prefill and of each cached decode step equals the full forward's at that position (fp32,
// GPT-2 and Llama style), with sequences of different lengths sharing steps; and greedy
// generation with the cache picks the same tokens as recomputing the whole prefix every step.
#include <algorithm>
#include <cmath>
#include <vector>

#include "infer/engine.h"
#include "model/gpt.h"
#include "testing.h"

namespace mt {
namespace {

ModelConfig gpt2_style() {
  ModelConfig m;
  m.num_layers = 2;
  m.hidden_size = 64;
  m.num_attention_heads = 4;
  m.seq_length = 24;
  m.vocab_size = 200;
  m.activation = Activation::gelu_tanh;
  m.hidden_dropout = m.attention_dropout = 0.0f;
  return m;
}

ModelConfig llama_style() {
  ModelConfig m = gpt2_style();
  m.num_query_groups = 2;
  m.normalization = Normalization::rmsnorm;
  m.position_embedding_type = PositionEmbedding::rope;
  m.activation = Activation::swiglu;
  m.add_bias_linear = false;
  m.untie_embeddings_and_output_weights = true;
  return m;
}

// The logits of every position of `tokens` from the training model's forward (no cache).
std::vector<float> full_forward_logits(ModelConfig c, const std::vector<int32_t>& tokens, uint64_t seed) {
  c.seq_length = static_cast<int64_t>(tokens.size());
  c.max_position_embeddings = 24;
  c.finalize();
  MemoryTracker memory;
  GptModelOptions options;
  options.head_chunk_tokens = c.seq_length;
  GptModel model(c, 1, cpu_backend(), &memory, options);
  model.params().init(seed);
  std::vector<int32_t> t = tokens;
  const TensorView view(t.data(), DType::i32, {1, c.seq_length});
  model.forward(MicroBatch{view, view, TensorView()}, {});
  const TensorView logits = model.last_logits_chunk();
  return std::vector<float>(logits.f32(), logits.f32() + logits.numel());
}

std::unique_ptr<InferenceEngine> engine_for(ModelConfig c, uint64_t seed, int64_t slots) {
  c.max_position_embeddings = 24;
  c.finalize();
  EngineOptions o;
  o.slots = slots;
  o.max_step_tokens = 32;
  auto engine = std::make_unique<InferenceEngine>(c, cpu_backend(), nullptr, o);
  engine->params().init(seed);  // the same layout-invariant init as the training model's
  return engine;
}

double max_diff(const float* a, const float* b, int64_t n) {
  double m = 0.0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, static_cast<double>(std::fabs(a[i] - b[i])));
  return m;
}

std::vector<int32_t> sequence(int64_t n, int32_t salt) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) t[i] = static_cast<int32_t>((i * 37 + salt * 11 + 5) % 200);
  return t;
}

class EngineCase : public ::testing::TestWithParam<ModelConfig (*)()> {};

TEST_P(EngineCase, CachedStepsGiveTheFullForwardsLogits) {
  const ModelConfig c = GetParam()();
  const int64_t vocab = 256;  // padded
  const std::vector<int32_t> a = sequence(20, 1), b = sequence(13, 2);
  const std::vector<float> want_a = full_forward_logits(c, a, 42), want_b = full_forward_logits(c, b, 42);
  auto engine = engine_for(c, 42, 3);
  // Step 1: a's prompt of 6 (all logits) and b's of 9 (last only), in slots 2 and 0.
  std::vector<SequenceChunk> step = {{2, 0, a.data(), 6, true}, {0, 0, b.data(), 9, false}};
  TensorView logits = engine->step(step);
  ASSERT_EQ(logits.dim(0), 7);
  ASSERT_EQ(logits.dim(1), vocab);
  double worst = max_diff(logits.f32(), want_a.data(), 6 * vocab);
  worst = std::max(worst, max_diff(logits.f32() + 6 * vocab, want_b.data() + 8 * vocab, vocab));
  // Then one token per step for both (b stops at its end), a also fed two at a time once.
  int64_t pa = 6, pb = 9;
  while (pa < 20) {
    step.clear();
    const int64_t na = pa == 10 ? 2 : 1;
    step.push_back({2, pa, a.data() + pa, na, false});
    if (pb < 13) step.push_back({0, pb, b.data() + pb, 1, false});
    logits = engine->step(step);
    worst = std::max(worst, max_diff(logits.f32(), want_a.data() + (pa + na - 1) * vocab, vocab));
    if (pb < 13) worst = std::max(worst, max_diff(logits.f32() + vocab, want_b.data() + pb * vocab, vocab));
    pa += na;
    pb += 1;
  }
  std::printf("cached steps against the full forward: max |logit diff| %.3e\n", worst);
  EXPECT_LE(worst, 1e-5);
}

TEST_P(EngineCase, GreedyWithTheCacheEqualsRecomputingThePrefix) {
  const ModelConfig c = GetParam()();
  const int64_t vocab = 256, real_vocab = 200;
  const auto argmax = [&](const float* row) {
    return static_cast<int32_t>(std::max_element(row, row + real_vocab) - row);
  };
  std::vector<int32_t> cached = sequence(5, 3);
  auto engine = engine_for(c, 9, 1);
  TensorView logits = engine->step({{0, 0, cached.data(), 5, false}});
  for (int i = 0; i < 12; ++i) {
    cached.push_back(argmax(logits.f32()));
    logits = engine->step({{0, static_cast<int64_t>(cached.size()) - 1, &cached.back(), 1, false}});
  }
  std::vector<int32_t> recomputed = sequence(5, 3);
  for (int i = 0; i < 12; ++i) {
    const std::vector<float> all = full_forward_logits(c, recomputed, 9);
    recomputed.push_back(argmax(all.data() + (recomputed.size() - 1) * vocab));
  }
  EXPECT_EQ(cached, recomputed);
}

INSTANTIATE_TEST_SUITE_P(Inference, EngineCase, ::testing::Values(&gpt2_style, &llama_style));

TEST(Inference, StepsOutsideTheEngineAreRefused) {
  auto engine = engine_for(gpt2_style(), 1, 2);
  const std::vector<int32_t> t = sequence(30, 1);
  test::expect_error_mentioning([&] { engine->step({{2, 0, t.data(), 1, false}}); }, "cache slot 2 of 2");
  test::expect_error_mentioning([&] { engine->step({{0, 20, t.data(), 5, false}}); }, "does not fit the cache's 24");
  std::vector<int32_t> bad = {250};
  test::expect_error_mentioning([&] { engine->step({{0, 0, bad.data(), 1, false}}); }, "outside the vocabulary");
}

}  // namespace
}  // namespace mt
