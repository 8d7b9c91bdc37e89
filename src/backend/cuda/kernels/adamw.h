// C-style launchers of the optimizer kernels (backend/cuda/adamw.cpp calls them): the fused AdamW
// update and the sum of squares of the unscaled gradient, both over a batch of tensors passed by
// value as the kernel's argument, so a step allocates nothing and copies no table. Implemented in
// adamw.cu.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/math/adamw_math.h"

namespace mt::cuda::k {

// One tensor of an AdamW batch. copy_dtype: 0 none, 1 bf16, 2 f16 (mt::DType's codes).
struct AdamWSlot {
  float* param;
  const float* grad;
  float* m;
  float* v;
  void* copy;
  int copy_dtype;
  int64_t n;
  AdamWConsts k;
};

// Up to kAdamWSlots tensors; the launcher fills first_tile. 32 slots keep the argument near 3 KB,
// under the 4 KB every toolkit accepts.
constexpr int kAdamWSlots = 32;
struct AdamWBatch {
  int count = 0;
  int64_t first_tile[kAdamWSlots + 1];  // tensor s owns tiles [first_tile[s], first_tile[s + 1])
  AdamWSlot t[kAdamWSlots];
};

// The AdamW update of every tensor of the batch in one launch (backend/math/adamw_math.h per element).
void adamw(AdamWBatch& batch, cudaStream_t s);

// A batch of f32 tensors for the sum of squares. The launcher fills first_block.
constexpr int kSumSquaresSlots = 64;
struct SumSquaresBatch {
  int count = 0;
  int first_block[kSumSquaresSlots + 1];  // tensor s owns partials [first_block[s], first_block[s + 1])
  const float* x[kSumSquaresSlots];
  int64_t n[kSumSquaresSlots];
};

// Blocks (partials) tensor n gets: a fixed function of n, so the summation order is too.
int sum_squares_blocks_of(int64_t n);
// sums[s] = Σ_i fl(x_s[i] · unscale)² in double for every tensor s of the batch (device memory);
// partial: at least Σ_s sum_squares_blocks_of(n_s) doubles of device scratch.
void unscaled_sum_squares(double* sums, double* partial, SumSquaresBatch& batch, float unscale, cudaStream_t s);

}  // namespace mt::cuda::k
