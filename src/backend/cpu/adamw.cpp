// CPU kernel for the AdamW step: one fused pass over param, grad, m and v, block by block.
#include "backend/cpu/adamw.h"

#include <algorithm>
#include <cmath>

namespace mt::cpu {

void adamw_update(const TensorView& param, const TensorView& grad, const TensorView& m, const TensorView& v,
                  const AdamWParams& params) {
  const int64_t n = param.numel();
  float* p = param.f32();
  const float* g = grad.f32();
  float* m1 = m.f32();
  float* m2 = v.f32();
  const float b1 = params.beta1, b2 = params.beta2, eps = params.eps;
  // Bias corrections in double (β^t for large t), folded into per-step constants as torch does:
  //   param −= (lr / bc1) · m / (√v / √bc2 + eps)
  const double t = static_cast<double>(params.step);
  const double bc1 = 1.0 - std::pow(static_cast<double>(b1), t);
  const double bc2 = 1.0 - std::pow(static_cast<double>(b2), t);
  const float step_size = static_cast<float>(params.lr / bc1);
  const float inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  const float decay = static_cast<float>(1.0 - static_cast<double>(params.lr) * params.weight_decay);
  // Blocks of kBlock elements: std::sqrt may set errno, which keeps GCC (without -fno-math-errno)
  // from vectorising any loop that calls it, so the square roots get a short loop of their own and
  // the arithmetic around them stays vectorised.
  constexpr int64_t kBlock = 256;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t i0 = blk * kBlock, len = std::min(kBlock, n - i0);
    float* pb = p + i0;
    const float* gb = g + i0;
    float* mb = m1 + i0;
    float* vb = m2 + i0;
    float denom[kBlock];
#pragma omp simd
    for (int64_t i = 0; i < len; ++i) {
      mb[i] = b1 * mb[i] + (1.0f - b1) * gb[i];
      vb[i] = b2 * vb[i] + (1.0f - b2) * gb[i] * gb[i];
    }
    for (int64_t i = 0; i < len; ++i) denom[i] = std::sqrt(vb[i]);
#pragma omp simd
    for (int64_t i = 0; i < len; ++i) pb[i] = pb[i] * decay - step_size * mb[i] / (denom[i] * inv_sqrt_bc2 + eps);
  }
}

}  // namespace mt::cpu
