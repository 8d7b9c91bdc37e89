// MoE permute/unpermute CUDA kernels, in Megatron's row order exactly as the CPU
// (backend/cpu/moe_permute.cpp): expert by expert, each expert's tokens in increasing order.
//
// Permute: one block per expert counts its map column, then (knowing the counts before it) writes
// its row_token entries with a block-wide running count; a grid-stride gather copies the rows.
// Scatters (unpermute, permute's backward) are owned by tokens: one block per token walks the
// token's rows in increasing row order and adds them to the token's row (threads over columns), so
// each sum runs in the CPU's order and no two blocks write one element. A token's rows are found
// without a sort: row_token is a few maximal strictly increasing runs (one per expert, as permute
// writes it), a token appears at most once per run, so a binary search per run (runs searched in
// parallel by the block's threads, results taken in run order) finds them all in order. Should
// row_token have more runs than the scratch holds, the block scans every row instead (same order).
#include "backend/cuda/kernels/launch.cuh"
#include "backend/cuda/kernels/moe_experts.h"
#include "backend/cuda/runtime.h"

namespace mt::cuda::k {

namespace {

// Scratch layout (ints): offsets [0, kRunCount), the run count, then the run starts.
constexpr int kRunCount = kMoeMaxOffsetExperts + 1;
constexpr int kRunStarts = kRunCount + 1;
constexpr int kMaxRuns = kMoeScratchInts - kRunStarts;

// How many threads below this one in the block have `flag` set; *total gets the block's count.
// Every thread of the block must call it (blockDim.x a multiple of 32).
__device__ int block_exclusive_count(bool flag, int* total) {
  __shared__ int warp_count[32];
  const unsigned ballot = __ballot_sync(0xffffffffu, flag);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  __syncthreads();  // warp_count may still be read by a previous call
  if (lane == 0) warp_count[warp] = __popc(ballot);
  __syncthreads();
  int before = 0, all = 0;
  for (int w = 0; w < warps; ++w) {
    if (w < warp) before += warp_count[w];
    all += warp_count[w];
  }
  *total = all;
  return before + __popc(ballot & ((1u << lane) - 1u));
}

// The expert owning row r: the e with offsets[e] ≤ r < offsets[e + 1] (empty experts skipped).
__device__ int expert_of(const int32_t* offsets, int experts, int64_t r) {
  int lo = 0, hi = experts;
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (offsets[mid + 1] <= r) lo = mid + 1;
    else hi = mid;
  }
  return lo < experts ? lo : experts - 1;  // rows past the counts' sum (a broken contract) stay in bounds
}

__global__ void count_nonzero_kernel(unsigned long long* count, const uint8_t* map, int64_t n) {
  unsigned long long c = 0;
  MT_GRID_LOOP(i, n) c += map[i] != 0;
  c = block_sum(c);
  if (threadIdx.x == 0) atomicAdd(count, c);  // an integer sum: any order gives the same count
}

__global__ void column_counts_kernel(int32_t* counts, const uint8_t* map, int64_t tokens, int64_t experts) {
  const int64_t e = blockIdx.x;
  int n = 0;
  for (int64_t t = threadIdx.x; t < tokens; t += blockDim.x) n += map[t * experts + e] != 0;
  n = block_sum(n);
  if (threadIdx.x == 0) counts[e] = n;
}

__global__ void row_token_kernel(int32_t* row_token, const int32_t* counts, const uint8_t* map, int64_t tokens,
                                 int64_t experts, int64_t rows) {
  const int64_t e = blockIdx.x;
  long long before = 0;
  for (int64_t f = threadIdx.x; f < e; f += blockDim.x) before += counts[f];
  int64_t r = block_sum(before);  // expert e's first row
  for (int64_t t0 = 0; t0 < tokens; t0 += blockDim.x) {
    const int64_t t = t0 + threadIdx.x;
    const bool chosen = t < tokens && map[t * experts + e] != 0;
    int total = 0;
    const int64_t at = r + block_exclusive_count(chosen, &total);
    if (chosen && at < rows) row_token[at] = static_cast<int32_t>(t);
    r += total;
  }
}

__global__ void gather_rows_kernel(float* rows, const float* tokens, const int32_t* row_token, int64_t tokens_count,
                                   int64_t rows_count, int64_t hidden) {
  MT_GRID_LOOP(i, rows_count * hidden) {
    const int64_t r = i / hidden, c = i - r * hidden, t = row_token[r];
    rows[i] = t >= 0 && t < tokens_count ? tokens[t * hidden + c] : __int_as_float(0x7fffffff);
  }
}

// One block: the offsets (thread 0: E is small) and the run starts (a block-wide running count).
__global__ void row_index_kernel(int32_t* scratch, const int32_t* row_token, int64_t rows, const int32_t* counts,
                                 int experts) {
  if (counts != nullptr && threadIdx.x == 0) {
    int32_t acc = 0;
    scratch[0] = 0;
    for (int e = 0; e < experts; ++e) scratch[e + 1] = acc += counts[e];
  }
  int runs = 0;
  for (int64_t r0 = 0; r0 < rows; r0 += blockDim.x) {
    const int64_t r = r0 + threadIdx.x;
    const bool start = r < rows && (r == 0 || row_token[r] <= row_token[r - 1]);
    int total = 0;
    const int at = runs + block_exclusive_count(start, &total);
    if (start && at < kMaxRuns) scratch[kRunStarts + at] = static_cast<int32_t>(r);
    runs += total;
  }
  if (threadIdx.x == 0) scratch[kRunCount] = runs;
}

__global__ void __launch_bounds__(kThreads)
    scatter_rows_kernel(float* out, const float* src, const int32_t* row_token, const float* probs,
                        const int32_t* scratch, int64_t tokens, int64_t rows, int64_t hidden, int experts) {
  __shared__ int64_t found_row[kThreads];
  __shared__ float found_weight[kThreads];
  const int runs = scratch[kRunCount];
  const bool by_runs = runs <= kMaxRuns;
  const int64_t candidates = by_runs ? runs : rows;  // runs to search, or every row to test
  for (int64_t t = blockIdx.x; t < tokens; t += gridDim.x) {
    for (int64_t c0 = 0; c0 < candidates; c0 += blockDim.x) {
      const int64_t i = c0 + threadIdx.x;
      int64_t row = -1;
      if (i < candidates && by_runs) {
        int64_t lo = scratch[kRunStarts + i];
        int64_t hi = i + 1 < runs ? scratch[kRunStarts + i + 1] : rows;
        while (lo < hi) {  // first row of the run whose token is ≥ t
          const int64_t mid = (lo + hi) / 2;
          if (row_token[mid] < t) lo = mid + 1;
          else hi = mid;
        }
        const int64_t end = i + 1 < runs ? scratch[kRunStarts + i + 1] : rows;
        if (lo < end && row_token[lo] == t) row = lo;
      } else if (i < candidates && row_token[i] == t) {
        row = i;
      }
      float w = 1.0f;
      if (row >= 0 && probs != nullptr) w = probs[t * experts + expert_of(scratch, experts, row)];
      __syncthreads();  // the previous chunk's rows have been added
      found_row[threadIdx.x] = row;
      found_weight[threadIdx.x] = w;
      __syncthreads();
      const int64_t n = candidates - c0 < blockDim.x ? candidates - c0 : blockDim.x;
      float* dst = out + t * hidden;
      for (int64_t j = 0; j < n; ++j) {  // in run (so row) order
        const int64_t r = found_row[j];
        if (r < 0) continue;
        const float wr = found_weight[j];
        const float* s = src + r * hidden;
        for (int64_t c = threadIdx.x; c < hidden; c += blockDim.x) dst[c] = fmaf(wr, s[c], dst[c]);
      }
    }
  }
}

__global__ void __launch_bounds__(kThreads)
    unpermute_bwd_kernel(float* drows, float* dprobs, const float* dout, const float* rows, const int32_t* row_token,
                         const float* probs, const int32_t* scratch, int64_t rows_count, int64_t tokens,
                         int64_t hidden, int experts) {
  for (int64_t r = blockIdx.x; r < rows_count; r += gridDim.x) {
    const int64_t t = row_token[r];
    if (t < 0 || t >= tokens) continue;  // a broken row_token stays inside the tensors (uniform per block)
    const int e = expert_of(scratch, experts, r);
    const float p = probs != nullptr ? probs[t * experts + e] : 1.0f;
    const float* g = dout + t * hidden;
    float* d = drows + r * hidden;
    const float* v = rows + r * hidden;
    double acc = 0.0;
    for (int64_t c = threadIdx.x; c < hidden; c += blockDim.x) {
      d[c] = fmaf(p, g[c], d[c]);
      if (dprobs != nullptr) acc += static_cast<double>(v[c]) * g[c];
    }
    if (dprobs == nullptr) continue;  // uniform over the grid
    acc = block_sum(acc);
    if (threadIdx.x == 0) dprobs[t * experts + e] += static_cast<float>(acc);
  }
}

int blocks_for(int64_t n) { return static_cast<int>(n < 1 ? 1 : (n > 65535 ? 65535 : n)); }

}  // namespace

