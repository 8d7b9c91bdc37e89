// Validates the cross-entropy ops once for every backend, then routes to the backend owning the
// memory (the backend checks label values, which only it can read).
#include "ops/cross_entropy.h"
#include "ops/dispatch.h"

#include <cstdint>
#include <utility>

#include "backend/cpu/cross_entropy.h"

namespace mt {

namespace {

// Returns N after checking logits f32 [N, V] with V > 0.
int64_t check_logits(const TensorView& logits, const char* op) {
  check_dtype(logits, DType::f32, op, "logits");
  MT_CHECK(logits.ndim() == 2 && logits.dim(1) > 0) << op << ": logits is " << logits.str()
                                                    << "; expected [N, V] with V > 0";
  check_tensor(logits, logits.shape, DType::f32, op, "logits");
  return logits.dim(0);
}

// The backward ops' arguments. In place is allowed (the same bytes); a shifted overlap would read
// already-written gradients.
void check_bwd_args(const TensorView& dlogits, const TensorView& dlosses, const TensorView& logits,
                    const TensorView& lse, const TensorView& labels, const char* op) {
  const int64_t n = check_logits(logits, op);
  check_tensor(dlogits, logits.shape, DType::f32, op, "dlogits");
  check_tensor(dlosses, {n}, DType::f32, op, "dlosses");
  check_tensor(lse, {n}, DType::f32, op, "lse");
  check_tensor(labels, {n}, DType::i32, op, "labels");
  const auto g = reinterpret_cast<uintptr_t>(dlogits.data), x = reinterpret_cast<uintptr_t>(logits.data);
  MT_CHECK(g == x || g + dlogits.bytes() <= x || x + logits.bytes() <= g)
      << op << ": dlogits partially overlaps logits; pass the same buffer (in place) or a disjoint one";
  check_same_device({dlogits, dlosses, logits, lse, labels}, op);
}

}  // namespace

void cross_entropy_fwd(const TensorView& losses, const TensorView& lse, const TensorView& logits,
                       const TensorView& labels) {
  const char* op = "cross_entropy_fwd";
  const int64_t n = check_logits(logits, op);
  check_tensor(labels, {n}, DType::i32, op, "labels");
  check_tensor(losses, {n}, DType::f32, op, "losses");
  check_tensor(lse, {n}, DType::f32, op, "lse");
  check_same_device({losses, lse, logits, labels}, op);
  MT_ROUTE(logits.device, op, cross_entropy_fwd(losses, lse, logits, labels));
}

void cross_entropy_bwd(const TensorView& dlogits, const TensorView& dlosses, const TensorView& logits,
                       const TensorView& lse, const TensorView& labels) {
  const char* op = "cross_entropy_bwd";
  check_bwd_args(dlogits, dlosses, logits, lse, labels, op);
  MT_ROUTE(logits.device, op, cross_entropy_bwd(dlogits, dlosses, logits, lse, labels));
}

void cross_entropy_shard_max(const TensorView& row_max, const TensorView& logits) {
  const char* op = "cross_entropy_shard_max";
  const int64_t n = check_logits(logits, op);
  check_tensor(row_max, {n}, DType::f32, op, "row_max");
  check_same_device({row_max, logits}, op);
  MT_ROUTE(logits.device, op, cross_entropy_shard_max(row_max, logits));
}

void cross_entropy_shard_sums(const TensorView& sum_exp, const TensorView& target, const TensorView& logits,
                              const TensorView& labels, const TensorView& row_max, int64_t vocab_start) {
  const char* op = "cross_entropy_shard_sums";
  const int64_t n = check_logits(logits, op);
  check_tensor(sum_exp, {n}, DType::f32, op, "sum_exp");
  check_tensor(target, {n}, DType::f32, op, "target");
  check_tensor(labels, {n}, DType::i32, op, "labels");
  check_tensor(row_max, {n}, DType::f32, op, "row_max");
  MT_CHECK(vocab_start >= 0) << op << ": vocab_start " << vocab_start << " is negative";
  check_same_device({sum_exp, target, logits, labels, row_max}, op);
  MT_ROUTE(logits.device, op, cross_entropy_shard_sums(sum_exp, target, logits, labels, row_max, vocab_start));
}

void cross_entropy_shard_loss(const TensorView& losses, const TensorView& lse, const TensorView& row_max,
                              const TensorView& sum_exp, const TensorView& target) {
  const char* op = "cross_entropy_shard_loss";
  const int64_t n = losses.numel();
  for (const auto& [t, name] : {std::pair{losses, "losses"}, {lse, "lse"}, {row_max, "row_max"},
                                {sum_exp, "sum_exp"}, {target, "target"}})
    check_tensor(t, {n}, DType::f32, op, name);
  check_same_device({losses, lse, row_max, sum_exp, target}, op);
  MT_ROUTE(losses.device, op, cross_entropy_shard_loss(losses, lse, row_max, sum_exp, target));
}

void cross_entropy_shard_bwd(const TensorView& dlogits, const TensorView& dlosses, const TensorView& logits,
                             const TensorView& lse, const TensorView& labels, int64_t vocab_start) {
  const char* op = "cross_entropy_shard_bwd";
  check_bwd_args(dlogits, dlosses, logits, lse, labels, op);
  MT_CHECK(vocab_start >= 0) << op << ": vocab_start " << vocab_start << " is negative";
  MT_ROUTE(logits.device, op, cross_entropy_shard_bwd(dlogits, dlosses, logits, lse, labels, vocab_start));
}

}  // namespace mt
