// Validates the elementwise ops once for every backend, then routes to the backend owning the memory.
#include "ops/elementwise.h"
#include "ops/dispatch.h"

#include "backend/cpu/elementwise.h"

namespace mt {

namespace {

void check_numel(const TensorView& t, int64_t n, const char* op, const char* name) {
  MT_CHECK(t.numel() == n) << op << ": " << name << " is " << t.str() << " with " << t.numel()
                           << " elements, expected " << n << " (the ops are flat: shapes may differ, sizes not)";
}

void check_not_empty(const TensorView& t, const char* op, const char* name) {
  MT_CHECK(!t.empty() || t.numel() == 0) << op << ": " << name << " has no data";
}

bool is_float_type(DType t) { return t == DType::f32 || t == DType::bf16 || t == DType::f16; }

}  // namespace

void add_fwd(const TensorView& out, const TensorView& a, const TensorView& b) {
  const char* op = "add_fwd";
  check_dtype(out, DType::f32, op, "out");
  check_dtype(a, DType::f32, op, "a");
  check_dtype(b, DType::f32, op, "b");
  check_numel(a, out.numel(), op, "a");
  check_numel(b, out.numel(), op, "b");
  check_not_empty(out, op, "out");
  check_same_device({out, a, b}, op);
  MT_ROUTE(out.device, op, add_fwd(out, a, b));
}

void accumulate(const TensorView& dst, const TensorView& src) {
  const char* op = "accumulate";
  check_dtype(dst, DType::f32, op, "dst");
  check_dtype(src, DType::f32, op, "src");
  check_numel(src, dst.numel(), op, "src");
  check_not_empty(dst, op, "dst");
  check_same_device({dst, src}, op);
  MT_ROUTE(dst.device, op, accumulate(dst, src));
}

void bias_add(const TensorView& t, const TensorView& bias) {
  const char* op = "bias_add";
  check_dtype(t, DType::f32, op, "t");
  check_dtype(bias, DType::f32, op, "bias");
  MT_CHECK(t.ndim() == 2) << op << ": t is " << t.str() << "; expected [N, O]";
  check_shape(bias, {t.dim(1)}, op, "bias");
  check_not_empty(t, op, "t");
  check_not_empty(bias, op, "bias");
  check_same_device({t, bias}, op);
  MT_ROUTE(t.device, op, bias_add(t, bias));
}

void scale_inplace(const TensorView& t, float factor) {
  const char* op = "scale_inplace";
  check_dtype(t, DType::f32, op, "t");
  check_not_empty(t, op, "t");
  MT_ROUTE(t.device, op, scale_inplace(t, factor));
}

void copy_tensor(const TensorView& dst, const TensorView& src) {
  const char* op = "copy_tensor";
  MT_CHECK(dst.dtype == src.dtype) << op << ": dst is " << dst.str() << " but src is " << src.str()
                                   << "; use cast to change the dtype";
  check_numel(src, dst.numel(), op, "src");
  check_not_empty(dst, op, "dst");
  check_same_device({dst, src}, op);
  MT_ROUTE(dst.device, op, copy_tensor(dst, src));
}

void copy_row_block(const TensorView& dst, int64_t dst_row, const TensorView& src, int64_t src_row, int64_t rows) {
  const char* op = "copy_row_block";
  MT_CHECK(dst.ndim() == 3 && src.ndim() == 3 && dst.dim(0) == src.dim(0) && dst.dim(2) == src.dim(2))
      << op << ": dst " << dst.str() << " and src " << src.str() << " must be [outer, rows, inner] alike but for rows";
  MT_CHECK(dst.dtype == src.dtype) << op << ": dst is " << dst.str() << " but src is " << src.str();
  MT_CHECK(rows >= 0 && dst_row >= 0 && src_row >= 0 && dst_row + rows <= dst.dim(1) && src_row + rows <= src.dim(1))
      << op << ": rows " << src_row << " .. " << src_row + rows << " of " << src.str() << " to " << dst_row << " .. "
      << dst_row + rows << " of " << dst.str() << " are out of range";
  check_not_empty(dst, op, "dst");
  check_same_device({dst, src}, op);
  if (rows == 0 || dst.numel() == 0) return;
  MT_ROUTE(dst.device, op, copy_row_block(dst, dst_row, src, src_row, rows));
}

void cast(const TensorView& dst, const TensorView& src) {
  const char* op = "cast";
  MT_CHECK(is_float_type(dst.dtype) && is_float_type(src.dtype))
      << op << ": from " << src.str() << " to " << dst.str() << "; only f32, bf16 and f16 convert";
  check_numel(src, dst.numel(), op, "src");
  check_not_empty(dst, op, "dst");
  check_same_device({dst, src}, op);
  MT_ROUTE(dst.device, op, cast(dst, src));
}

void round_to_dtype(const TensorView& t, DType dtype) {
  const char* op = "round_to_dtype";
  check_dtype(t, DType::f32, op, "t");
  MT_CHECK(is_float_type(dtype)) << op << ": cannot round to " << dtype_name(dtype);
  if (dtype == DType::f32 || t.numel() == 0) return;
  check_not_empty(t, op, "t");
  MT_ROUTE(t.device, op, round_to_dtype(t, dtype));
}

double sum_squares(const TensorView& t) {
  const char* op = "sum_squares";
  MT_CHECK(is_float_type(t.dtype)) << op << ": t is " << t.str() << "; expected f32, bf16 or f16";
  check_not_empty(t, op, "t");
  MT_ROUTE(t.device, op, sum_squares(t));
}

}  // namespace mt
