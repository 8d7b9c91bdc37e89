// Linear layer (weights [out, in], as Megatron) through the backend's GEMM.
#pragma once

#include "tensor/tensor.h"

namespace mt {

// out[N, O] = inp[N, I] · weight[O, I]ᵀ (+ bias[O] when bias is not empty).  Saves nothing itself:
// the caller keeps `inp` for the backward.
void linear_fwd(const TensorView& out, const TensorView& inp, const TensorView& weight, const TensorView& bias);

// Accumulates:  dinp[N, I] += dout · weight   (skipped when dinp is empty)
//               dweight[O, I] += doutᵀ · inp
//               dbias[O] += Σ_rows dout         (skipped when dbias is empty)
void linear_bwd(const TensorView& dinp, const TensorView& dweight, const TensorView& dbias, const TensorView& dout,
                const TensorView& inp, const TensorView& weight);

}  // namespace mt
