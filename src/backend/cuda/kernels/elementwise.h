// C-style launchers of the elementwise kernels (flat adds, scales, casts, the sum of squares):
// raw device pointers, sizes and the stream. Implemented in elementwise.cu.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace mt::cuda::k {

void add(float* out, const float* a, const float* b, int64_t n, cudaStream_t s);
void accumulate(float* dst, const float* src, int64_t n, cudaStream_t s);
void bias_add(float* t, const float* bias, int64_t rows, int64_t cols, cudaStream_t s);
void scale(float* t, float factor, int64_t n, cudaStream_t s);
// dtype codes as mt::DType (0 f32, 1 bf16, 2 f16): each element converted through f32, rounded once.
void cast(void* dst, int dst_dtype, const void* src, int src_dtype, int64_t n, cudaStream_t s);
// x = float(to_dtype(x)) for bf16 (1) or f16 (2).
void round_to(float* x, int dtype, int64_t n, cudaStream_t s);
// partial[b] = Σ x² over block b's share, in double, for `blocks` = sum_squares_blocks(n) blocks;
// then partial[0] = Σ partial. x is f32, bf16 or f16 (dtype codes as in cast). `scale` multiplies
// each element first (the loss-scale's inverse).
int sum_squares_blocks(int64_t n);
void sum_squares(double* partial, const void* x, int dtype, float scale, int64_t n, cudaStream_t s);

}  // namespace mt::cuda::k
