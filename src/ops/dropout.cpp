// Validates the dropout ops once for every backend, then routes to the backend owning the memory.
#include "ops/dropout.h"
#include "ops/dispatch.h"

#include <cmath>

#include "backend/cpu/dropout.h"
#include "ops/elementwise.h"

namespace mt {

namespace {

void check_p(float p, const char* op) {
  MT_CHECK(std::isfinite(p) && p >= 0.0f && p < 1.0f) << op << ": dropout probability " << p
                                                       << " must lie in [0, 1)";
}

// The rows must tile the tensor: every row holds one position of one sample of the batch.
void check_rows(const DropoutRows& rows, const TensorView& t, const char* op) {
  MT_CHECK(rows.batch >= 1 && rows.seq_length >= 1 && rows.first_position >= 0)
      << op << ": dropout rows need batch >= 1, seq_length >= 1 and first_position >= 0 (got " << rows.batch << ", "
      << rows.seq_length << ", " << rows.first_position << ")";
  if (rows.flat()) return;
  const int64_t width = t.ndim() > 0 ? t.dim(-1) : 1;
  const int64_t n = width > 0 ? t.numel() / width : 0;
  MT_CHECK(n % rows.batch == 0 && (n == 0 || rows.positions.position(rows.first_position + n / rows.batch - 1) <
                                                  rows.seq_length))
      << op << ": " << n << " rows of batch " << rows.batch << " from position " << rows.first_position
      << " do not fit sequences of " << rows.seq_length;
}

// An empty mask stands for dropout off: a layer built with p = 0 keeps no mask (the results are
// bitwise those of an all-ones mask: x·1 = x).
bool without_mask(const TensorView& mask, float p, const char* op) {
  if (mask.ndim() > 0) return false;
  MT_CHECK(p == 0.0f) << op << ": dropout probability " << p << " needs a mask (this layer was built without dropout)";
  return true;
}

}  // namespace

void dropout_fwd(const TensorView& out, const TensorView& mask, const TensorView& inp, float p, const RngStream& rng,
                 const DropoutRows& rows) {
  const char* op = "dropout_fwd";
  if (without_mask(mask, p, op)) return copy_tensor(out, inp);
  check_tensor(inp, inp.shape, DType::f32, op, "inp");
  check_tensor(out, inp.shape, DType::f32, op, "out");
  check_tensor(mask, inp.shape, DType::u8, op, "mask");
  check_p(p, op);
  check_rows(rows, inp, op);
  check_same_device({out, mask, inp}, op);
  MT_ROUTE(inp.device, op, dropout_fwd(out, mask, inp, p, rng, rows));
}

void dropout_mask(const TensorView& mask, float p, const RngStream& rng, const DropoutRows& rows) {
  const char* op = "dropout_mask";
  if (without_mask(mask, p, op)) return;
  check_tensor(mask, mask.shape, DType::u8, op, "mask");
  check_p(p, op);
  check_rows(rows, mask, op);
  MT_ROUTE(mask.device, op, dropout_mask(mask, p, rng, rows));
}

void dropout_bwd(const TensorView& dinp, const TensorView& dout, const TensorView& mask, float p) {
  const char* op = "dropout_bwd";
  if (without_mask(mask, p, op)) return accumulate(dinp, dout);
  check_tensor(dout, dout.shape, DType::f32, op, "dout");
  check_tensor(dinp, dout.shape, DType::f32, op, "dinp");
  check_tensor(mask, dout.shape, DType::u8, op, "mask");
  check_p(p, op);
  check_same_device({dinp, dout, mask}, op);
  MT_ROUTE(dout.device, op, dropout_bwd(dinp, dout, mask, p));
}

void dropout_add_fwd(const TensorView& out, const TensorView& mask, const TensorView& inp,
                     const TensorView& residual, float p, const RngStream& rng, const DropoutRows& rows) {
  const char* op = "dropout_add_fwd";
  if (without_mask(mask, p, op)) return add_fwd(out, residual, inp);
  check_tensor(inp, inp.shape, DType::f32, op, "inp");
  check_tensor(residual, inp.shape, DType::f32, op, "residual");
  check_tensor(out, inp.shape, DType::f32, op, "out");
  check_tensor(mask, inp.shape, DType::u8, op, "mask");
  check_p(p, op);
  check_rows(rows, inp, op);
  check_same_device({out, mask, inp, residual}, op);
  MT_ROUTE(inp.device, op, dropout_add_fwd(out, mask, inp, residual, p, rng, rows));
}

}  // namespace mt
