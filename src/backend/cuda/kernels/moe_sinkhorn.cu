// Sinkhorn's normalisation (backend/math/moe_sinkhorn_math.h) in one block: the iterations are a
// sequence, each a pass over the rows (a thread per row) and one over the columns (a thread per
// expert: the block covers kMoeMaxExperts). As on the CPU, d0 sits in column 0 of `scores` until
// the last pass, and one thread sums the change in expert order, so both backends stop after the
// same iteration.
#include "backend/cuda/kernels/moe_router.h"
#include "backend/math/moe_sinkhorn_math.h"

namespace mt::cuda::k {

namespace {

constexpr int kSinkhornThreads = 1024;
static_assert(kSinkhornThreads >= kMoeMaxExperts, "one thread per expert");

__global__ void __launch_bounds__(kSinkhornThreads)
    sinkhorn_kernel(float* out, const float* x, int64_t rows, int64_t experts) {
  __shared__ float d1[kMoeMaxExperts];
  __shared__ double change[kMoeMaxExperts];
  __shared__ bool again;
  const int64_t e = threadIdx.x;
  if (e < experts) d1[e] = 1.0f;
  __syncthreads();
  for (int iters = 1;; ++iters) {
    for (int64_t t = threadIdx.x; t < rows; t += blockDim.x)
      out[t * experts] = moe_sinkhorn_row_scale(x + t * experts, d1, experts, rows);
    __syncthreads();
    if (e < experts) {
      const float next = moe_sinkhorn_col_scale(x, out, experts, e, experts, rows);
      change[e] = fabs(static_cast<double>(next) - d1[e]);
      d1[e] = next;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      double sum = 0.0;
      for (int64_t i = 0; i < experts; ++i) sum += change[i];
      again = moe_sinkhorn_again(sum, experts, iters);
    }
    __syncthreads();
    if (!again) break;
  }
  for (int64_t t = threadIdx.x; t < rows; t += blockDim.x) {
    const float d0 = out[t * experts];
    for (int64_t i = 0; i < experts; ++i) out[t * experts + i] = moe_sinkhorn_score(x[t * experts + i], d0, d1[i]);
  }
}

}  // namespace

void moe_sinkhorn_fwd(float* scores, const float* logits, int64_t rows, int64_t experts, cudaStream_t s) {
  if (rows == 0) return;
  sinkhorn_kernel<<<1, kSinkhornThreads, 0, s>>>(scores, logits, rows, experts);
}

}  // namespace mt::cuda::k
