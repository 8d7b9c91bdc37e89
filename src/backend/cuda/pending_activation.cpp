// Placeholders for the activation ops until their CUDA kernels land (issue 25): each
// names itself, so a CUDA run stops with a clear message instead of a wrong result.
#include "backend/cuda/ops.h"

namespace mt::cuda {

void gelu_fwd(const TensorView& out, const TensorView& inp, GeluForm form) {
  MT_FAIL() << "gelu_fwd: no CUDA kernel yet (issue 25); run with --device cpu";
}

void gelu_bwd(const TensorView& dinp, const TensorView& dout, const TensorView& inp, GeluForm form) {
  MT_FAIL() << "gelu_bwd: no CUDA kernel yet (issue 25); run with --device cpu";
}

void swiglu_fwd(const TensorView& out, const TensorView& inp) {
  MT_FAIL() << "swiglu_fwd: no CUDA kernel yet (issue 25); run with --device cpu";
}

void swiglu_bwd(const TensorView& dinp, const TensorView& dout, const TensorView& inp) {
  MT_FAIL() << "swiglu_bwd: no CUDA kernel yet (issue 25); run with --device cpu";
}

}  // namespace mt::cuda
