// C-style launchers of the activation kernels (the pointwise ones, SwiGLU; forward and backward):
// raw device pointers, sizes and the stream. Implemented in activation.cu.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace mt::cuda::k {

// act: an mt::PointwiseActivation as int.  y = act(x).
void pointwise_activation_fwd(float* y, const float* x, int64_t n, int act, cudaStream_t s);
// dx += dy · act'(x).
void pointwise_activation_bwd(float* dx, const float* dy, const float* x, int64_t n, int act, cudaStream_t s);
// x [rows, 2f] = [gate | up] per row; y [rows, f] = silu(gate) · up.
void swiglu_fwd(float* y, const float* x, int64_t rows, int64_t f, cudaStream_t s);
// dx [rows, 2f] += [dgate | dup].
void swiglu_bwd(float* dx, const float* dy, const float* x, int64_t rows, int64_t f, cudaStream_t s);

}  // namespace mt::cuda::k
