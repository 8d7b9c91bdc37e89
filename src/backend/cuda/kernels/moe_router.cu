// MoE router CUDA kernels. The per-row work (routing, its backward, the loss scores, the z-loss
// gradient, the bias update) is one thread per row calling the row functions the CPU kernels call
// (backend/math/moe_router_math.h), each thread's scratch a slice of dynamic shared memory (so as
// many rows share a block as 48 KB holds). Reductions to a scalar run over a fixed grid and one
// block adds the partials in order: the same bits every run. The capacity ranking is sequential in
// nature and small (T·k entries): one block does it, with integer atomics for the radix counts and
// one thread per expert walking the tokens in order for the ties, exactly the CPU's algorithm.
#include "backend/cuda/kernels/launch.cuh"
#include "backend/cuda/kernels/moe_router.h"
#include "backend/cuda/runtime.h"
#include "backend/math/moe_router_math.h"

namespace mt::cuda::k {

namespace {

constexpr size_t kSharedBudget = 48 * 1024;  // dynamic shared memory without an opt-in
constexpr int kMaxRowsPerBlock = 64;

// Threads (rows) per block and their shared bytes for a row kernel needing `bytes` per row.
struct RowLaunch {
  int threads, blocks;
  size_t per_row, shared;
};

RowLaunch row_launch(int64_t rows, size_t bytes) {
  RowLaunch l;
  l.per_row = (bytes + 15) / 16 * 16;
  const size_t fit = l.per_row == 0 ? kMaxRowsPerBlock : kSharedBudget / l.per_row;
  l.threads = static_cast<int>(fit < 1 ? 1 : (fit > kMaxRowsPerBlock ? kMaxRowsPerBlock : fit));
  const int64_t blocks = (rows + l.threads - 1) / l.threads;
  l.blocks = static_cast<int>(blocks < 1 ? 1 : (blocks > 65535 ? 65535 : blocks));
  l.shared = l.per_row * l.threads;
  return l;
}

// This thread's scratch slice, and bump allocation inside it (8-byte aligned).
__device__ unsigned char* row_scratch(size_t per_row) {
  extern __shared__ __align__(16) unsigned char shared_rows[];
  return shared_rows + threadIdx.x * per_row;
}
template <typename T>
__device__ T* take(unsigned char*& at, int64_t n) {
  T* p = reinterpret_cast<T*>(at);
  at += (n * sizeof(T) + 7) / 8 * 8;
  return p;
}

#define MT_ROW_LOOP(t, rows)                                                                         \
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < (rows);       \
       t += static_cast<int64_t>(gridDim.x) * blockDim.x)

size_t round8(int64_t bytes) { return static_cast<size_t>((bytes + 7) / 8 * 8); }

// What router_fwd_kernel takes per row, in its order.
size_t route_bytes(int64_t experts, int64_t groups, int64_t topk) {
  const int64_t picked = (experts > topk ? experts : topk) + groups;
  return round8(8 * experts) + round8(4 * experts) + round8(4 * groups) + round8(4 * picked) + round8(experts) +
         round8(groups) + round8(experts);
}

__global__ void router_fwd_kernel(float* probs, int32_t* indices, const float* logits, const float* bias,
                                  const float* select, int64_t rows, int64_t experts, MoeRouterOptions o,
                                  size_t per_row) {
  const int64_t groups = o.num_groups > 0 ? o.num_groups : 1;
  const int64_t picked = (experts > o.topk ? experts : o.topk) + groups;
  MT_ROW_LOOP(t, rows) {
    unsigned char* at = row_scratch(per_row);
    MoeRouteScratch s;
    s.score = take<double>(at, experts);
    s.sel = take<float>(at, experts);
    s.group_score = take<float>(at, groups);
    s.picked = take<int32_t>(at, picked);
    s.allowed = take<bool>(at, experts);
    s.group_open = take<bool>(at, groups);
    s.in_group = take<bool>(at, experts);
    moe_route_row(logits + t * experts, experts, bias, select ? select + t * experts : nullptr, o, probs + t * o.topk,
                  indices + t * o.topk, s);
  }
}

__global__ void router_bwd_kernel(float* dlogits, const float* dprobs, const float* logits, const int32_t* indices,
                                  int64_t rows, int64_t experts, MoeRouterOptions o, size_t per_row) {
  MT_ROW_LOOP(t, rows) {
    unsigned char* at = row_scratch(per_row);
    MoeRouteBwdScratch w;
    w.g = take<double>(at, o.topk);
    w.q = take<double>(at, o.topk);
    w.s = take<double>(at, experts);
    w.ds = take<double>(at, experts);
    moe_route_row_bwd(dlogits + t * experts, dprobs + t * o.topk, logits + t * experts, indices + t * o.topk, experts,
                      o, w);
  }
}

// One block (see the file comment); experts ≤ kMoeMaxExperts.
__global__ void __launch_bounds__(1024)
    routing_map_kernel(float* rp, uint8_t* map, const float* p, const int32_t* idx, int64_t rows, int64_t k,
                       int64_t experts, int64_t capacity, MoeDropPolicy policy, bool pad) {
  __shared__ int chosen[kMoeMaxExperts], count[kMoeMaxExperts], ties_left[kMoeMaxExperts];
  __shared__ uint32_t prefix[kMoeMaxExperts];
  const int64_t n = rows * k, dense = rows * experts;
  // The dense scatter: every choice, with its weight (the dropless result).
  for (int64_t i = threadIdx.x; i < dense; i += blockDim.x) {
    rp[i] = 0.0f;
    map[i] = 0;
  }
  __syncthreads();
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const int64_t at = (i / k) * experts + idx[i];
    rp[at] = p[i];
    map[at] = 1;
  }
  if (capacity < 0) return;
  __syncthreads();
  if (capacity >= rows) {  // every token fits: keep all (and with padding, every slot)
    if (pad)
      for (int64_t i = threadIdx.x; i < dense; i += blockDim.x) map[i] = 1;
    return;
  }
  const auto key_of = [&](int64_t i) { return moe_order_key(policy == MoeDropPolicy::probs ? p[i] : 1.0f); };
  const uint32_t zero_key = moe_order_key(0.0f);
  for (int64_t e = threadIdx.x; e < experts; e += blockDim.x) {
    chosen[e] = 0;
    prefix[e] = 0;
  }
  __syncthreads();
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) atomicAdd(&chosen[idx[i]], 1);
  __syncthreads();
  // Radix select: prefix[e] ends as the capacity-th largest key of column e.
  for (int bit = 31; bit >= 0; --bit) {
    const uint32_t b = 1u << bit;
    for (int64_t e = threadIdx.x; e < experts; e += blockDim.x)
      count[e] = zero_key >= (prefix[e] | b) ? static_cast<int>(rows) - chosen[e] : 0;
    __syncthreads();
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
      if (key_of(i) >= (prefix[idx[i]] | b)) atomicAdd(&count[idx[i]], 1);
    __syncthreads();
    for (int64_t e = threadIdx.x; e < experts; e += blockDim.x)
      if (count[e] >= capacity) prefix[e] |= b;
    __syncthreads();
  }
  // Entries above the threshold are all kept; of those equal to it, the first ones by token index.
  for (int64_t e = threadIdx.x; e < experts; e += blockDim.x)
    ties_left[e] = static_cast<int>(capacity) - (zero_key > prefix[e] ? static_cast<int>(rows) - chosen[e] : 0);
  __syncthreads();
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    if (key_of(i) > prefix[idx[i]]) atomicSub(&ties_left[idx[i]], 1);
  __syncthreads();
  for (int64_t e = threadIdx.x; e < experts; e += blockDim.x) {  // one thread per column, tokens in order
    int ties = ties_left[e];
    for (int64_t t = 0; t < rows; ++t) {
      uint32_t key = zero_key;
      for (int64_t j = 0; j < k; ++j)
        if (idx[t * k + j] == e) key = key_of(t * k + j);
      const bool kept = key > prefix[e] || (key == prefix[e] && ties-- > 0);
      const int64_t at = t * experts + e;
      map[at] = pad ? kept : (kept && map[at]);
      if (!map[at]) rp[at] = 0.0f;
    }
  }
}

