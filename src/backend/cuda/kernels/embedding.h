// C-style launchers of the token + position embedding kernels: raw device pointers, sizes and the
// stream. Implemented in embedding.cu. Ids are i32 [b, s] (data layout), rows [s, b, h]
// (activation layout); ids are already range-checked.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace mt::cuda::k {

// y[i, j] = (word row tokens[j, i] − vocab_start when the shard holds it, else 0)
//           + pos_table row (positions ? positions[j, i] : i) when pos_table is not null.
void embedding_fwd(float* y, const int32_t* tokens, const int32_t* positions, const float* word,
                   const float* pos_table, int64_t b, int64_t s, int64_t h, int64_t word_rows, int64_t vocab_start,
                   cudaStream_t st);
// dword and dpos_table (either may be null) += the rows of dy their ids select; each column
// owned by one thread that visits the tokens in the CPU's order: deterministic, the CPU's bits.
void embedding_bwd(float* dword, float* dpos_table, const float* dy, const int32_t* tokens,
                   const int32_t* positions, int64_t b, int64_t s, int64_t h, int64_t word_rows, int64_t vocab_start,
                   cudaStream_t st);

}  // namespace mt::cuda::k
