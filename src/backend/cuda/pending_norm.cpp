// Placeholders for the norm ops until their CUDA kernels land (issue 25): each
// names itself, so a CUDA run stops with a clear message instead of a wrong result.
#include "backend/cuda/ops.h"

namespace mt::cuda {

void layernorm_fwd(const TensorView& out, const TensorView& mean, const TensorView& rstd, const TensorView& inp,
                   const TensorView& weight, const TensorView& bias, float eps) {
  MT_FAIL() << "layernorm_fwd: no CUDA kernel yet (issue 25); run with --device cpu";
}

void layernorm_bwd(const TensorView& dinp, const TensorView& dweight, const TensorView& dbias,
                   const TensorView& dout, const TensorView& inp, const TensorView& weight, const TensorView& mean,
                   const TensorView& rstd) {
  MT_FAIL() << "layernorm_bwd: no CUDA kernel yet (issue 25); run with --device cpu";
}

void rmsnorm_fwd(const TensorView& out, const TensorView& rstd, const TensorView& inp, const TensorView& weight,
                 float eps) {
  MT_FAIL() << "rmsnorm_fwd: no CUDA kernel yet (issue 25); run with --device cpu";
}

void rmsnorm_bwd(const TensorView& dinp, const TensorView& dweight, const TensorView& dout, const TensorView& inp,
                 const TensorView& weight, const TensorView& rstd) {
  MT_FAIL() << "rmsnorm_bwd: no CUDA kernel yet (issue 25); run with --device cpu";
}

}  // namespace mt::cuda
