// CPU kernels for ops/linear.h (shapes already validated by the op).
#pragma once

#include "tensor/tensor.h"

namespace mt::cpu {

void linear_fwd(const TensorView& out, const TensorView& inp, const TensorView& weight, const TensorView& bias);
void linear_bwd(const TensorView& dinp, const TensorView& dweight, const TensorView& dbias, const TensorView& dout,
                const TensorView& inp, const TensorView& weight);

}  // namespace mt::cpu
