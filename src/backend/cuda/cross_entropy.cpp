// CUDA entry points of ops/cross_entropy.h: the labels' range check (the CPU kernels' error, from
// ids.h), then the kernels of cross_entropy.cu.
#include "backend/cuda/ids.h"
#include "backend/cuda/kernels/cross_entropy.h"
#include "backend/cuda/ops.h"
#include "backend/cuda/runtime.h"

namespace mt::cuda {

namespace {

void check_labels(const TensorView& labels, int64_t vocab, const char* op) {
  int32_t value = 0;
  const int64_t r = first_id_out_of_range(labels.i32(), labels.numel(), vocab, &value);
  if (r >= 0)
    MT_FAIL() << op << ": labels[" << r << "] = " << value << " is out of range [0, " << vocab
              << ") (vocabulary size of the logits)";
}

}  // namespace

void cross_entropy_fwd(const TensorView& losses, const TensorView& lse, const TensorView& logits,
                       const TensorView& labels) {
  const int64_t rows = logits.dim(0), vocab = logits.dim(1);
  check_labels(labels, vocab, "cross_entropy_fwd");
  if (rows == 0) return;
  k::cross_entropy_fwd(losses.f32(), lse.f32(), logits.f32(), labels.i32(), rows, vocab, stream());
  check_launch("cross_entropy_fwd");
}

void cross_entropy_bwd(const TensorView& dlogits, const TensorView& dlosses, const TensorView& logits,
                       const TensorView& lse, const TensorView& labels) {
  check_labels(labels, logits.dim(1), "cross_entropy_bwd");
  cross_entropy_shard_bwd(dlogits, dlosses, logits, lse, labels, 0);
}

void cross_entropy_shard_bwd(const TensorView& dlogits, const TensorView& dlosses, const TensorView& logits,
                             const TensorView& lse, const TensorView& labels, int64_t vocab_start) {
  const int64_t rows = logits.dim(0), vocab = logits.dim(1);
  if (rows == 0) return;
  k::cross_entropy_bwd(dlogits.f32(), dlosses.f32(), logits.f32(), lse.f32(), labels.i32(), rows, vocab, vocab_start,
                       stream());
  check_launch("cross_entropy_bwd");
}

void cross_entropy_shard_max(const TensorView& row_max, const TensorView& logits) {
  const int64_t rows = logits.dim(0), vocab = logits.dim(1);
  if (rows == 0) return;
  k::cross_entropy_shard_max(row_max.f32(), logits.f32(), rows, vocab, stream());
  check_launch("cross_entropy_shard_max");
}

void cross_entropy_shard_sums(const TensorView& sum_exp, const TensorView& target, const TensorView& logits,
                              const TensorView& labels, const TensorView& row_max, int64_t vocab_start) {
  const int64_t rows = logits.dim(0), vocab = logits.dim(1);
  if (rows == 0) return;
  k::cross_entropy_shard_sums(sum_exp.f32(), target.f32(), logits.f32(), labels.i32(), row_max.f32(), rows, vocab,
                              vocab_start, stream());
  check_launch("cross_entropy_shard_sums");
}

void cross_entropy_shard_loss(const TensorView& losses, const TensorView& lse, const TensorView& row_max,
                              const TensorView& sum_exp, const TensorView& target) {
  const int64_t rows = losses.numel();
  if (rows == 0) return;
  k::cross_entropy_shard_loss(losses.f32(), lse.f32(), row_max.f32(), sum_exp.f32(), target.f32(), rows, stream());
  check_launch("cross_entropy_shard_loss");
}

}  // namespace mt::cuda
