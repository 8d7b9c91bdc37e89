#include "model/blocks/norm_act.h"

#include "ops/activation.h"
#include "ops/norm.h"

namespace mt {

namespace {
// --apply-layernorm-1p: the kernels scale by weight + 1.
float weight_offset(const ModelConfig& c) { return c.layernorm_zero_centered_gamma ? 1.0f : 0.0f; }
}  // namespace

void norm_fwd(const ModelConfig& c, const TensorView& out, const TensorView& mean, const TensorView& rstd,
              const TensorView& inp, const TensorView& weight, const TensorView& bias) {
  if (c.normalization == Normalization::layernorm)
    layernorm_fwd(out, mean, rstd, inp, weight, bias, c.norm_epsilon, weight_offset(c));
  else
    rmsnorm_fwd(out, rstd, inp, weight, c.norm_epsilon, weight_offset(c));
}

void norm_bwd(const ModelConfig& c, const TensorView& dinp, const TensorView& dweight, const TensorView& dbias,
              const TensorView& dout, const TensorView& inp, const TensorView& weight, const TensorView& mean,
              const TensorView& rstd) {
  if (c.normalization == Normalization::layernorm)
    layernorm_bwd(dinp, dweight, dbias, dout, inp, weight, mean, rstd, weight_offset(c));
  else
    rmsnorm_bwd(dinp, dweight, dout, inp, weight, rstd, weight_offset(c));
}

NormStats alloc_norm_stats(Arena& a, const ModelConfig& c, int64_t rows) {
  NormStats stats;
  if (c.normalization == Normalization::layernorm) stats.mean = a.alloc(DType::f32, {rows});
  stats.rstd = a.alloc(DType::f32, {rows});
  return stats;
}

void norm_fwd(const ModelConfig& c, const TensorView& out, const NormStats& stats, const TensorView& inp,
              const NormWeights& w) {
  norm_fwd(c, out, stats.mean, stats.rstd, inp, w.weight, w.bias);
}

void norm_bwd(const ModelConfig& c, const TensorView& dinp, const NormWeights& g, const TensorView& dout,
              const TensorView& inp, const NormWeights& w, const NormStats& stats) {
  norm_bwd(c, dinp, g.weight, g.bias, dout, inp, w.weight, stats.mean, stats.rstd);
}

void mlp_activation_fwd(const ModelConfig& c, const TensorView& out, const TensorView& inp) {
  if (c.activation == Activation::swiglu) return swiglu_fwd(out, inp);
  pointwise_activation_fwd(out, inp, pointwise_activation(c.activation));
}

void mlp_activation_bwd(const ModelConfig& c, const TensorView& dinp, const TensorView& dout, const TensorView& inp) {
  if (c.activation == Activation::swiglu) return swiglu_bwd(dinp, dout, inp);
  pointwise_activation_bwd(dinp, dout, inp, pointwise_activation(c.activation));
}

}  // namespace mt
