// The inference engine (infer/engine.h) against the training model's own forward: every logit of
// a prefill and of each cached decode step equals the full forward's at that position (fp32,
// GPT-2 and Llama style, the latter also with RoPE on part of each head, rotate-half and
// interleaved), with sequences of different lengths sharing steps; and greedy
// generation with the cache picks the same tokens as recomputing the whole prefix every step.
#include <algorithm>
#include <cmath>
#include <vector>

#include "infer/engine.h"
#include "infer/generate.h"
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

// --rotary-percent 0.5: RoPE on the first 8 of each head's 16 elements; and with
// --rotary-interleaved, on the pairs (2i, 2i+1) of the first 4 (--rotary-percent 0.25).
ModelConfig llama_partial_rope() {
  ModelConfig m = llama_style();
  m.rotary_percent = 0.5;
  return m;
}
ModelConfig llama_interleaved_rope() {
  ModelConfig m = llama_style();
  m.rotary_percent = 0.25;
  m.rotary_interleaved = true;
  return m;
}

// Mixtral-like: every MLP a dropless top-2 mixture of experts, and a shared expert.
ModelConfig moe_style() {
  ModelConfig m = llama_style();
  m.moe.num_experts = 4;
  m.moe.router.topk = 2;
  m.moe.ffn_hidden_size = 48;
  m.moe.shared_expert_intermediate_size = 32;
  return m;
}

// DeepSeek-like routing: sigmoid scores with aux-loss-free expert biases, which steer the top-k.
ModelConfig moe_expert_bias_style() {
  ModelConfig m = moe_style();
  m.moe.router.score_function = MoeScoreFunction::sigmoid;
  m.moe.expert_bias = true;
  return m;
}

// The same nonzero router biases in a model's and an engine's MoE layers (large enough to change
// which experts the sigmoid scores pick).
void fill_expert_biases(const std::vector<std::pair<std::string, TensorView>>& biases) {
  for (size_t l = 0; l < biases.size(); ++l) {
    const TensorView& b = biases[l].second;
    for (int64_t e = 0; e < b.numel(); ++e) b.f32()[e] = 0.4f * static_cast<float>((e + static_cast<int64_t>(l)) % 3) - 0.3f;
  }
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
  model.init(seed);
  fill_expert_biases(model.stage().expert_biases());
  std::vector<int32_t> t = tokens;
  const TensorView view(t.data(), DType::i32, {1, c.seq_length});
  model.forward(MicroBatch{view, view, TensorView()}, {});
  const TensorView logits = model.last_logits_chunk();
  return std::vector<float>(logits.f32(), logits.f32() + logits.numel());
}

std::unique_ptr<InferenceEngine> engine_for(ModelConfig c, uint64_t seed, int64_t slots, int64_t step_tokens = 32) {
  c.max_position_embeddings = 24;
  c.finalize();
  EngineOptions o;
  o.slots = slots;
  o.max_step_tokens = step_tokens;
  auto engine = std::make_unique<InferenceEngine>(c, cpu_backend(), nullptr, o);
  engine->params().init(seed);  // the same layout-invariant init as the training model's
  fill_expert_biases(engine->expert_biases());
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

INSTANTIATE_TEST_SUITE_P(Inference, EngineCase,
                         ::testing::Values(&gpt2_style, &llama_style, &moe_style, &moe_expert_bias_style, &llama_partial_rope,
                                           &llama_interleaved_rope));

// Five requests through two slots and steps of 8 tokens (prompts prefilled in pieces, requests
// joining as others finish) give each request what it gets alone.
TEST_P(EngineCase, ContinuousBatchingGivesEachRequestItsOwnResult) {
  const ModelConfig c = GetParam()();
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < 5; ++i) {
    GenerationRequest r;
    r.prompt = sequence(3 + 2 * i, i);
    r.tokens_to_generate = 4 + i % 3;
    r.sampling.top_k = i == 2 ? 0 : 1;  // one sampled request
    r.sampling.seed = 77;
    r.log_probs = true;
    requests.push_back(r);
  }
  auto batched_engine = engine_for(c, 4, 2, 8);
  Generator batched(*batched_engine, -1);
  GenerationStats stats;
  const std::vector<GenerationResult> together = batched.run(requests, {}, &stats);
  EXPECT_GT(stats.prefill_tokens, 0);
  EXPECT_GT(stats.decode_tokens, 0);
  for (size_t i = 0; i < requests.size(); ++i) {
    auto alone_engine = engine_for(c, 4, 1);
    Generator alone(*alone_engine, -1);
    std::vector<GenerationRequest> one = {requests[i]};
    const GenerationResult want = alone.run(one)[0];
    // The sampled request draws by (seed, its index, step): alone it is request 0, so only greedy compare.
    if (requests[i].sampling.top_k == 1) {
      EXPECT_EQ(together[i].tokens, want.tokens) << "request " << i;
    }
    EXPECT_EQ(together[i].tokens.size(), static_cast<size_t>(requests[i].tokens_to_generate)) << "request " << i;
    EXPECT_EQ(together[i].finish_reason, "length");
    ASSERT_EQ(together[i].prompt_log_probs.size(), requests[i].prompt.size() - 1);
    for (size_t k = 0; k < want.prompt_log_probs.size(); ++k)
      EXPECT_NEAR(together[i].prompt_log_probs[k], want.prompt_log_probs[k], 1e-5) << "request " << i;
  }
}

