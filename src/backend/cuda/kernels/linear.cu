// The linear op's bias gradient: column sums in double, each column by one thread in row order.
#include "backend/cuda/kernels/launch.cuh"
#include "backend/cuda/kernels/linear.h"

namespace mt::cuda::k {

namespace {
__global__ void bias_grad_kernel(float* dbias, const float* dout, int64_t rows, int64_t cols) {
  MT_GRID_LOOP(c, cols) {
    double acc = 0.0;
    for (int64_t r = 0; r < rows; ++r) acc += dout[r * cols + c];
    dbias[c] += static_cast<float>(acc);
  }
}
}  // namespace

void bias_grad(float* dbias, const float* dout, int64_t rows, int64_t cols, cudaStream_t s) {
  bias_grad_kernel<<<grid_for(cols), kThreads, 0, s>>>(dbias, dout, rows, cols);
}

}  // namespace mt::cuda::k
