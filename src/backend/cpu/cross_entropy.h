// CPU kernels for ops/cross_entropy.h (shapes already validated by the op; labels checked here).
#pragma once

#include <cstdint>

#include "tensor/tensor.h"

namespace mt::cpu {

void cross_entropy_fwd(const TensorView& losses, const TensorView& lse, const TensorView& logits,
                       const TensorView& labels);
// dlogits may be the same memory as logits.
void cross_entropy_bwd(const TensorView& dlogits, const TensorView& dlosses, const TensorView& logits,
                       const TensorView& lse, const TensorView& labels);

void cross_entropy_shard_max(const TensorView& row_max, const TensorView& logits);
void cross_entropy_shard_sums(const TensorView& sum_exp, const TensorView& target, const TensorView& logits,
                              const TensorView& labels, const TensorView& row_max, int64_t vocab_start);
void cross_entropy_shard_loss(const TensorView& losses, const TensorView& lse, const TensorView& row_max,
                              const TensorView& sum_exp, const TensorView& target);
// Labels outside [vocab_start, vocab_start + V) get no one-hot term (they belong to another shard).
void cross_entropy_shard_bwd(const TensorView& dlogits, const TensorView& dlosses, const TensorView& logits,
                             const TensorView& lse, const TensorView& labels, int64_t vocab_start);

}  // namespace mt::cpu
