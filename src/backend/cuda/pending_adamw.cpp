// Placeholders for the adamw ops until their CUDA kernels land (issue 25): each
// names itself, so a CUDA run stops with a clear message instead of a wrong result.
#include "backend/cuda/ops.h"

namespace mt::cuda {

void adamw_update(const TensorView& param, const TensorView& grad, const TensorView& m, const TensorView& v,
                  const AdamWParams& params, const TensorView& model_copy) {
  MT_FAIL() << "adamw_update: no CUDA kernel yet (issue 25); run with --device cpu";
}

void adamw_update_multi(std::span<const AdamWTensor> tensors, const AdamWParams& params) {
  MT_FAIL() << "adamw_update_multi: no CUDA kernel yet (issue 25); run with --device cpu";
}

double unscaled_sum_squares(const TensorView& grad, float unscale) {
  MT_FAIL() << "unscaled_sum_squares: no CUDA kernel yet (issue 25); run with --device cpu";
}

void unscaled_sum_squares_multi(std::span<const TensorView> grads, float unscale, std::span<double> scratch,
                                std::span<double> sums) {
  MT_FAIL() << "unscaled_sum_squares_multi: no CUDA kernel yet (issue 25); run with --device cpu";
}

// The host scratch of unscaled_sum_squares_multi (CUDA reduces on the device instead).
int64_t sum_squares_chunks(int64_t n) {
  MT_FAIL() << "sum_squares_chunks: no CUDA kernel yet (issue 25); run with --device cpu";
}

}  // namespace mt::cuda
