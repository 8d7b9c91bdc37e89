// C-style launchers of the fused softmax cross-entropy kernels, whole-vocabulary and
// vocabulary-parallel: raw device pointers, sizes and the stream. Implemented in cross_entropy.cu.
// Logits are [rows, vocab] f32, labels i32 (full-vocabulary ids; already range-checked where the
// op requires it).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace mt::cuda::k {

// lse[r] = max + log Σ exp(x − max), loss[r] = lse[r] − x[r, labels[r]].
void cross_entropy_fwd(float* loss, float* lse, const float* logits, const int32_t* labels, int64_t rows,
                       int64_t vocab, cudaStream_t s);
// g[r, v] = dloss[r]·exp(x[r, v] − lse[r]) − dloss[r]·[v == labels[r] − vocab_start], or 0 where
// dloss[r] == 0. g may be logits (each element is read, then written, by one thread).
void cross_entropy_bwd(float* g, const float* dloss, const float* logits, const float* lse, const int32_t* labels,
                       int64_t rows, int64_t vocab, int64_t vocab_start, cudaStream_t s);
// row_max[r] = max_v x[r, v].
void cross_entropy_shard_max(float* row_max, const float* logits, int64_t rows, int64_t vocab, cudaStream_t s);
// sum_exp[r] = Σ_v exp(x[r, v] − row_max[r]); target[r] = x[r, labels[r] − vocab_start] in the shard, else 0.
void cross_entropy_shard_sums(float* sum_exp, float* target, const float* logits, const int32_t* labels,
                              const float* row_max, int64_t rows, int64_t vocab, int64_t vocab_start, cudaStream_t s);
// lse[r] = row_max[r] + log sum_exp[r], loss[r] = lse[r] − target[r].
void cross_entropy_shard_loss(float* loss, float* lse, const float* row_max, const float* sum_exp,
                              const float* target, int64_t rows, cudaStream_t s);

}  // namespace mt::cuda::k
