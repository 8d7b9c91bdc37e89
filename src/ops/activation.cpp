// Validates the activation ops once for every backend, then routes to the backend owning the memory.
// Tensors may carry any leading dims; the activation acts on the last one.
#include "ops/activation.h"
#include "ops/dispatch.h"

#include "backend/cpu/activation.h"

namespace mt {

namespace {

void check_f32(const TensorView& t, const char* op, const char* name) {
  check_dtype(t, DType::f32, op, name);
  MT_CHECK(!t.empty() || t.numel() == 0) << op << ": " << name << " " << t.str() << " has no data";
}

// [..., 2f] for out [..., f]: same leading dims, last dim doubled.
Shape doubled_last(const TensorView& t) {
  Shape s = t.shape;
  s.dims[s.ndim - 1] *= 2;
  return s;
}

void check_kind(PointwiseActivation act, const char* op) {
  MT_CHECK(act == PointwiseActivation::gelu || act == PointwiseActivation::gelu_tanh ||
           act == PointwiseActivation::squared_relu)
      << op << ": unknown PointwiseActivation " << static_cast<int>(act);
}

}  // namespace

void pointwise_activation_fwd(const TensorView& out, const TensorView& inp, PointwiseActivation act) {
  const char* op = "pointwise_activation_fwd";
  check_f32(inp, op, "inp");
  check_f32(out, op, "out");
  check_shape(out, inp.shape, op, "out");
  check_kind(act, op);
  check_same_device({out, inp}, op);
  MT_ROUTE(inp.device, op, pointwise_activation_fwd(out, inp, act));
}

void pointwise_activation_bwd(const TensorView& dinp, const TensorView& dout, const TensorView& inp, PointwiseActivation act) {
  const char* op = "pointwise_activation_bwd";
  check_f32(inp, op, "inp");
  check_f32(dout, op, "dout");
  check_f32(dinp, op, "dinp");
  check_shape(dout, inp.shape, op, "dout");
  check_shape(dinp, inp.shape, op, "dinp");
  check_kind(act, op);
  check_same_device({dinp, dout, inp}, op);
  MT_ROUTE(inp.device, op, pointwise_activation_bwd(dinp, dout, inp, act));
}

void swiglu_fwd(const TensorView& out, const TensorView& inp) {
  const char* op = "swiglu_fwd";
  check_f32(inp, op, "inp");
  check_f32(out, op, "out");
  MT_CHECK(out.ndim() >= 1) << op << ": out is " << out.str() << "; expected [N, f]";
  check_shape(inp, doubled_last(out), op, "inp ([gate | up], twice out's last dim)");
  check_same_device({out, inp}, op);
  MT_ROUTE(inp.device, op, swiglu_fwd(out, inp));
}

void swiglu_bwd(const TensorView& dinp, const TensorView& dout, const TensorView& inp) {
  const char* op = "swiglu_bwd";
  check_f32(inp, op, "inp");
  check_f32(dout, op, "dout");
  check_f32(dinp, op, "dinp");
  MT_CHECK(dout.ndim() >= 1) << op << ": dout is " << dout.str() << "; expected [N, f]";
  check_shape(inp, doubled_last(dout), op, "inp ([gate | up], twice dout's last dim)");
  check_shape(dinp, inp.shape, op, "dinp");
  check_same_device({dinp, dout, inp}, op);
  MT_ROUTE(inp.device, op, swiglu_bwd(dinp, dout, inp));
}

}  // namespace mt
