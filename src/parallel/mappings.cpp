// Megatron's tensor-parallel mappings: shape checks, collectives over the tp group, and the local
// copies between whole tensors and this rank's blocks. Every local copy goes through the backend
// owning the memory (never a host memcpy), so device tensors are copied on their device.
#include "parallel/mappings.h"

#include "backend/backend.h"

namespace mt {

namespace {

void check_columns(const TensorView& whole, const TensorView& part, int t, const char* op) {
  MT_CHECK(whole.ndim() == 2 && part.ndim() == 2 && whole.dim(0) == part.dim(0) && whole.dim(1) == part.dim(1) * t &&
           whole.dtype == part.dtype)
      << op << ": " << whole.str() << " must be [N, C] and " << part.str() << " [N, C/" << t << "]";
}

void check_rows(const TensorView& whole, const TensorView& part, int t, const char* op) {
  MT_CHECK(whole.numel() == part.numel() * t && whole.dim(0) == part.dim(0) * t && whole.dtype == part.dtype)
      << op << ": " << whole.str() << " must hold " << t << " row blocks of " << part.str();
}

// The backend that copies between a and b: both must live on one device.
Backend& copy_backend(const TensorView& a, const TensorView& b, const char* op) {
  MT_CHECK(a.device == b.device) << op << ": " << a.str() << " and " << b.str() << " live on different devices";
  return backend_for(a.device);
}

// dst = src, same byte count (the caller checked the shapes).
void copy_bytes(const TensorView& dst, const TensorView& src, const char* op) {
  copy_backend(dst, src, op).copy(dst.data, src.data, src.bytes());
}

// Copies column block `block` (width part.dim(1)) of whole into part, or back: one row at a time.
void copy_columns(const TensorView& whole, const TensorView& part, int64_t block, bool to_part) {
  Backend& backend = copy_backend(whole, part, "copy_columns");
  const int64_t rows = part.dim(0), width = part.dim(1) * static_cast<int64_t>(dtype_size(part.dtype));
  auto* w = static_cast<char*>(whole.data) + block * width;
  auto* p = static_cast<char*>(part.data);
  const int64_t stride = whole.dim(1) * static_cast<int64_t>(dtype_size(whole.dtype));
  for (int64_t r = 0; r < rows; ++r) {
    if (to_part)
      backend.copy(p + r * width, w + r * stride, static_cast<size_t>(width));
    else
      backend.copy(w + r * stride, p + r * width, static_cast<size_t>(width));
  }
}

// whole[N, C] = concat over ranks of part[N, C/t] along columns, through scratch [t, N, C/t].
void all_gather_columns(const TensorParallel& tp, const TensorView& whole, const TensorView& part,
                        const TensorView& scratch, const char* op) {
  check_columns(whole, part, tp.size(), op);
  MT_CHECK(scratch.numel() >= whole.numel() && scratch.dtype == whole.dtype)
      << op << ": scratch " << scratch.str() << " must hold " << whole.numel() << " elements";
  const TensorView blocks = scratch.reshape({scratch.numel()}).rows(0, whole.numel());
  tp.comm->all_gather(blocks, part);
  for (int r = 0; r < tp.size(); ++r)
    copy_columns(whole, blocks.rows(r * part.numel(), part.numel()).reshape(part.shape), r, false);
}

TensorView row_block(const TensorView& whole, int64_t rows, int rank) { return whole.rows(rank * rows, rows); }

}  // namespace

void copy_to_tp_bwd(const TensorParallel& tp, const TensorView& grad) {
  if (tp.active()) tp.comm->all_reduce(grad, ReduceOp::sum);
}

void reduce_from_tp_fwd(const TensorParallel& tp, const TensorView& x) {
  if (tp.active()) tp.comm->all_reduce(x, ReduceOp::sum);
}

void scatter_to_tp_fwd(const TensorParallel& tp, const TensorView& out, const TensorView& in) {
  check_columns(in, out, tp.size(), "scatter_to_tp_fwd");
  copy_columns(in, out, tp.rank(), true);
}

void scatter_to_tp_bwd(const TensorParallel& tp, const TensorView& din, const TensorView& dout,
                       const TensorView& scratch) {
  if (!tp.active()) return copy_columns(din, dout, 0, false);
  all_gather_columns(tp, din, dout, scratch, "scatter_to_tp_bwd");
}

void gather_from_tp_fwd(const TensorParallel& tp, const TensorView& out, const TensorView& in,
                        const TensorView& scratch) {
  if (!tp.active()) return copy_columns(out, in, 0, false);
  all_gather_columns(tp, out, in, scratch, "gather_from_tp_fwd");
}

void gather_from_tp_bwd(const TensorParallel& tp, const TensorView& din, const TensorView& dout) {
  check_columns(dout, din, tp.size(), "gather_from_tp_bwd");
  copy_columns(dout, din, tp.rank(), true);
}

void scatter_to_sp_fwd(const TensorParallel& tp, const TensorView& out, const TensorView& in) {
  check_rows(in, out, tp.size(), "scatter_to_sp_fwd");
  copy_bytes(out, row_block(in, out.dim(0), tp.rank()), "scatter_to_sp_fwd");
}

void scatter_to_sp_bwd(const TensorParallel& tp, const TensorView& din, const TensorView& dout) {
  check_rows(din, dout, tp.size(), "scatter_to_sp_bwd");
  if (!tp.active()) return copy_bytes(din, dout, "scatter_to_sp_bwd");
  tp.comm->all_gather(din, dout);
}

void gather_from_sp_fwd(const TensorParallel& tp, const TensorView& out, const TensorView& in) {
  check_rows(out, in, tp.size(), "gather_from_sp_fwd");
  if (!tp.active()) return copy_bytes(out, in, "gather_from_sp_fwd");
  tp.comm->all_gather(out, in);
}

void gather_from_sp_bwd(const TensorParallel& tp, const TensorView& din, const TensorView& dout) {
  check_rows(dout, din, tp.size(), "gather_from_sp_bwd");
  if (!tp.active()) return copy_bytes(din, dout, "gather_from_sp_bwd");
  tp.comm->reduce_scatter(din, dout, ReduceOp::sum);
}

void reduce_scatter_to_sp_fwd(const TensorParallel& tp, const TensorView& out, const TensorView& in) {
  check_rows(in, out, tp.size(), "reduce_scatter_to_sp_fwd");
  if (!tp.active()) return copy_bytes(out, in, "reduce_scatter_to_sp_fwd");
  tp.comm->reduce_scatter(out, in, ReduceOp::sum);
}

void reduce_scatter_to_sp_bwd(const TensorParallel& tp, const TensorView& din, const TensorView& dout) {
  check_rows(din, dout, tp.size(), "reduce_scatter_to_sp_bwd");
  if (!tp.active()) return copy_bytes(din, dout, "reduce_scatter_to_sp_bwd");
  tp.comm->all_gather(din, dout);
}

}  // namespace mt
