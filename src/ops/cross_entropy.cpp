// Validates the cross-entropy ops once for every backend, then routes to the backend owning the
// memory (the backend checks label values, which only it can read).
#include "ops/cross_entropy.h"
#include "ops/dispatch.h"

#include <cstdint>

#include "backend/cpu/cross_entropy.h"

namespace mt {

namespace {

void check_tensor(const TensorView& t, const Shape& shape, DType dtype, const char* op, const char* name) {
  check_dtype(t, dtype, op, name);
  check_shape(t, shape, op, name);
  MT_CHECK(!t.empty() || t.numel() == 0) << op << ": " << name << " " << t.str() << " has no data";
}

// Returns N after checking logits f32 [N, V] with V > 0.
int64_t check_logits(const TensorView& logits, const char* op) {
  check_dtype(logits, DType::f32, op, "logits");
  MT_CHECK(logits.ndim() == 2 && logits.dim(1) > 0) << op << ": logits is " << logits.str()
                                                    << "; expected [N, V] with V > 0";
  check_tensor(logits, logits.shape, DType::f32, op, "logits");
  return logits.dim(0);
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
  switch (logits.device) {
    case Device::cpu: return cpu::cross_entropy_fwd(losses, lse, logits, labels);
    case Device::cuda: break;
  }
  no_kernel(op);
}

void cross_entropy_bwd(const TensorView& dlogits, const TensorView& dlosses, const TensorView& logits,
                       const TensorView& lse, const TensorView& labels) {
  const char* op = "cross_entropy_bwd";
  const int64_t n = check_logits(logits, op);
  check_tensor(dlogits, logits.shape, DType::f32, op, "dlogits");
  check_tensor(dlosses, {n}, DType::f32, op, "dlosses");
  check_tensor(lse, {n}, DType::f32, op, "lse");
  check_tensor(labels, {n}, DType::i32, op, "labels");
  // In place is allowed (the same bytes); a shifted overlap would read already-written gradients.
  const auto g = reinterpret_cast<uintptr_t>(dlogits.data), x = reinterpret_cast<uintptr_t>(logits.data);
  MT_CHECK(g == x || g + dlogits.bytes() <= x || x + logits.bytes() <= g)
      << op << ": dlogits partially overlaps logits; pass the same buffer (in place) or a disjoint one";
  check_same_device({dlogits, dlosses, logits, lse, labels}, op);
  switch (logits.device) {
    case Device::cpu: return cpu::cross_entropy_bwd(dlogits, dlosses, logits, lse, labels);
    case Device::cuda: break;
  }
  no_kernel(op);
}

}  // namespace mt
