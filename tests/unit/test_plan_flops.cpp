// plan/flops: Megatron's FLOPs formula against the closed form of Narayanan et al. for a
// standard GPT (ffn 4h, one query group per head, GeLU) with causal scores counted at half:
// 72·B·s·L·h²·(1 + s/(12h) + V/(12·L·h)); and what recomputation adds, tied to that formula:
// rerunning every layer's forward (groups of L, less the one fc2 whose output is kept) is a third
// of the formula's layer FLOPs; each smaller group keeps one more fc2 output; the flash path's
// backward remakes the scores, QKᵀ at half; selective mlp reruns fc1.
#include "model/config.h"
#include "plan/flops.h"
#include "testing.h"

namespace mt {
namespace {

ModelConfig gpt(int64_t layers, int64_t h, int64_t heads, int64_t s, int64_t vocab) {
  ModelConfig c;
  c.num_layers = layers;
  c.hidden_size = h;
  c.num_attention_heads = heads;
  c.seq_length = s;
  c.vocab_size = vocab;
  c.make_vocab_size_divisible_by = 1;
  c.finalize();
  return c;
}

TEST(PlanFlops, MegatronsFormulaIsTheClosedFormForAStandardGpt) {
  for (const auto& [L, h, a, s, V, B] : {std::tuple{96, 12288, 96, 2048, 51200, 1536}, std::tuple{2, 64, 4, 32, 100, 3}}) {
    const ModelConfig c = gpt(L, h, a, s, V);
    const double Ld = L, hd = h, sd = s, Vd = V;
    const double closed = 72.0 * B * sd * Ld * hd * hd * (1.0 + sd / (12.0 * hd) + Vd / (12.0 * Ld * hd));
    EXPECT_NEAR(flops_per_iteration(c, B) / closed, 1.0, 1e-12) << "L " << L;
  }
}

TEST(PlanFlops, RecomputationAddsWhatItReruns) {
  const int64_t L = 4, h = 64, n = 4, s = 32, V = 100, B = 3;
  ModelConfig c = gpt(L, h, n, s, V);
  const StageRange whole = StageRange::whole(c);
  const double tokens = static_cast<double>(B * s);
  const double logits = 6.0 * tokens * h * V, fc2 = 2.0 * 4 * h * h, fc1 = fc2, scores = static_cast<double>(h * s);
  c.attention_impl = AttentionImpl::unfused;
  EXPECT_EQ(recompute_flops(c, whole, B), 0.0);
  c.recompute_granularity = RecomputeGranularity::full;
  c.recompute_method = RecomputeMethod::uniform;
  c.recompute_num_layers = L;
  const double one_group = recompute_flops(c, whole, B);
  EXPECT_NEAR(3.0 * (one_group + tokens * fc2), flops_per_iteration(c, B) - logits, 1e-6 * one_group);
  c.recompute_num_layers = 1;
  EXPECT_NEAR(one_group - recompute_flops(c, whole, B), (L - 1) * tokens * fc2, 1e-6 * one_group);
  c.recompute_granularity = RecomputeGranularity::none;
  c.attention_impl = AttentionImpl::flash;
  EXPECT_DOUBLE_EQ(recompute_flops(c, whole, B), L * tokens * scores);
  c.recompute_granularity = RecomputeGranularity::selective;
  c.recompute_mlp = true;
  EXPECT_DOUBLE_EQ(recompute_flops(c, whole, B), L * tokens * (scores + fc1));
  // A stage's share: its layers only.
  EXPECT_DOUBLE_EQ(recompute_flops(c, {1, 3, false, false}, B), 2 * tokens * (scores + fc1));
}

}  // namespace
}  // namespace mt