__global__ void routing_map_bwd_kernel(float* dp, const float* drp, const uint8_t* map, const int32_t* idx,
                                       int64_t rows, int64_t k, int64_t experts) {
  MT_GRID_LOOP(i, rows * k) {
    const int64_t at = (i / k) * experts + idx[i];
    if (map[at]) dp[i] += drp[at];
  }
}

__global__ void tokens_per_expert_kernel(float* counts, const uint8_t* map, int64_t rows, int64_t experts) {
  const int64_t e = blockIdx.x;
  long long n = 0;
  for (int64_t t = threadIdx.x; t < rows; t += blockDim.x) n += map[t * experts + e] != 0;
  n = block_sum(n);
  if (threadIdx.x == 0) counts[e] += static_cast<float>(n);
}

__global__ void aux_scores_fwd_kernel(float* scores, float* counts, const float* logits, int64_t rows,
                                      int64_t experts, int64_t seqs, int64_t topk, MoeScoreFunction f,
                                      size_t per_row) {
  MT_ROW_LOOP(t, rows) {
    unsigned char* at = row_scratch(per_row);
    double* row = take<double>(at, experts);
    double* sig = take<double>(at, experts);
    int32_t* picked = take<int32_t>(at, topk);
    bool* allowed = take<bool>(at, experts);
    float* s = scores + t * experts;
    moe_aux_scores_row(logits + t * experts, experts, f, row, sig);
    for (int64_t e = 0; e < experts; ++e) s[e] = static_cast<float>(row[e]);
    // The losses' own top-k, over the f32 scores; counts are integers in f32 (exact up to 2^24), so
    // the atomic adds give the same value in any order.
    for (int64_t e = 0; e < experts; ++e) allowed[e] = true;
    moe_select_topk(s, allowed, experts, topk, picked);
    for (int64_t j = 0; j < topk; ++j) atomicAdd(&counts[(t % seqs) * experts + picked[j]], 1.0f);
  }
}

