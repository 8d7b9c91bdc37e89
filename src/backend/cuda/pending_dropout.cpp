// Placeholders for the dropout ops until their CUDA kernels land (issue 25): each
// names itself, so a CUDA run stops with a clear message instead of a wrong result.
#include "backend/cuda/ops.h"

namespace mt::cuda {

void dropout_fwd(const TensorView& out, const TensorView& mask, const TensorView& inp, float p, const RngStream& rng,
                 uint64_t offset) {
  MT_FAIL() << "dropout_fwd: no CUDA kernel yet (issue 25); run with --device cpu";
}

void dropout_mask(const TensorView& mask, float p, const RngStream& rng, uint64_t offset) {
  MT_FAIL() << "dropout_mask: no CUDA kernel yet (issue 25); run with --device cpu";
}

void dropout_bwd(const TensorView& dinp, const TensorView& dout, const TensorView& mask, float p) {
  MT_FAIL() << "dropout_bwd: no CUDA kernel yet (issue 25); run with --device cpu";
}

void dropout_add_fwd(const TensorView& out, const TensorView& mask, const TensorView& inp,
                     const TensorView& residual, float p, const RngStream& rng, uint64_t offset) {
  MT_FAIL() << "dropout_add_fwd: no CUDA kernel yet (issue 25); run with --device cpu";
}

}  // namespace mt::cuda
