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

namespace mt {
namespace {

// Megatron's MoE terms: per MoE layer 12·h·gated·(moe_ffn·k + shared) per token (gated 1.5 under
// SwiGLU), dense layers keep 12·h·gated·ffn; the rest of the formula is unchanged. An MoE layer's
// full recomputation reruns its experts whole (fc1 and fc2).
TEST(PlanFlops, MoeLayersCountTheirRoutedAndSharedExperts) {
  ModelConfig dense = gpt(4, 64, 4, 32, 100);
  dense.activation = Activation::swiglu;
  dense.ffn_hidden_size = 96;
  dense.add_bias_linear = false;
  dense.finalize();
  ModelConfig moe = dense;
  moe.moe.num_experts = 8;
  moe.moe.router.topk = 2;
  moe.moe.ffn_hidden_size = 40;
  moe.moe.shared_expert_intermediate_size = 24;
  moe.moe.layer_freq = "[0,1,1,1]";
  moe.finalize();
  const int64_t B = 3;
  const double tokens = 3.0 * 32, h = 64, gated = 1.5;
  const double per_moe_layer = 12.0 * h * gated * (40 * 2 + 24 - 96);
  EXPECT_NEAR(flops_per_iteration(moe, B) - flops_per_iteration(dense, B), 3 * tokens * per_moe_layer,
              1e-9 * flops_per_iteration(dense, B));
  // Full recomputation in groups of one: the dense layer saves its fc2 rerun, the MoE layers do not.
  for (ModelConfig* c : {&dense, &moe}) {
    c->recompute_granularity = RecomputeGranularity::full;
    c->recompute_num_layers = 1;
    c->attention_impl = AttentionImpl::unfused;
    c->finalize();
  }
  const double rerun_moe = 2.0 * h * (2 * (40 * 2 + 24) + (40 * 2 + 24)), dense_fc1 = 2.0 * h * 2 * 96;
  EXPECT_NEAR(recompute_flops(moe, StageRange::whole(moe), B) - recompute_flops(dense, StageRange::whole(dense), B),
              3 * tokens * (rerun_moe - dense_fc1), 1e-9 * recompute_flops(dense, StageRange::whole(dense), B));
  // Selective modules (unfused attention: no score rerun): mlp reruns the dense layer's fc1 only,
  // shared_experts each MoE layer's shared fc1, moe each MoE block whole (and with both, the
  // rerun block's shared fc1 once more).
  const double shared_fc1 = 2.0 * h * 2 * 24;
  moe.recompute_granularity = RecomputeGranularity::selective;
  moe.recompute_core_attn = false;
  const auto rerun = [&](bool mlp, bool shared, bool block) {
    moe.recompute_mlp = mlp;
    moe.recompute_shared_experts = shared;
    moe.recompute_moe = block;
    moe.finalize();
    return recompute_flops(moe, StageRange::whole(moe), B);
  };
  EXPECT_DOUBLE_EQ(rerun(true, false, false), tokens * dense_fc1);
  EXPECT_DOUBLE_EQ(rerun(false, true, false), 3 * tokens * shared_fc1);
  EXPECT_NEAR(rerun(false, false, true), 3 * tokens * rerun_moe, 1e-9 * tokens * rerun_moe);
  EXPECT_NEAR(rerun(true, true, true), tokens * (dense_fc1 + 3 * (rerun_moe + shared_fc1)), 1e-9 * tokens * rerun_moe);
}

}  // namespace
}  // namespace mt