__global__ void aux_scores_bwd_kernel(float* dlogits, const float* dscores, const float* logits, int64_t rows,
                                      int64_t experts, MoeScoreFunction f, size_t per_row) {
  MT_ROW_LOOP(t, rows) {
    unsigned char* at = row_scratch(per_row);
    double* s = take<double>(at, experts);
    double* sig = take<double>(at, experts);
    moe_aux_scores_row_bwd(dlogits + t * experts, dscores + t * experts, logits + t * experts, experts, f, s, sig);
  }
}

__global__ void __launch_bounds__(1024)
    aux_loss_fwd_kernel(float* loss, const float* scores, const float* counts, int64_t rows, int64_t experts,
                        int64_t seqs, double factor) {
  double acc = 0.0;
  for (int64_t i = threadIdx.x; i < rows * experts; i += blockDim.x) {
    const int64_t t = i / experts, e = i - t * experts;
    acc += static_cast<double>(scores[i]) * counts[(t % seqs) * experts + e];
  }
  acc = block_sum(acc);
  if (threadIdx.x == 0) loss[0] = static_cast<float>(acc * factor);
}

__global__ void aux_loss_bwd_kernel(float* ds, const float* counts, int64_t rows, int64_t experts, int64_t seqs,
                                    double factor) {
  MT_GRID_LOOP(i, rows * experts) {
    const int64_t t = i / experts, e = i - t * experts;
    ds[i] += static_cast<float>(factor * counts[(t % seqs) * experts + e]);
  }
}

__global__ void z_loss_partials_kernel(double* partial, const float* logits, int64_t rows, int64_t experts) {
  double acc = 0.0;
  MT_GRID_LOOP(t, rows) {
    const double lse = moe_logsumexp_row(logits + t * experts, experts, nullptr);
    acc += lse * lse;
  }
  acc = block_sum(acc);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

__global__ void z_loss_total_kernel(float* loss, const double* partial, int blocks, int64_t rows, double coeff) {
  double acc = 0.0;
  for (int i = threadIdx.x; i < blocks; i += blockDim.x) acc += partial[i];
  acc = block_sum(acc);
  if (threadIdx.x == 0) loss[0] = rows > 0 ? static_cast<float>(coeff * acc / static_cast<double>(rows)) : 0.0f;
}

__global__ void z_loss_bwd_kernel(float* dlogits, const float* logits, int64_t rows, int64_t experts, double factor,
                                  size_t per_row) {
  MT_ROW_LOOP(t, rows) {
    unsigned char* at = row_scratch(per_row);
    double* soft = take<double>(at, experts);
    const double lse = moe_logsumexp_row(logits + t * experts, experts, soft);
    for (int64_t e = 0; e < experts; ++e) dlogits[t * experts + e] += static_cast<float>(factor * lse * soft[e]);
  }
}

__global__ void expert_bias_kernel(float* bias, const float* counts, int64_t rows, int64_t experts, float rate) {
  MT_GRID_LOOP(r, rows) moe_expert_bias_row(bias + r * experts, counts + r * experts, experts, rate);
}

}  // namespace

void moe_router_fwd(float* probs, int32_t* indices, const float* logits, const float* bias, const float* select,
                    int64_t rows, int64_t experts, const MoeRouterOptions& o, cudaStream_t s) {
  if (rows == 0) return;
  const RowLaunch l = row_launch(rows, route_bytes(experts, o.num_groups > 0 ? o.num_groups : 1, o.topk));
  router_fwd_kernel<<<l.blocks, l.threads, l.shared, s>>>(probs, indices, logits, bias, select, rows, experts, o,
                                                          l.per_row);
}

