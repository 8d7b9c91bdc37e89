// Activation CUDA kernels: one thread per output element in grid-stride loops, each evaluating the
// per-element arithmetic of backend/math/activation_math.h that the CPU kernels run too.
#include "backend/cuda/kernels/activation.h"
#include "backend/cuda/kernels/launch.cuh"
#include "backend/math/activation_math.h"

namespace mt::cuda::k {

namespace {

__global__ void gelu_erf_kernel(float* y, const float* x, int64_t n) {
  MT_GRID_LOOP(i, n) y[i] = gelu_erf(x[i]);
}
__global__ void gelu_tanh_kernel(float* y, const float* x, int64_t n) {
  MT_GRID_LOOP(i, n) y[i] = gelu_tanh(x[i]);
}
__global__ void gelu_erf_bwd_kernel(float* dx, const float* dy, const float* x, int64_t n) {
  MT_GRID_LOOP(i, n) dx[i] += dy[i] * gelu_erf_grad(x[i]);
}
__global__ void gelu_tanh_bwd_kernel(float* dx, const float* dy, const float* x, int64_t n) {
  MT_GRID_LOOP(i, n) dx[i] += dy[i] * gelu_tanh_grad(x[i]);
}
// Element i = (r, c) of the [rows, f] output; its gate and up sit at row r of x, columns c and f + c.
__global__ void swiglu_fwd_kernel(float* y, const float* x, int64_t rows, int64_t f) {
  MT_GRID_LOOP(i, rows * f) {
    const int64_t r = i / f, c = i % f;
    const float* gate = x + r * 2 * f;
    y[i] = swiglu(gate[c], gate[f + c]);
  }
}
__global__ void swiglu_bwd_kernel(float* dx, const float* dy, const float* x, int64_t rows, int64_t f) {
  MT_GRID_LOOP(i, rows * f) {
    const int64_t r = i / f, c = i % f;
    const float* gate = x + r * 2 * f;
    float* dgate = dx + r * 2 * f;
    const SwigluGrad d = swiglu_grad(gate[c], gate[f + c], dy[i]);
    dgate[c] += d.dgate;
    dgate[f + c] += d.dup;
  }
}

}  // namespace

void gelu_fwd(float* y, const float* x, int64_t n, int form, cudaStream_t s) {
  if (form == 0)
    gelu_erf_kernel<<<grid_for(n), kThreads, 0, s>>>(y, x, n);
  else
    gelu_tanh_kernel<<<grid_for(n), kThreads, 0, s>>>(y, x, n);
}
void gelu_bwd(float* dx, const float* dy, const float* x, int64_t n, int form, cudaStream_t s) {
  if (form == 0)
    gelu_erf_bwd_kernel<<<grid_for(n), kThreads, 0, s>>>(dx, dy, x, n);
  else
    gelu_tanh_bwd_kernel<<<grid_for(n), kThreads, 0, s>>>(dx, dy, x, n);
}
void swiglu_fwd(float* y, const float* x, int64_t rows, int64_t f, cudaStream_t s) {
  swiglu_fwd_kernel<<<grid_for(rows * f), kThreads, 0, s>>>(y, x, rows, f);
}
void swiglu_bwd(float* dx, const float* dy, const float* x, int64_t rows, int64_t f, cudaStream_t s) {
  swiglu_bwd_kernel<<<grid_for(rows * f), kThreads, 0, s>>>(dx, dy, x, rows, f);
}

}  // namespace mt::cuda::k
