// CPU kernels for ops/activation.h (shapes already validated by the op).
#pragma once

#include "backend/activation_args.h"
#include "tensor/tensor.h"

namespace mt::cpu {

void pointwise_activation_fwd(const TensorView& out, const TensorView& inp, PointwiseActivation act);
void pointwise_activation_bwd(const TensorView& dinp, const TensorView& dout, const TensorView& inp, PointwiseActivation act);
void swiglu_fwd(const TensorView& out, const TensorView& inp);
void swiglu_bwd(const TensorView& dinp, const TensorView& dout, const TensorView& inp);

}  // namespace mt::cpu