void moe_router_bwd(float* dlogits, const float* dprobs, const float* logits, const int32_t* indices, int64_t rows,
                    int64_t experts, const MoeRouterOptions& o, cudaStream_t s) {
  if (rows == 0) return;
  const RowLaunch l = row_launch(rows, 8 * (2 * o.topk + 2 * experts));
  router_bwd_kernel<<<l.blocks, l.threads, l.shared, s>>>(dlogits, dprobs, logits, indices, rows, experts, o,
                                                          l.per_row);
}

void moe_routing_map_fwd(float* routing_probs, uint8_t* routing_map, const float* probs, const int32_t* indices,
                         int64_t rows, int64_t topk, int64_t experts, int64_t capacity, MoeDropPolicy policy,
                         bool pad_to_capacity, cudaStream_t s) {
  if (rows == 0) return;
  routing_map_kernel<<<1, 1024, 0, s>>>(routing_probs, routing_map, probs, indices, rows, topk, experts, capacity,
                                        policy, pad_to_capacity);
}

void moe_routing_map_bwd(float* dprobs, const float* drouting_probs, const uint8_t* routing_map,
                         const int32_t* indices, int64_t rows, int64_t topk, int64_t experts, cudaStream_t s) {
  if (rows * topk == 0) return;
  routing_map_bwd_kernel<<<grid_for(rows * topk), kThreads, 0, s>>>(dprobs, drouting_probs, routing_map, indices,
                                                                    rows, topk, experts);
}

void moe_tokens_per_expert(float* counts, const uint8_t* routing_map, int64_t rows, int64_t experts, cudaStream_t s) {
  if (experts == 0) return;
  tokens_per_expert_kernel<<<static_cast<int>(experts), kThreads, 0, s>>>(counts, routing_map, rows, experts);
}

void moe_aux_scores_fwd(float* scores, float* counts, const float* logits, int64_t rows, int64_t experts,
                        int64_t seqs, int64_t topk, MoeScoreFunction f, cudaStream_t s) {
  MT_CUDA_CHECK(cudaMemsetAsync(counts, 0, static_cast<size_t>(seqs * experts) * sizeof(float), s));
  if (rows == 0) return;
  const RowLaunch l = row_launch(rows, 16 * experts + round8(4 * topk) + round8(experts));
  aux_scores_fwd_kernel<<<l.blocks, l.threads, l.shared, s>>>(scores, counts, logits, rows, experts, seqs, topk, f,
                                                              l.per_row);
}

void moe_aux_scores_bwd(float* dlogits, const float* dscores, const float* logits, int64_t rows, int64_t experts,
                        MoeScoreFunction f, cudaStream_t s) {
  if (rows == 0) return;
  const RowLaunch l = row_launch(rows, 16 * experts);
  aux_scores_bwd_kernel<<<l.blocks, l.threads, l.shared, s>>>(dlogits, dscores, logits, rows, experts, f, l.per_row);
}

void moe_aux_loss_fwd(float* loss, const float* scores, const float* counts, int64_t rows, int64_t experts,
                      int64_t seqs, double factor, cudaStream_t s) {
  aux_loss_fwd_kernel<<<1, 1024, 0, s>>>(loss, scores, counts, rows, experts, seqs, factor);
}

void moe_aux_loss_bwd(float* dscores, const float* counts, int64_t rows, int64_t experts, int64_t seqs,
                      double factor, cudaStream_t s) {
  if (rows * experts == 0) return;
  aux_loss_bwd_kernel<<<grid_for(rows * experts), kThreads, 0, s>>>(dscores, counts, rows, experts, seqs, factor);
}

void moe_z_loss_fwd(float* loss, double* partial, const float* logits, int64_t rows, int64_t experts, double coeff,
                    cudaStream_t s) {
  // A fixed grid (not the device's size): the partition, so the sum's order, depends on rows only.
  const int blocks = grid_for(rows) < kZLossBlocks ? grid_for(rows) : kZLossBlocks;
  z_loss_partials_kernel<<<blocks, kThreads, 0, s>>>(partial, logits, rows, experts);
  z_loss_total_kernel<<<1, kThreads, 0, s>>>(loss, partial, blocks, rows, coeff);
}

void moe_z_loss_bwd(float* dlogits, const float* logits, int64_t rows, int64_t experts, double factor,
                    cudaStream_t s) {
  if (rows == 0) return;
  const RowLaunch l = row_launch(rows, 8 * experts);
  z_loss_bwd_kernel<<<l.blocks, l.threads, l.shared, s>>>(dlogits, logits, rows, experts, factor, l.per_row);
}

void moe_expert_bias_update(float* bias, const float* counts, int64_t rows, int64_t experts, float rate,
                            cudaStream_t s) {
  if (rows == 0) return;
  expert_bias_kernel<<<grid_for(rows), kThreads, 0, s>>>(bias, counts, rows, experts, rate);
}

}  // namespace mt::cuda::k
