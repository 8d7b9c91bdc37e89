// C-style launchers of the MoE permute/unpermute kernels (backend/cuda/moe_experts.cpp calls them):
// raw device pointers, sizes and the stream. Implemented in moe_experts.cu.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace mt::cuda::k {

// *count = the nonzero bytes of map[0, n) (count: device memory).
void moe_count_nonzero(unsigned long long* count, const uint8_t* map, int64_t n, cudaStream_t s);

// counts[e] = column e's nonzeros of map [T, E]; row_token lists, expert by expert, the tokens of
// each column in increasing order (entries at or past `rows` are not written); rows[r] =
// tokens[row_token[r]] for r < rows (h floats each).
void moe_permute_fwd(float* rows, int32_t* row_token, int32_t* counts, const float* tokens, const uint8_t* map,
                     int64_t tokens_count, int64_t experts, int64_t rows_count, int64_t hidden, cudaStream_t s);

// The index the scatters use, in `scratch` (kMoeScratchInts ints of device memory): the experts'
// row offsets from counts (E + 1 entries, E ≤ kMoeMaxOffsetExperts; skipped when counts is null)
// and the starts of the maximal strictly increasing runs of row_token.
constexpr int kMoeScratchInts = 8192;
constexpr int kMoeMaxOffsetExperts = 2047;
void moe_row_index(int32_t* scratch, const int32_t* row_token, int64_t rows, const int32_t* counts, int64_t experts,
                   cudaStream_t s);

// out[row_token[r]] = fma(w_r, src[r], out[row_token[r]]) for every r, each token's rows in
// increasing r; w_r = probs[row_token[r], e(r)] (e(r) from the offsets in scratch), or 1 when
// probs is null. Needs moe_row_index's scratch (with the offsets when probs is given).
void moe_scatter_rows(float* out, const float* src, const int32_t* row_token, const float* probs,
                      const int32_t* scratch, int64_t tokens_count, int64_t rows_count, int64_t hidden,
                      int64_t experts, cudaStream_t s);

// drows[r] = fma(p_r, dout[t], drows[r]) with t = row_token[r]; when dprobs is given, also
// dprobs[t, e(r)] += Σ_c rows[r, c] · dout[t, c] (in double). Needs moe_row_index's offsets; rows
// naming a token outside [0, tokens) are skipped.
void moe_unpermute_bwd(float* drows, float* dprobs, const float* dout, const float* rows, const int32_t* row_token,
                       const float* probs, const int32_t* scratch, int64_t rows_count, int64_t tokens,
                       int64_t hidden, int64_t experts, cudaStream_t s);

}  // namespace mt::cuda::k
