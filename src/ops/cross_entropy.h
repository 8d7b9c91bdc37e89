// Softmax cross entropy over the vocabulary, fused so no probability tensor is ever stored:
// the forward saves one log-sum-exp per row, the backward rebuilds softmax row by row.
#pragma once

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

}  // namespace mt
