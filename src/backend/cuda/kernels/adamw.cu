// Optimizer CUDA kernels. AdamW: the batch's tensors cut into tiles of kTile elements laid end to
// end; blocks stride over the tiles, threads over a tile's elements, each element one call of the
// shared arithmetic (backend/math/adamw_math.h). Sum of squares: each tensor gets a fixed number of
// blocks (by its size), each block one double partial, then one block per tensor adds its partials
// in order: the same bits every run.
#include "backend/cuda/kernels/adamw.h"
#include "backend/cuda/kernels/launch.cuh"
#include "base/dtype.h"

namespace mt::cuda::k {

namespace {

constexpr int64_t kTile = 4096;          // AdamW elements per tile (16 per thread)
constexpr int kMaxBlocksPerTensor = 256;  // sum-of-squares partials per tensor

__global__ void __launch_bounds__(kThreads) adamw_kernel(const __grid_constant__ AdamWBatch b) {
  const int64_t tiles = b.first_tile[b.count];
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    int s = 0;
    while (tile >= b.first_tile[s + 1]) ++s;  // empty tensors own no tile and are stepped over
    const AdamWSlot& t = b.t[s];
    const int64_t begin = (tile - b.first_tile[s]) * kTile;
    const int64_t end = begin + kTile < t.n ? begin + kTile : t.n;
    const AdamWConsts& c = t.k;
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
      float m = t.m[i], v = t.v[i];
      adamw_moments(t.grad[i], m, v, c.b1, c.b2, c.unscale, c.clip);
      const float p = adamw_param(t.param[i], m, sqrtf(v), c.decay, c.step_size, c.inv_sqrt_bc2, c.eps);
      t.m[i] = m;
      t.v[i] = v;
      t.param[i] = p;
      if (t.copy_dtype == 1) static_cast<uint16_t*>(t.copy)[i] = f32_to_bf16(p);
      if (t.copy_dtype == 2) static_cast<uint16_t*>(t.copy)[i] = f32_to_f16(p);
    }
  }
}

__global__ void __launch_bounds__(kThreads)
    sum_squares_partials_kernel(const __grid_constant__ SumSquaresBatch b, float unscale, double* partial) {
  int s = 0;
  while (static_cast<int>(blockIdx.x) >= b.first_block[s + 1]) ++s;
  const int local = blockIdx.x - b.first_block[s], blocks = b.first_block[s + 1] - b.first_block[s];
  const float* x = b.x[s];
  double acc = 0.0;
  for (int64_t i = static_cast<int64_t>(local) * blockDim.x + threadIdx.x; i < b.n[s];
       i += static_cast<int64_t>(blocks) * blockDim.x) {
    const float u = x[i] * unscale;  // rounded to f32 first, as the unscale pass would store it
    acc += static_cast<double>(u) * u;
  }
  acc = block_sum(acc);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

__global__ void __launch_bounds__(kThreads)
    sum_partials_kernel(const __grid_constant__ SumSquaresBatch b, const double* partial, double* sums) {
  const int s = blockIdx.x;
  double acc = 0.0;
  for (int i = b.first_block[s] + threadIdx.x; i < b.first_block[s + 1]; i += blockDim.x) acc += partial[i];
  acc = block_sum(acc);
  if (threadIdx.x == 0) sums[s] = acc;
}

}  // namespace

void adamw(AdamWBatch& batch, cudaStream_t s) {
  batch.first_tile[0] = 0;
  for (int i = 0; i < batch.count; ++i) batch.first_tile[i + 1] = batch.first_tile[i] + (batch.t[i].n + kTile - 1) / kTile;
  const int64_t tiles = batch.first_tile[batch.count];
  if (tiles == 0) return;
  const int grid = static_cast<int>(tiles < 4096 ? tiles : 4096);
  adamw_kernel<<<grid, kThreads, 0, s>>>(batch);
}

int sum_squares_blocks_of(int64_t n) {
  const int blocks = grid_for(n);
  return blocks < kMaxBlocksPerTensor ? blocks : kMaxBlocksPerTensor;
}

void unscaled_sum_squares(double* sums, double* partial, SumSquaresBatch& batch, float unscale, cudaStream_t s) {
  if (batch.count == 0) return;
  batch.first_block[0] = 0;
  for (int i = 0; i < batch.count; ++i) batch.first_block[i + 1] = batch.first_block[i] + sum_squares_blocks_of(batch.n[i]);
  sum_squares_partials_kernel<<<batch.first_block[batch.count], kThreads, 0, s>>>(batch, unscale, partial);
  sum_partials_kernel<<<batch.count, kThreads, 0, s>>>(batch, partial, sums);
}

}  // namespace mt::cuda::k
