// Placeholders for the cross entropy ops until their CUDA kernels land (issue 25): each
// names itself, so a CUDA run stops with a clear message instead of a wrong result.
#include "backend/cuda/ops.h"

namespace mt::cuda {

void cross_entropy_fwd(const TensorView& losses, const TensorView& lse, const TensorView& logits,
                       const TensorView& labels) {
  MT_FAIL() << "cross_entropy_fwd: no CUDA kernel yet (issue 25); run with --device cpu";
}

void cross_entropy_bwd(const TensorView& dlogits, const TensorView& dlosses, const TensorView& logits,
                       const TensorView& lse, const TensorView& labels) {
  MT_FAIL() << "cross_entropy_bwd: no CUDA kernel yet (issue 25); run with --device cpu";
}

void cross_entropy_shard_max(const TensorView& row_max, const TensorView& logits) {
  MT_FAIL() << "cross_entropy_shard_max: no CUDA kernel yet (issue 25); run with --device cpu";
}

void cross_entropy_shard_sums(const TensorView& sum_exp, const TensorView& target, const TensorView& logits,
                              const TensorView& labels, const TensorView& row_max, int64_t vocab_start) {
  MT_FAIL() << "cross_entropy_shard_sums: no CUDA kernel yet (issue 25); run with --device cpu";
}

void cross_entropy_shard_loss(const TensorView& losses, const TensorView& lse, const TensorView& row_max,
                              const TensorView& sum_exp, const TensorView& target) {
  MT_FAIL() << "cross_entropy_shard_loss: no CUDA kernel yet (issue 25); run with --device cpu";
}

void cross_entropy_shard_bwd(const TensorView& dlogits, const TensorView& dlosses, const TensorView& logits,
                             const TensorView& lse, const TensorView& labels, int64_t vocab_start) {
  MT_FAIL() << "cross_entropy_shard_bwd: no CUDA kernel yet (issue 25); run with --device cpu";
}

}  // namespace mt::cuda
