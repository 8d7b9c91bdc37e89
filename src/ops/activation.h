// Pointwise MLP activations: GeLU (exact erf form and the tanh approximation) and SwiGLU.
#pragma once

#include "backend/activation_args.h"  // GeluForm (erf or tanh form), shared with the kernels
#include "tensor/tensor.h"

namespace mt {

// out[N, f] = gelu(inp[N, f]).  The caller keeps inp for the backward.
void gelu_fwd(const TensorView& out, const TensorView& inp, GeluForm form);
// dinp[N, f] += dout · gelu'(inp).
void gelu_bwd(const TensorView& dinp, const TensorView& dout, const TensorView& inp, GeluForm form);

// inp[N, 2f] = [gate | up] (Megatron's linear_fc1 chunk(2) on the last dim);
// out[N, f] = silu(gate) · up, silu(x) = x·σ(x).  The caller keeps inp for the backward.
void swiglu_fwd(const TensorView& out, const TensorView& inp);
// dinp[N, 2f] += [dgate | dup].
void swiglu_bwd(const TensorView& dinp, const TensorView& dout, const TensorView& inp);

}  // namespace mt
