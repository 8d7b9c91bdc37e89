#include "plan/flops.h"

#include "model/recompute.h"

namespace mt {

double flops_per_iteration(const ModelConfig& c, int64_t global_batch) {
  const double s = static_cast<double>(c.seq_length);
  const double tokens = static_cast<double>(global_batch) * s;           // T
  const double sum_sq_lengths = static_cast<double>(global_batch) * s * s;  // S2
  const double h = static_cast<double>(c.hidden_size), f = static_cast<double>(c.ffn_hidden_size);
  const double n = static_cast<double>(c.num_attention_heads), g = static_cast<double>(c.num_query_groups);
  const double d = static_cast<double>(c.kv_channels), L = static_cast<double>(c.num_layers);
  const double V = static_cast<double>(c.padded_vocab_size());
  const double F = c.activation == Activation::swiglu ? 3.0 : 2.0;
  const double mlp = 6.0 * h * F * f * L;
  const double attention_linear = L * 6.0 * (h * (n * d + 2.0 * g * d) + n * d * h);
  const double logits = 6.0 * h * V;
  return tokens * (mlp + attention_linear + logits) + sum_sq_lengths * L * 6.0 * n * d;
}

double recompute_flops(const ModelConfig& c, const StageRange& range, int64_t sequences) {
  const double s = static_cast<double>(c.seq_length), tokens = static_cast<double>(sequences) * s;
  const double h = static_cast<double>(c.hidden_size), f = static_cast<double>(c.ffn_hidden_size);
  const double nd = static_cast<double>(c.num_attention_heads * c.kv_channels);
  const double gd = static_cast<double>(c.num_query_groups * c.kv_channels);
  const double fc1 = 2.0 * h * static_cast<double>(c.fc1_size()), fc2 = 2.0 * f * h;
  const double scores = nd * s;  // QKᵀ per token, causal half
  const double forward = 2.0 * h * (nd + 2.0 * gd) + 2.0 * nd * h + fc1 + fc2 + 2.0 * scores;
  // Every layer: the flash backward remakes the scores; selective --recompute-modules mlp reruns fc1.
  const bool selective = c.recompute_granularity == RecomputeGranularity::selective;
  const double always = (c.attention_impl == AttentionImpl::flash ? scores : 0.0) + (selective && c.recompute_mlp ? fc1 : 0.0);
  const RecomputePlan plan(c, range);
  double per_token = 0.0;
  for (int64_t i = range.first_layer; i < range.last_layer; ++i) {
    per_token += always;
    if (plan.group_first(i) >= 0) per_token += forward - (plan.group_last(i) ? fc2 : 0.0);
  }
  return tokens * per_token;
}

}  // namespace mt
