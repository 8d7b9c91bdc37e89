// LayerNorm and RMSNorm over the last dimension; rows are flattened [s·b] tokens.
#pragma once

#include "tensor/tensor.h"

namespace mt {

// weight_offset: the scale applied is weight + weight_offset (1: Megatron's zero-centred gamma,
// --apply-layernorm-1p, whose weights start at 0); the weight gradient is unchanged by it.

// out[N, h] = (inp − mean) · rstd · (weight[h] + weight_offset) (+ bias[h] when not empty),
// rstd = 1/√(var + eps), var the biased variance.  Saves mean[N] and rstd[N] (f32) for the backward.
void layernorm_fwd(const TensorView& out, const TensorView& mean, const TensorView& rstd, const TensorView& inp,
                   const TensorView& weight, const TensorView& bias, float eps, float weight_offset = 0.0f);

// Accumulates dinp[N, h], dweight[h], dbias[h] (dbias skipped when empty).
void layernorm_bwd(const TensorView& dinp, const TensorView& dweight, const TensorView& dbias,
                   const TensorView& dout, const TensorView& inp, const TensorView& weight, const TensorView& mean,
                   const TensorView& rstd, float weight_offset = 0.0f);

// out[N, h] = inp · rstd · (weight[h] + weight_offset), rstd = 1/√(mean(inp²) + eps).  Saves rstd[N].
void rmsnorm_fwd(const TensorView& out, const TensorView& rstd, const TensorView& inp, const TensorView& weight,
                 float eps, float weight_offset = 0.0f);

// Accumulates dinp[N, h] and dweight[h].
void rmsnorm_bwd(const TensorView& dinp, const TensorView& dweight, const TensorView& dout, const TensorView& inp,
                 const TensorView& weight, const TensorView& rstd, float weight_offset = 0.0f);

}  // namespace mt
