// Activation CUDA kernels: one thread per output element in grid-stride loops, each evaluating the
// per-element arithmetic of backend/math/activation_math.h that the CPU kernels run too.
#include "backend/cuda/kernels/activation.h"
#include "backend/cuda/kernels/launch.cuh"
#include "backend/math/activation_math.h"

namespace mt::cuda::k {

namespace {

template <PointwiseActivation A>
__global__ void pointwise_fwd_kernel(float* y, const float* x, int64_t n) {
  MT_GRID_LOOP(i, n) y[i] = pointwise_value<A>(x[i]);
}
template <PointwiseActivation A>
__global__ void pointwise_bwd_kernel(float* dx, const float* dy, const float* x, int64_t n) {
  MT_GRID_LOOP(i, n) dx[i] += dy[i] * pointwise_grad<A>(x[i]);
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

void pointwise_activation_fwd(float* y, const float* x, int64_t n, int act, cudaStream_t s) {
  switch (static_cast<PointwiseActivation>(act)) {
    case PointwiseActivation::gelu:
      return pointwise_fwd_kernel<PointwiseActivation::gelu><<<grid_for(n), kThreads, 0, s>>>(y, x, n);
    case PointwiseActivation::gelu_tanh:
      return pointwise_fwd_kernel<PointwiseActivation::gelu_tanh><<<grid_for(n), kThreads, 0, s>>>(y, x, n);
    case PointwiseActivation::squared_relu:
      return pointwise_fwd_kernel<PointwiseActivation::squared_relu><<<grid_for(n), kThreads, 0, s>>>(y, x, n);
  }
}
void pointwise_activation_bwd(float* dx, const float* dy, const float* x, int64_t n, int act, cudaStream_t s) {
  switch (static_cast<PointwiseActivation>(act)) {
    case PointwiseActivation::gelu:
      return pointwise_bwd_kernel<PointwiseActivation::gelu><<<grid_for(n), kThreads, 0, s>>>(dx, dy, x, n);
    case PointwiseActivation::gelu_tanh:
      return pointwise_bwd_kernel<PointwiseActivation::gelu_tanh><<<grid_for(n), kThreads, 0, s>>>(dx, dy, x, n);
    case PointwiseActivation::squared_relu:
      return pointwise_bwd_kernel<PointwiseActivation::squared_relu><<<grid_for(n), kThreads, 0, s>>>(dx, dy, x, n);
  }
}
void swiglu_fwd(float* y, const float* x, int64_t rows, int64_t f, cudaStream_t s) {
  swiglu_fwd_kernel<<<grid_for(rows * f), kThreads, 0, s>>>(y, x, rows, f);
}
void swiglu_bwd(float* dx, const float* dy, const float* x, int64_t rows, int64_t f, cudaStream_t s) {
  swiglu_bwd_kernel<<<grid_for(rows * f), kThreads, 0, s>>>(dx, dy, x, rows, f);
}

}  // namespace mt::cuda::k