// Prompt and generated log-probabilities are log-softmax of the full forward's logits.
TEST_P(EngineCase, LogProbabilitiesMatchTheFullForward) {
  const ModelConfig c = GetParam()();
  GenerationRequest r;
  r.prompt = sequence(9, 4);
  r.tokens_to_generate = 5;
  r.log_probs = true;
  r.top_n_log_probs = 3;
  auto engine = engine_for(c, 6, 1, 4);  // the prompt in three pieces
  Generator g(*engine, -1);
  const GenerationResult out = g.run({r})[0];
  std::vector<int32_t> all = r.prompt;
  all.insert(all.end(), out.tokens.begin(), out.tokens.end());
  const std::vector<float> logits = full_forward_logits(c, all, 6);
  const auto log_softmax = [&](int64_t row, int32_t token) {
    const float* l = logits.data() + row * 256;
    double mx = *std::max_element(l, l + 200), sum = 0.0;
    for (int v = 0; v < 200; ++v) sum += std::exp(l[v] - mx);
    return l[token] - mx - std::log(sum);
  };
  ASSERT_EQ(out.prompt_log_probs.size(), 8u);
  for (int64_t k = 0; k < 8; ++k) EXPECT_NEAR(out.prompt_log_probs[k], log_softmax(k, r.prompt[k + 1]), 1e-5) << k;
  ASSERT_EQ(out.log_probs.size(), 5u);
  ASSERT_EQ(out.top_log_probs.size(), 5u);
  for (int64_t k = 0; k < 5; ++k) {
    EXPECT_NEAR(out.log_probs[k], log_softmax(8 + k, out.tokens[k]), 1e-5) << k;
    EXPECT_EQ(out.top_log_probs[k][0].first, out.tokens[k]);  // greedy: the most likely
  }
}

// A server's use: requests submitted between steps, while others run, get what they get alone
// (a sampled one too: its draws are keyed by its own stream).
TEST(Inference, RequestsJoiningMidwayGetTheirOwnResult) {
  auto engine = engine_for(llama_style(), 8, 2, 8);
  GenerationRequest a, b;
  a.prompt = sequence(6, 1);
  a.tokens_to_generate = 9;
  b.prompt = sequence(11, 2);
  b.tokens_to_generate = 6;
  b.sampling.top_k = 0;
  b.sampling.seed = 5;
  b.stream = 42;
  Generator g(*engine, -1);
  const size_t ia = g.submit(a);
  g.step();
  g.step();
  const size_t ib = g.submit(b);
  std::vector<size_t> finished;
  while (!g.idle())
    for (size_t id : g.step()) finished.push_back(id);
  EXPECT_EQ(finished.size(), 2u);
  const auto alone = [&](const GenerationRequest& r) {
    auto e = engine_for(llama_style(), 8, 1);
    Generator solo(*e, -1);
    const size_t id = solo.submit(r);
    while (!solo.idle()) solo.step();
    return solo.result(id).tokens;
  };
  EXPECT_EQ(g.result(ia).tokens, alone(a));
  EXPECT_EQ(g.result(ib).tokens, alone(b));
  g.release(ia);
  EXPECT_THROW(g.result(ia), std::out_of_range);
}

