// MLP activations: pointwise ones (GeLU in its erf and tanh forms, squared ReLU) and SwiGLU.
#pragma once

#include "backend/activation_args.h"  // PointwiseActivation, shared with the kernels
#include "tensor/tensor.h"

namespace mt {

// out[N, f] = act(inp[N, f]).  The caller keeps inp for the backward.
void pointwise_activation_fwd(const TensorView& out, const TensorView& inp, PointwiseActivation act);
// dinp[N, f] += dout · act'(inp).
void pointwise_activation_bwd(const TensorView& dinp, const TensorView& dout, const TensorView& inp,
                              PointwiseActivation act);

// inp[N, 2f] = [gate | up] (Megatron's linear_fc1 chunk(2) on the last dim);
// out[N, f] = silu(gate) · up, silu(x) = x·σ(x).  The caller keeps inp for the backward.
void swiglu_fwd(const TensorView& out, const TensorView& inp);
// dinp[N, 2f] += [dgate | dup].
void swiglu_bwd(const TensorView& dinp, const TensorView& dout, const TensorView& inp);

}  // namespace mt
