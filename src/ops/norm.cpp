// Validates LayerNorm/RMSNorm arguments once for every backend, then routes to the backend owning
// the memory.  inp may carry any leading dims ([N, h] or [s, b, h]); rows N = numel / h.
#include "ops/norm.h"
#include "ops/dispatch.h"

#include <cmath>

#include "backend/cpu/norm.h"

namespace mt {

namespace {

void check_present(const TensorView& t, const char* op, const char* name) {
  MT_CHECK(!t.empty() || t.numel() == 0) << op << ": " << name << " " << t.str() << " has no data";
}

// Checks inp (f32, last dim h > 0) and returns the row count.
int64_t check_rows(const TensorView& inp, const char* op) {
  check_dtype(inp, DType::f32, op, "inp");
  MT_CHECK(inp.ndim() >= 1 && inp.dim(-1) > 0) << op << ": inp is " << inp.str() << "; expected [N, h] with h > 0";
  check_present(inp, op, "inp");
  return inp.numel() / inp.dim(-1);
}

void check_like(const TensorView& t, const TensorView& inp, const char* op, const char* name) {
  check_dtype(t, DType::f32, op, name);
  check_shape(t, inp.shape, op, name);
  check_present(t, op, name);
}

// Per-row statistics (mean, rstd): f32 with one value per row, any shape of that size.
void check_stat(const TensorView& t, int64_t rows, const char* op, const char* name) {
  check_dtype(t, DType::f32, op, name);
  MT_CHECK(t.numel() == rows) << op << ": " << name << " is " << t.str() << ", expected [" << rows
                              << "] (one value per row)";
  check_present(t, op, name);
}

void check_vec(const TensorView& t, int64_t h, const char* op, const char* name) {
  check_dtype(t, DType::f32, op, name);
  check_shape(t, {h}, op, name);
  check_present(t, op, name);
}

void check_eps(float eps, const char* op) {
  MT_CHECK(std::isfinite(eps) && eps >= 0.0f) << op << ": eps " << eps << " must be finite and >= 0";
}

}  // namespace

void layernorm_fwd(const TensorView& out, const TensorView& mean, const TensorView& rstd, const TensorView& inp,
                   const TensorView& weight, const TensorView& bias, float eps, float weight_offset) {
  const char* op = "layernorm_fwd";
  const int64_t rows = check_rows(inp, op), h = inp.dim(-1);
  check_like(out, inp, op, "out");
  check_stat(mean, rows, op, "mean");
  check_stat(rstd, rows, op, "rstd");
  check_vec(weight, h, op, "weight");
  if (!bias.empty()) check_vec(bias, h, op, "bias");
  check_eps(eps, op);
  check_same_device({out, mean, rstd, inp, weight, bias}, op);
  MT_ROUTE(inp.device, op, layernorm_fwd(out, mean, rstd, inp, weight, bias, eps, weight_offset));
}

void layernorm_bwd(const TensorView& dinp, const TensorView& dweight, const TensorView& dbias,
                   const TensorView& dout, const TensorView& inp, const TensorView& weight, const TensorView& mean,
                   const TensorView& rstd, float weight_offset) {
  const char* op = "layernorm_bwd";
  const int64_t rows = check_rows(inp, op), h = inp.dim(-1);
  check_like(dinp, inp, op, "dinp");
  check_like(dout, inp, op, "dout");
  check_vec(weight, h, op, "weight");
  check_vec(dweight, h, op, "dweight");
  if (!dbias.empty()) check_vec(dbias, h, op, "dbias");
  check_stat(mean, rows, op, "mean");
  check_stat(rstd, rows, op, "rstd");
  check_same_device({dinp, dweight, dbias, dout, inp, weight, mean, rstd}, op);
  MT_ROUTE(inp.device, op, layernorm_bwd(dinp, dweight, dbias, dout, inp, weight, mean, rstd, weight_offset));
}

void rmsnorm_fwd(const TensorView& out, const TensorView& rstd, const TensorView& inp, const TensorView& weight,
                 float eps, float weight_offset) {
  const char* op = "rmsnorm_fwd";
  const int64_t rows = check_rows(inp, op), h = inp.dim(-1);
  check_like(out, inp, op, "out");
  check_stat(rstd, rows, op, "rstd");
  check_vec(weight, h, op, "weight");
  check_eps(eps, op);
  check_same_device({out, rstd, inp, weight}, op);
  MT_ROUTE(inp.device, op, rmsnorm_fwd(out, rstd, inp, weight, eps, weight_offset));
}

void rmsnorm_bwd(const TensorView& dinp, const TensorView& dweight, const TensorView& dout, const TensorView& inp,
                 const TensorView& weight, const TensorView& rstd, float weight_offset) {
  const char* op = "rmsnorm_bwd";
  const int64_t rows = check_rows(inp, op), h = inp.dim(-1);
  check_like(dinp, inp, op, "dinp");
  check_like(dout, inp, op, "dout");
  check_vec(weight, h, op, "weight");
  check_vec(dweight, h, op, "dweight");
  check_stat(rstd, rows, op, "rstd");
  check_same_device({dinp, dweight, dout, inp, weight, rstd}, op);
  MT_ROUTE(inp.device, op, rmsnorm_bwd(dinp, dweight, dout, inp, weight, rstd, weight_offset));
}

}  // namespace mt
