// Softmax cross entropy over the vocabulary, fused so no probability tensor is ever stored:
// the forward saves one log-sum-exp per row, the backward rebuilds softmax row by row.
#pragma once

#include <cstdint>

#include "tensor/tensor.h"

namespace mt {

// logits f32 [N, V], labels i32 [N] (each in [0, V), else mt::Error).
// losses[N] = logsumexp(logits[n]) − logits[n, labels[n]];  saves lse[N].
void cross_entropy_fwd(const TensorView& losses, const TensorView& lse, const TensorView& logits,
                       const TensorView& labels);

// dlogits[n, v] = dlosses[n] · (softmax(logits[n])[v] − [v == labels[n]]).
// Overwrites dlogits (it does not accumulate) and may alias logits, which saves the [N, V] buffer.
void cross_entropy_bwd(const TensorView& dlogits, const TensorView& dlosses, const TensorView& logits,
                       const TensorView& lse, const TensorView& labels);

// Vocabulary-parallel pieces (Megatron's VocabParallelCrossEntropy): logits f32 [N, V] hold columns
// [vocab_start, vocab_start + V) of the full vocabulary, labels are full-vocabulary ids. The caller
// all-reduces over the tensor-parallel group between the steps (max, then the two sums).
// row_max[N] = max_v logits[n, v].
void cross_entropy_shard_max(const TensorView& row_max, const TensorView& logits);
// sum_exp[N] = Σ_v exp(logits[n, v] − row_max[n]);
// target[N] = logits[n, labels[n] − vocab_start] where the label falls in this shard, else 0.
void cross_entropy_shard_sums(const TensorView& sum_exp, const TensorView& target, const TensorView& logits,
                              const TensorView& labels, const TensorView& row_max, int64_t vocab_start);
// From the reduced statistics: lse[N] = row_max + log(sum_exp), losses[N] = lse − target.
void cross_entropy_shard_loss(const TensorView& losses, const TensorView& lse, const TensorView& row_max,
                              const TensorView& sum_exp, const TensorView& target);
// cross_entropy_bwd on a shard (lse is the full row's): the one-hot term only where the label
// falls in this shard. Overwrites dlogits, may alias logits.
void cross_entropy_shard_bwd(const TensorView& dlogits, const TensorView& dlosses, const TensorView& logits,
                             const TensorView& lse, const TensorView& labels, int64_t vocab_start);

}  // namespace mt