TEST(Inference, EodAndStopChecksEndRequests) {
  auto engine = engine_for(gpt2_style(), 2, 2);
  GenerationRequest r;
  r.prompt = sequence(4, 1);
  r.tokens_to_generate = 10;
  Generator free_run(*engine, -1);
  const std::vector<int32_t> greedy = free_run.run({r})[0].tokens;
  ASSERT_EQ(greedy.size(), 10u);
  // With the greedy run's last new token as EOD, generation ends there (the EOD included).
  size_t last_new = 0;
  for (size_t k = 0; k < greedy.size(); ++k)
    if (std::find(greedy.begin(), greedy.begin() + k, greedy[k]) == greedy.begin() + k) last_new = k;
  Generator with_eod(*engine, greedy[last_new]);
  const GenerationResult eod = with_eod.run({r})[0];
  EXPECT_EQ(eod.finish_reason, "eod");
  EXPECT_EQ(eod.tokens, std::vector<int32_t>(greedy.begin(), greedy.begin() + last_new + 1));
  const GenerationResult stopped = free_run.run({r, r}, [](size_t request, const std::vector<int32_t>& t) {
    return request == 1 && t.size() == 2;
  })[1];
  EXPECT_EQ(stopped.finish_reason, "stop");
  EXPECT_EQ(stopped.tokens.size(), 2u);
  r.tokens_to_generate = 30;
  test::expect_error_mentioning([&] { free_run.run({r}); }, "exceed the 24 positions");
  r.tokens_to_generate = 0;
  r.log_probs = true;
  const GenerationResult scored = free_run.run({r})[0];
  EXPECT_TRUE(scored.tokens.empty());
  EXPECT_EQ(scored.prompt_log_probs.size(), 3u);
}

// A cancelled request, waiting or running, leaves: its slot goes to the next one, whose result is
// what it gets alone. A request's own stop token ends it in place of the generator's EOD.
TEST(Inference, CancelledRequestsLeaveAndStopTokensEndRequests) {
  auto engine = engine_for(llama_style(), 8, 1);
  GenerationRequest a, b, c;
  a.prompt = sequence(5, 1);
  b.prompt = sequence(3, 2);
  c.prompt = sequence(4, 3);
  a.tokens_to_generate = b.tokens_to_generate = c.tokens_to_generate = 8;
  Generator alone(*engine, -1);
  const std::vector<int32_t> c_alone = alone.run({c})[0].tokens;
  Generator g(*engine, -1);
  const size_t ia = g.submit(a), ib = g.submit(b), ic = g.submit(c);
  g.step();
  g.step();
  g.cancel(ia);  // running: frees the one slot
  g.cancel(ib);  // waiting
  EXPECT_THROW(g.result(ia), std::out_of_range);
  std::vector<size_t> finished;
  while (!g.idle())
    for (size_t id : g.step()) finished.push_back(id);
  EXPECT_EQ(finished, std::vector<size_t>{ic});
  EXPECT_EQ(g.result(ic).tokens, c_alone);

  ASSERT_GE(c_alone.size(), 3u);
  c.stop_token = c_alone[2];
  const size_t first = static_cast<size_t>(std::find(c_alone.begin(), c_alone.end(), c_alone[2]) - c_alone.begin());
  const GenerationResult stopped = alone.run({c})[0];
  EXPECT_EQ(stopped.finish_reason, "eod");
  EXPECT_EQ(stopped.tokens, std::vector<int32_t>(c_alone.begin(), c_alone.begin() + first + 1));
}

// What a cap on cache memory divides is what the engine allocates per slot.
TEST(Inference, KvCacheBytesPerSlotIsWhatTheEngineHolds) {
  for (ModelConfig c : {gpt2_style(), llama_style(), llama_interleaved_rope()}) {
    c.max_position_embeddings = 24;
    c.finalize();
    for (int64_t slots : {1, 3}) {
      MemoryTracker memory;
      EngineOptions o;
      o.slots = slots;
      o.max_sequence_length = 20;
      InferenceEngine engine(c, cpu_backend(), &memory, o);
      // cos and sin [24 positions, the rotated pairs] in f32: 8 pairs of the 16-wide heads, 2 at 0.25.
      const int64_t pairs = c.rotary_percent < 1.0 ? 2 : 8;
      const int64_t rope = c.position_embedding_type == PositionEmbedding::rope ? 2 * 24 * pairs * 4 : 0;
      EXPECT_EQ(static_cast<int64_t>(memory.peak(MemCategory::activations)), slots * kv_cache_bytes_per_slot(c, 20) + rope);
    }
  }
}

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
