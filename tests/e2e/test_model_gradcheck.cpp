// Whole-model gradient check: the analytic gradient of the GPT loss (dropout on, masks fixed by
// the dropout round) against central finite differences, for sampled entries of every parameter.
#include <cmath>
#include <cstdio>
#include <functional>

#include "model/gpt.h"
#include "testing.h"

namespace mt {
namespace {

ModelConfig tiny(bool llama) { return test::tiny_gpt(llama, 9); }

// `variant` changes the tiny GPT-2 or Llama style model before it is finalized.
void gradcheck(bool llama, const std::function<void(ModelConfig&)>& variant = {}) {
  ModelConfig c = tiny(llama);
  if (variant) variant(c);
  c.finalize();
  const int64_t b = 2;
  GptModel model(c, b, cpu_backend(), nullptr);
  model.params().init(7);
  // Give biases and norm weights non-trivial values so their gradients are tested too.
  for (Param& p : model.params().params())
    if (p.init == InitKind::ones || p.init == InitKind::zeros)
      for (int64_t i = 0; i < p.value.numel(); ++i)
        p.value.f32()[i] += 0.1f * RngStream{3, stream_id(p.name)}.normal(static_cast<uint64_t>(i));
  test::HostTensor tokens = test::randint({b, c.seq_length}, static_cast<int32_t>(c.vocab_size), 11);
  test::HostTensor labels = test::randint({b, c.seq_length}, static_cast<int32_t>(c.vocab_size), 12);
  test::HostTensor mask = test::randn({b, c.seq_length}, 13);
  for (int64_t i = 0; i < mask.numel(); ++i) mask.f32()[i] = mask.f32()[i] > -0.5f ? 1.0f : 0.0f;
  const uint64_t round = 5;

  const MicroBatch batch{tokens.view(), labels.view(), mask.view()};
  ForwardOptions train;
  train.first_sample = round;
  train.grad_scale = 0.7f;  // any scale: the gradient is of 0.7 · loss_sum
  model.params().zero_grads();
  model.forward(batch, train);
  model.backward();

  ForwardOptions probe = train;
  probe.grad_scale = 0.0f;  // same masks, no gradient work
  auto loss = [&] { return 0.7 * model.forward(batch, probe).loss_sum; };
  for (Param& p : model.params().params()) {
    // A bias added to every key shifts all of a query's scores by the same q·b, which the softmax
    // ignores: its true gradient is 0, and a finite difference only sees rounding.
    if (p.name.find("k_layernorm.bias") != std::string::npos) {
      for (int64_t i = 0; i < p.grad.numel(); ++i) EXPECT_NEAR(p.grad.f32()[i], 0.0f, 1e-5f) << p.name << "[" << i << "]";
      continue;
    }
    // Probe the 6 entries with the largest analytic gradient plus 4 spread ones.
    std::vector<int64_t> idx;
    std::vector<std::pair<float, int64_t>> order;
    for (int64_t i = 0; i < p.grad.numel(); ++i) order.push_back({-std::fabs(p.grad.f32()[i]), i});
    std::partial_sort(order.begin(), order.begin() + std::min<size_t>(6, order.size()), order.end());
    for (size_t i = 0; i < std::min<size_t>(6, order.size()); ++i) idx.push_back(order[i].second);
    for (int64_t k = 1; k <= 4; ++k) idx.push_back(p.grad.numel() * k / 5);
    double num = 0.0, den = 0.0;
    for (int64_t i : idx) {
      float* w = p.value.f32() + i;
      const float saved = *w;
      const double h = 1e-2;
      *w = static_cast<float>(saved + h);
      const double up = loss();
      *w = static_cast<float>(saved - h);
      const double down = loss();
      *w = saved;
      const double fd = (up - down) / (2 * h);
      num += (fd - p.grad.f32()[i]) * (fd - p.grad.f32()[i]);
      den += fd * fd;
    }
    const double rel = std::sqrt(num / std::max(den, 1e-20));
    // Central differences with h = 1e-2 on an fp32 model: truncation and rounding stay below ~1%;
    // a sign flip or a dropped term gives O(1).
    EXPECT_LT(rel, 2e-2) << p.name << " relative error " << rel << " (|g| " << std::sqrt(den) << ")";
    EXPECT_GT(den, 1e-14) << p.name << " has no gradient at the probed entries";
  }
}

TEST(ModelGradcheck, Gpt2StyleWithDropout) { gradcheck(false); }
TEST(ModelGradcheck, LlamaStyleWithDropout) { gradcheck(true); }
TEST(ModelGradcheck, UnfusedAttentionWithDropout) {
  gradcheck(true, [](ModelConfig& c) { c.attention_impl = AttentionImpl::unfused; });
}
// Head dim 6 at --rotary-percent 0.5: rotary dim 3, so 2 pairs rotated and 2 elements passed through.
TEST(ModelGradcheck, PartialInterleavedRope) {
  gradcheck(true, [](ModelConfig& c) {
    c.rotary_percent = 0.5;
    c.rotary_interleaved = true;
  });
}
TEST(ModelGradcheck, SquaredRelu) { gradcheck(false, [](ModelConfig& c) { c.activation = Activation::squared_relu; }); }
// --qk-layernorm: RMSNorm query and key heads before RoPE (Qwen3), and LayerNorm ones with their
// biases in the GPT-2 style model (no RoPE); the first with grouped-query attention.
TEST(ModelGradcheck, QkLayernormLlamaStyle) {
  gradcheck(true, [](ModelConfig& c) {
    c.qk_layernorm = true;
  });
}
TEST(ModelGradcheck, QkLayernormGpt2Style) { gradcheck(false, [](ModelConfig& c) { c.qk_layernorm = true; }); }

TEST(ModelGradcheck, DropoutRoundChangesMasksAndEvaluationHasNone) {
  ModelConfig c = tiny(false);
  GptModel model(c, 2, cpu_backend(), nullptr);
  model.params().init(7);
  test::HostTensor tokens = test::randint({2, c.seq_length}, 37, 1), labels = test::randint({2, c.seq_length}, 37, 2);
  const MicroBatch batch{tokens.view(), labels.view(), TensorView()};
  ForwardOptions round1, round2, eval;
  round1.first_sample = 1;
  round2.first_sample = 2;
  eval.dropout = false;
  eval.first_sample = 1;
  const double a = model.forward(batch, round1).loss_sum;
  EXPECT_EQ(model.forward(batch, round1).loss_sum, a);
  EXPECT_NE(model.forward(batch, round2).loss_sum, a);
  // Without dropout the round does not matter.
  const double e = model.forward(batch, eval).loss_sum;
  eval.first_sample = 2;
  EXPECT_EQ(model.forward(batch, eval).loss_sum, e);
  EXPECT_NE(e, a);
}

TEST(ModelGradcheck, MisuseIsAnErrorNotASilentlyWrongGradient) {
  const ModelConfig c = tiny(false);
  GptModel model(c, 2, cpu_backend(), nullptr);
  test::HostTensor tokens = test::randint({2, c.seq_length}, 37, 1), labels = test::randint({2, c.seq_length}, 37, 2);
  const MicroBatch batch{tokens.view(), labels.view(), TensorView()};
  EXPECT_THROW(model.backward(), Error);  // no forward yet
  ForwardOptions train;
  train.grad_scale = 1.0f;
  model.forward(batch, train);
  EXPECT_THROW(model.forward(batch, train), Error);  // the first one's backward is pending
  model.backward();
  EXPECT_THROW(model.backward(), Error);  // one backward per forward
  ModelConfig raw;
  raw.vocab_size = 10;
  EXPECT_THROW(GptModel(raw, 2, cpu_backend(), nullptr), Error);  // not finalized
}

}  // namespace
}  // namespace mt

