// Fused softmax cross-entropy CUDA kernels.  Row statistics: one block per row (grid-striding over
// rows), each thread a strided share of the vocabulary, then block reductions: the max in f32, Σ exp
// in double (per-thread partials in double, so the order differs from the CPU's f32 blocks only in
// rounding far below f32's).  The gradient: one thread per element, so it may overwrite logits.
// The arithmetic is backend/math/cross_entropy_math.h's, the CPU's.
#include <cmath>

#include "backend/cuda/kernels/cross_entropy.h"
#include "backend/cuda/kernels/launch.cuh"
#include "backend/math/cross_entropy_math.h"

namespace mt::cuda::k {

namespace {

int row_grid(int64_t rows) { return static_cast<int>(rows < 65536 ? rows : 65536); }

// The row's max over the block (every thread gets it).
__device__ inline float row_max(const float* x, int64_t vocab) {
  float mx = -INFINITY;
  for (int64_t v = threadIdx.x; v < vocab; v += blockDim.x) mx = ce_max(x[v], mx);
  return block_max(mx);
}

// The row's Σ exp(x − mx) over the block, in double (every thread gets it).
__device__ inline double row_sum_exp(const float* x, int64_t vocab, float mx) {
  double sum = 0.0;
  for (int64_t v = threadIdx.x; v < vocab; v += blockDim.x) sum += ce_exp(x[v], mx);
  return block_sum(sum);
}

__global__ void fwd_kernel(float* loss, float* lse, const float* logits, const int32_t* labels, int64_t rows,
                           int64_t vocab) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* x = logits + r * vocab;
    const float mx = row_max(x, vocab);
    const double sum = row_sum_exp(x, vocab, mx);
    if (threadIdx.x == 0) {
      const double row_lse = ce_lse(mx, sum);
      lse[r] = static_cast<float>(row_lse);
      loss[r] = ce_loss(row_lse, x[labels[r]]);
    }
  }
}

__global__ void bwd_kernel(float* g, const float* dloss, const float* logits, const float* lse,
                           const int32_t* labels, int64_t rows, int64_t vocab, int64_t vocab_start) {
  MT_GRID_LOOP(i, rows * vocab) {
    const int64_t r = i / vocab, v = i % vocab;
    const float d = dloss[r];
    if (d == 0.0f) {  // masked token: exactly zero, as on the CPU
      g[i] = 0.0f;
      continue;
    }
    float gi = ce_grad(d, logits[i], lse[r]);
    if (v == static_cast<int64_t>(labels[r]) - vocab_start) gi -= d;
    g[i] = gi;
  }
}

__global__ void max_kernel(float* out, const float* logits, int64_t rows, int64_t vocab) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float mx = row_max(logits + r * vocab, vocab);
    if (threadIdx.x == 0) out[r] = mx;
  }
}

__global__ void sums_kernel(float* sum_exp, float* target, const float* logits, const int32_t* labels,
                            const float* row_max, int64_t rows, int64_t vocab, int64_t vocab_start) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* x = logits + r * vocab;
    const double sum = row_sum_exp(x, vocab, row_max[r]);
    if (threadIdx.x == 0) {
      sum_exp[r] = static_cast<float>(sum);
      const int64_t t = static_cast<int64_t>(labels[r]) - vocab_start;
      target[r] = t >= 0 && t < vocab ? x[t] : 0.0f;
    }
  }
}

__global__ void loss_kernel(float* loss, float* lse, const float* row_max, const float* sum_exp,
                            const float* target, int64_t rows) {
  MT_GRID_LOOP(r, rows) {
    const double row_lse = ce_lse(row_max[r], static_cast<double>(sum_exp[r]));
    lse[r] = static_cast<float>(row_lse);
    loss[r] = ce_loss(row_lse, target[r]);
  }
}

}  // namespace

void cross_entropy_fwd(float* loss, float* lse, const float* logits, const int32_t* labels, int64_t rows,
                       int64_t vocab, cudaStream_t s) {
  fwd_kernel<<<row_grid(rows), kThreads, 0, s>>>(loss, lse, logits, labels, rows, vocab);
}
void cross_entropy_bwd(float* g, const float* dloss, const float* logits, const float* lse, const int32_t* labels,
                       int64_t rows, int64_t vocab, int64_t vocab_start, cudaStream_t s) {
  bwd_kernel<<<grid_for(rows * vocab), kThreads, 0, s>>>(g, dloss, logits, lse, labels, rows, vocab, vocab_start);
}
void cross_entropy_shard_max(float* row_max, const float* logits, int64_t rows, int64_t vocab, cudaStream_t s) {
  max_kernel<<<row_grid(rows), kThreads, 0, s>>>(row_max, logits, rows, vocab);
}
void cross_entropy_shard_sums(float* sum_exp, float* target, const float* logits, const int32_t* labels,
                              const float* row_max, int64_t rows, int64_t vocab, int64_t vocab_start,
                              cudaStream_t s) {
  sums_kernel<<<row_grid(rows), kThreads, 0, s>>>(sum_exp, target, logits, labels, row_max, rows, vocab,
                                                  vocab_start);
}
void cross_entropy_shard_loss(float* loss, float* lse, const float* row_max, const float* sum_exp,
                              const float* target, int64_t rows, cudaStream_t s) {
  loss_kernel<<<grid_for(rows), kThreads, 0, s>>>(loss, lse, row_max, sum_exp, target, rows);
}

}  // namespace mt::cuda::k
