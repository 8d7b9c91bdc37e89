// Elementwise CUDA kernels: one thread per element in grid-stride loops; the sum of squares in
// double, per block, then one block over the partials (a fixed order: the same bits every run).
#include "backend/cuda/kernels/elementwise.h"
#include "backend/cuda/kernels/launch.cuh"
#include "base/dtype.h"

namespace mt::cuda::k {

namespace {

__device__ inline float load(const void* p, int dtype, int64_t i) {
  switch (dtype) {
    case 1: return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case 2: return f16_to_f32(static_cast<const uint16_t*>(p)[i]);
    default: return static_cast<const float*>(p)[i];
  }
}

__device__ inline void store(void* p, int dtype, int64_t i, float v) {
  switch (dtype) {
    case 1: static_cast<uint16_t*>(p)[i] = f32_to_bf16(v); return;
    case 2: static_cast<uint16_t*>(p)[i] = f32_to_f16(v); return;
    default: static_cast<float*>(p)[i] = v;
  }
}

__global__ void add_kernel(float* out, const float* a, const float* b, int64_t n) {
  MT_GRID_LOOP(i, n) out[i] = a[i] + b[i];
}
__global__ void accumulate_kernel(float* dst, const float* src, int64_t n) {
  MT_GRID_LOOP(i, n) dst[i] += src[i];
}
__global__ void bias_add_kernel(float* t, const float* bias, int64_t rows, int64_t cols) {
  MT_GRID_LOOP(i, rows * cols) t[i] += bias[i % cols];
}
__global__ void scale_kernel(float* t, float factor, int64_t n) {
  MT_GRID_LOOP(i, n) t[i] *= factor;
}
__global__ void cast_kernel(void* dst, int dst_dtype, const void* src, int src_dtype, int64_t n) {
  MT_GRID_LOOP(i, n) store(dst, dst_dtype, i, load(src, src_dtype, i));
}
__global__ void round_kernel(float* x, int dtype, int64_t n) {
  MT_GRID_LOOP(i, n) x[i] = dtype == 1 ? bf16_to_f32(f32_to_bf16(x[i])) : f16_to_f32(f32_to_f16(x[i]));
}
__global__ void sum_squares_kernel(double* partial, const void* x, int dtype, float scale, int64_t n) {
  double acc = 0.0;
  MT_GRID_LOOP(i, n) {
    const double v = static_cast<double>(load(x, dtype, i)) * scale;
    acc += v * v;
  }
  acc = block_sum(acc);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}
__global__ void sum_partials_kernel(double* partial, int count) {
  double acc = 0.0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) acc += partial[i];
  acc = block_sum(acc);
  if (threadIdx.x == 0) partial[0] = acc;
}

}  // namespace

void add(float* out, const float* a, const float* b, int64_t n, cudaStream_t s) {
  add_kernel<<<grid_for(n), kThreads, 0, s>>>(out, a, b, n);
}
void accumulate(float* dst, const float* src, int64_t n, cudaStream_t s) {
  accumulate_kernel<<<grid_for(n), kThreads, 0, s>>>(dst, src, n);
}
void bias_add(float* t, const float* bias, int64_t rows, int64_t cols, cudaStream_t s) {
  bias_add_kernel<<<grid_for(rows * cols), kThreads, 0, s>>>(t, bias, rows, cols);
}
void scale(float* t, float factor, int64_t n, cudaStream_t s) {
  scale_kernel<<<grid_for(n), kThreads, 0, s>>>(t, factor, n);
}
void cast(void* dst, int dst_dtype, const void* src, int src_dtype, int64_t n, cudaStream_t s) {
  cast_kernel<<<grid_for(n), kThreads, 0, s>>>(dst, dst_dtype, src, src_dtype, n);
}
void round_to(float* x, int dtype, int64_t n, cudaStream_t s) {
  round_kernel<<<grid_for(n), kThreads, 0, s>>>(x, dtype, n);
}
int sum_squares_blocks(int64_t n) {
  const int blocks = grid_for(n);
  return blocks < 1024 ? blocks : 1024;
}
void sum_squares(double* partial, const void* x, int dtype, float scale, int64_t n, cudaStream_t s) {
  const int blocks = sum_squares_blocks(n);
  sum_squares_kernel<<<blocks, kThreads, 0, s>>>(partial, x, dtype, scale, n);
  sum_partials_kernel<<<1, kThreads, 0, s>>>(partial, blocks);
}

}  // namespace mt::cuda::k
