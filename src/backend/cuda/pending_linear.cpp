// Placeholders for the linear ops until their CUDA kernels land (issue 25): each
// names itself, so a CUDA run stops with a clear message instead of a wrong result.
#include "backend/cuda/ops.h"

namespace mt::cuda {

void linear_fwd(const TensorView& out, const TensorView& inp, const TensorView& weight, const TensorView& bias) {
  MT_FAIL() << "linear_fwd: no CUDA kernel yet (issue 25); run with --device cpu";
}

void linear_bwd(const TensorView& dinp, const TensorView& dweight, const TensorView& dbias, const TensorView& dout,
                const TensorView& inp, const TensorView& weight) {
  MT_FAIL() << "linear_bwd: no CUDA kernel yet (issue 25); run with --device cpu";
}

}  // namespace mt::cuda
