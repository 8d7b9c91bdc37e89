#include "plan/flops.h"

#include "model/recompute.h"

namespace mt {

namespace {
// The MLP width one token goes through in an MoE layer: its k routed experts and the shared one.
double moe_active_ffn(const ModelConfig& c) {
  return static_cast<double>(c.moe.ffn_hidden_size * c.moe.router.topk + c.moe.shared_expert_intermediate_size);
}
}  // namespace

double flops_per_iteration(const ModelConfig& c, int64_t global_batch) {
  const double s = static_cast<double>(c.seq_length);
  const double tokens = static_cast<double>(global_batch) * s;           // T
  const double sum_sq_lengths = static_cast<double>(global_batch) * s * s;  // S2
  const double h = static_cast<double>(c.hidden_size), f = static_cast<double>(c.ffn_hidden_size);
  const double n = static_cast<double>(c.num_attention_heads), g = static_cast<double>(c.num_query_groups);
  const double d = static_cast<double>(c.kv_channels), L = static_cast<double>(c.num_layers);
  const double V = static_cast<double>(c.padded_vocab_size());
  const double F = c.activation == Activation::swiglu ? 3.0 : 2.0;
  double mlp = 0.0;  // Σ over layers of 6·h·F·(the MLP width a token goes through)
  for (int64_t i = 0; i < c.num_layers; ++i)
    mlp += 6.0 * h * F * (c.mlp_kind(i) == MlpKind::moe ? moe_active_ffn(c) : f);
  const double attention_linear = L * 6.0 * (h * (n * d + 2.0 * g * d) + n * d * h);
  const double logits = 6.0 * h * V;
  return tokens * (mlp + attention_linear + logits) + sum_sq_lengths * L * 6.0 * n * d;
}

double recompute_flops(const ModelConfig& c, const StageRange& range, int64_t sequences) {
  const double s = static_cast<double>(c.seq_length), tokens = static_cast<double>(sequences) * s;
  const double h = static_cast<double>(c.hidden_size), f = static_cast<double>(c.ffn_hidden_size);
  const double nd = static_cast<double>(c.num_attention_heads * c.kv_channels);
  const double gd = static_cast<double>(c.num_query_groups * c.kv_channels);
  const double gated = c.activation == Activation::swiglu ? 2.0 : 1.0;
  const double fc1 = 2.0 * h * gated * f, fc2 = 2.0 * f * h;
  const double moe_f = c.moe.enabled() ? moe_active_ffn(c) : 0.0;
  const double moe_mlp = 2.0 * h * gated * moe_f + 2.0 * moe_f * h;  // routed and shared experts, fc1 and fc2
  const double scores = nd * s;  // QKᵀ per token, causal half
  const double attention = 2.0 * h * (nd + 2.0 * gd) + 2.0 * nd * h + 2.0 * scores;
  // Every layer: the flash backward remakes the scores. Selective --recompute-modules: mlp reruns a
  // dense layer's fc1, shared_experts the shared expert's, moe the whole block's experts (the
  // router's GEMM is outside Megatron's formula).
  const bool selective = c.recompute_granularity == RecomputeGranularity::selective;
  const double flash = c.attention_impl == AttentionImpl::flash ? scores : 0.0;
  const double shared_fc1 = 2.0 * h * gated * static_cast<double>(c.moe.shared_expert_intermediate_size);
  const double moe_rerun = !selective ? 0.0
                           : c.recompute_moe ? moe_mlp + (c.recompute_shared_experts ? shared_fc1 : 0.0)
                           : c.recompute_shared_experts ? shared_fc1 : 0.0;
  const RecomputePlan plan(c, range);
  double per_token = 0.0;
  for (int64_t i = range.first_layer; i < range.last_layer; ++i) {
    const bool moe = c.mlp_kind(i) == MlpKind::moe;
    per_token += flash + (moe ? moe_rerun : selective && c.recompute_mlp ? fc1 : 0.0);
    if (plan.group_first(i) >= 0)
      per_token += attention + (moe ? moe_mlp : fc1 + (plan.group_last(i) ? 0.0 : fc2));
  }
  return tokens * per_token;
}

}  // namespace mt
