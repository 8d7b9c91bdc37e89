// Validates shapes once for every backend, then routes to the backend owning the memory.
#include "ops/linear.h"
#include "ops/dispatch.h"

#include "backend/cpu/linear.h"

namespace mt {

void linear_fwd(const TensorView& out, const TensorView& inp, const TensorView& weight, const TensorView& bias) {
  const char* op = "linear_fwd";
  MT_CHECK(inp.ndim() == 2 && weight.ndim() == 2) << op << ": inp " << inp.str() << " and weight " << weight.str()
                                                  << " must be 2-D";
  const int64_t n = inp.dim(0), in = inp.dim(1), o = weight.dim(0);
  check_shape(weight, {o, in}, op, "weight");
  check_shape(out, {n, o}, op, "out");
  if (!bias.empty()) check_shape(bias, {o}, op, "bias");
  for (const TensorView* t : {&out, &inp, &weight, &bias})
    if (!t->empty()) check_dtype(*t, DType::f32, op, "tensor");
  check_same_device({out, inp, weight, bias}, op);
  MT_ROUTE(out.device, op, linear_fwd(out, inp, weight, bias));
}

void linear_bwd(const TensorView& dinp, const TensorView& dweight, const TensorView& dbias, const TensorView& dout,
                const TensorView& inp, const TensorView& weight) {
  const char* op = "linear_bwd";
  MT_CHECK(inp.ndim() == 2 && weight.ndim() == 2) << op << ": inp and weight must be 2-D";
  const int64_t n = inp.dim(0), in = inp.dim(1), o = weight.dim(0);
  check_shape(dout, {n, o}, op, "dout");
  check_shape(dweight, {o, in}, op, "dweight");
  if (!dinp.empty()) check_shape(dinp, {n, in}, op, "dinp");
  if (!dbias.empty()) check_shape(dbias, {o}, op, "dbias");
  for (const TensorView* t : {&dinp, &dweight, &dbias, &dout, &inp, &weight})
    if (!t->empty()) check_dtype(*t, DType::f32, op, "tensor");
  check_same_device({dinp, dweight, dbias, dout, inp, weight}, op);
  MT_ROUTE(dout.device, op, linear_bwd(dinp, dweight, dbias, dout, inp, weight));
}

}  // namespace mt
