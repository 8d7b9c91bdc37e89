// CUDA entry points of ops/activation.h: views to pointers, then the kernels of activation.cu.
#include "backend/cuda/kernels/activation.h"
#include "backend/cuda/ops.h"
#include "backend/cuda/runtime.h"

namespace mt::cuda {

namespace {
// The last dim f and the rows before it, as the CPU kernel reads them (f = 0: nothing to do).
int64_t rows_of(const TensorView& t, int64_t f) { return f ? t.numel() / f : 0; }
}  // namespace

void pointwise_activation_fwd(const TensorView& out, const TensorView& inp, PointwiseActivation act) {
  if (inp.numel() == 0) return;
  k::pointwise_activation_fwd(out.f32(), inp.f32(), inp.numel(), static_cast<int>(act), stream());
  check_launch("pointwise_activation_fwd");
}

void pointwise_activation_bwd(const TensorView& dinp, const TensorView& dout, const TensorView& inp, PointwiseActivation act) {
  if (inp.numel() == 0) return;
  k::pointwise_activation_bwd(dinp.f32(), dout.f32(), inp.f32(), inp.numel(), static_cast<int>(act), stream());
  check_launch("pointwise_activation_bwd");
}

void swiglu_fwd(const TensorView& out, const TensorView& inp) {
  const int64_t f = out.dim(-1), rows = rows_of(out, f);
  if (rows == 0) return;
  k::swiglu_fwd(out.f32(), inp.f32(), rows, f, stream());
  check_launch("swiglu_fwd");
}

void swiglu_bwd(const TensorView& dinp, const TensorView& dout, const TensorView& inp) {
  const int64_t f = dout.dim(-1), rows = rows_of(dout, f);
  if (rows == 0) return;
  k::swiglu_bwd(dinp.f32(), dout.f32(), inp.f32(), rows, f, stream());
  check_launch("swiglu_bwd");
}

}  // namespace mt::cuda