namespace mt {
namespace {

// The output layer runs in chunks of rows; the chunking must not change the loss or a gradient.
TEST(ModelGradcheck, OutputLayerChunkingDoesNotChangeResults) {
  const ModelConfig c = tiny(true);
  test::HostTensor tokens = test::randint({3, c.seq_length}, 37, 1), labels = test::randint({3, c.seq_length}, 37, 2);
  const MicroBatch batch{tokens.view(), labels.view(), TensorView()};
  ForwardOptions train;
  train.grad_scale = 0.25f;
  std::vector<std::vector<float>> grads[2];
  double losses[2];
  const int64_t chunks[2] = {5, 1000};  // 27 rows: six chunks (the last one short), or one
  for (int k = 0; k < 2; ++k) {
    GptModelOptions options;
    options.head_chunk_tokens = chunks[k];
    GptModel model(c, 3, cpu_backend(), nullptr, options);
    model.params().init(3);
    model.params().zero_grads();
    losses[k] = model.forward(batch, train).loss_sum;
    model.backward();
    for (const Param& p : model.params().params()) grads[k].emplace_back(p.grad.f32(), p.grad.f32() + p.grad.numel());
  }
  EXPECT_NEAR(losses[0], losses[1], 1e-5 * std::fabs(losses[1]));
  for (size_t i = 0; i < grads[0].size(); ++i)
    for (size_t j = 0; j < grads[0][i].size(); ++j)
      ASSERT_NEAR(grads[0][i][j], grads[1][i][j], 1e-6 + 1e-5 * std::fabs(grads[1][i][j])) << "param " << i;
}

}  // namespace
}  // namespace mt