void moe_count_nonzero(unsigned long long* count, const uint8_t* map, int64_t n, cudaStream_t s) {
  MT_CUDA_CHECK(cudaMemsetAsync(count, 0, sizeof *count, s));
  count_nonzero_kernel<<<grid_for(n), kThreads, 0, s>>>(count, map, n);
}

void moe_permute_fwd(float* rows, int32_t* row_token, int32_t* counts, const float* tokens, const uint8_t* map,
                     int64_t tokens_count, int64_t experts, int64_t rows_count, int64_t hidden, cudaStream_t s) {
  column_counts_kernel<<<static_cast<int>(experts), kThreads, 0, s>>>(counts, map, tokens_count, experts);
  row_token_kernel<<<static_cast<int>(experts), kThreads, 0, s>>>(row_token, counts, map, tokens_count, experts,
                                                                  rows_count);
  if (rows_count * hidden > 0)
    gather_rows_kernel<<<grid_for(rows_count * hidden), kThreads, 0, s>>>(rows, tokens, row_token, tokens_count,
                                                                          rows_count, hidden);
}

void moe_row_index(int32_t* scratch, const int32_t* row_token, int64_t rows, const int32_t* counts, int64_t experts,
                   cudaStream_t s) {
  row_index_kernel<<<1, 1024, 0, s>>>(scratch, row_token, rows, counts, static_cast<int>(experts));
}

void moe_scatter_rows(float* out, const float* src, const int32_t* row_token, const float* probs,
                      const int32_t* scratch, int64_t tokens_count, int64_t rows_count, int64_t hidden,
                      int64_t experts, cudaStream_t s) {
  if (tokens_count == 0 || rows_count == 0 || hidden == 0) return;
  scatter_rows_kernel<<<blocks_for(tokens_count), kThreads, 0, s>>>(out, src, row_token, probs, scratch, tokens_count,
                                                                    rows_count, hidden, static_cast<int>(experts));
}

void moe_unpermute_bwd(float* drows, float* dprobs, const float* dout, const float* rows, const int32_t* row_token,
                       const float* probs, const int32_t* scratch, int64_t rows_count, int64_t tokens,
                       int64_t hidden, int64_t experts, cudaStream_t s) {
  if (rows_count == 0) return;
  unpermute_bwd_kernel<<<blocks_for(rows_count), kThreads, 0, s>>>(drows, dprobs, dout, rows, row_token, probs,
                                                                    scratch, rows_count, tokens, hidden,
                                                                    static_cast<int>(experts));
}

}  // namespace mt::cuda::k
