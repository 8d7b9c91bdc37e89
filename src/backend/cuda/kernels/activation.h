// C-style launchers of the activation kernels (GeLU in both forms, SwiGLU, forward and backward):
// raw device pointers, sizes and the stream. Implemented in activation.cu.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace mt::cuda::k {

// form: 0 erf, 1 tanh (mt::GeluForm's order).  y = gelu(x).
void gelu_fwd(float* y, const float* x, int64_t n, int form, cudaStream_t s);
// dx += dy · gelu'(x).
void gelu_bwd(float* dx, const float* dy, const float* x, int64_t n, int form, cudaStream_t s);
// x [rows, 2f] = [gate | up] per row; y [rows, f] = silu(gate) · up.
void swiglu_fwd(float* y, const float* x, int64_t rows, int64_t f, cudaStream_t s);
// dx [rows, 2f] += [dgate | dup].
void swiglu_bwd(float* dx, const float* dy, const float* x, int64_t rows, int64_t f, cudaStream_t s);

}  // namespace mt::cuda::k
