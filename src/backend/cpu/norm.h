// CPU kernels for ops/norm.h (shapes already validated by the op; rows = numel / h).
#pragma once

#include "tensor/tensor.h"

namespace mt::cpu {

void layernorm_fwd(const TensorView& out, const TensorView& mean, const TensorView& rstd, const TensorView& inp,
                   const TensorView& weight, const TensorView& bias, float eps, float weight_offset);
void layernorm_bwd(const TensorView& dinp, const TensorView& dweight, const TensorView& dbias,
                   const TensorView& dout, const TensorView& inp, const TensorView& weight, const TensorView& mean,
                   const TensorView& rstd, float weight_offset);
void rmsnorm_fwd(const TensorView& out, const TensorView& rstd, const TensorView& inp, const TensorView& weight,
                 float eps, float weight_offset);
void rmsnorm_bwd(const TensorView& dinp, const TensorView& dweight, const TensorView& dout, const TensorView& inp,
                 const TensorView& weight, const TensorView& rstd, float weight_offset);

}  // namespace mt::cpu
