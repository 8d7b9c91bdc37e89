// Token + position embedding CUDA kernels.  Forward: one thread per output element (a gather).
// Backward: repeated ids make a scatter-add over tokens race, so the work is split over columns
// instead: thread c adds column c of every token's gradient row, tokens in order (s outer, b
// inner, as the CPU), so the sums are the CPU's bit for bit with no atomics and no scratch.
// Loads along a warp are adjacent columns of one row: coalesced.
#include "backend/cuda/kernels/embedding.h"
#include "backend/cuda/kernels/launch.cuh"

namespace mt::cuda::k {

namespace {

__global__ void fwd_kernel(float* y, const int32_t* tokens, const int32_t* positions, const float* word,
                           const float* pos_table, int64_t b, int64_t s, int64_t h, int64_t word_rows,
                           int64_t vocab_start) {
  MT_GRID_LOOP(e, s * b * h) {
    const int64_t r = e / h, c = e % h;
    const int64_t i = r / b, j = r % b;  // out row r = (i, j); ids are [b, s]
    const int64_t id = static_cast<int64_t>(tokens[j * s + i]) - vocab_start;
    float v = id >= 0 && id < word_rows ? word[id * h + c] : 0.0f;  // 0: another shard's id
    if (pos_table) {
      const int64_t p = positions ? static_cast<int64_t>(positions[j * s + i]) : i;
      v += pos_table[p * h + c];
    }
    y[e] = v;
  }
}

__global__ void bwd_kernel(float* dword, float* dpos_table, const float* dy, const int32_t* tokens,
                           const int32_t* positions, int64_t b, int64_t s, int64_t h, int64_t word_rows,
                           int64_t vocab_start) {
  MT_GRID_LOOP(c, h) {
    for (int64_t i = 0; i < s; ++i)
      for (int64_t j = 0; j < b; ++j) {
        const float g = dy[(i * b + j) * h + c];
        const int64_t id = static_cast<int64_t>(tokens[j * s + i]) - vocab_start;
        if (dword && id >= 0 && id < word_rows) dword[id * h + c] += g;
        if (dpos_table) {
          const int64_t p = positions ? static_cast<int64_t>(positions[j * s + i]) : i;
          dpos_table[p * h + c] += g;
        }
      }
  }
}

// Small blocks: a hidden size of a few thousand columns still spreads over many multiprocessors.
constexpr int kColumnThreads = 64;

}  // namespace

void embedding_fwd(float* y, const int32_t* tokens, const int32_t* positions, const float* word,
                   const float* pos_table, int64_t b, int64_t s, int64_t h, int64_t word_rows, int64_t vocab_start,
                   cudaStream_t st) {
  fwd_kernel<<<grid_for(s * b * h), kThreads, 0, st>>>(y, tokens, positions, word, pos_table, b, s, h, word_rows,
                                                       vocab_start);
}

void embedding_bwd(float* dword, float* dpos_table, const float* dy, const int32_t* tokens,
                   const int32_t* positions, int64_t b, int64_t s, int64_t h, int64_t word_rows, int64_t vocab_start,
                   cudaStream_t st) {
  const int64_t blocks = (h + kColumnThreads - 1) / kColumnThreads;
  bwd_kernel<<<static_cast<int>(blocks < 65536 ? blocks : 65536), kColumnThreads, 0, st>>>(
      dword, dpos_table, dy, tokens, positions, b, s, h, word_rows, vocab_start);
}

}  // namespace mt::cuda::k
