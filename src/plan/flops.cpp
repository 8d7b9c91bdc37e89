#include "plan/flops.h"

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

}  // namespace mt
