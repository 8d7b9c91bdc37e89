// Owns the AdamW arithmetic both backends run (DESIGN: "CUDA without a GPU"): the per-step constants
// of one tensor's update, computed once on the host, and the per-element update in MT_HD pieces that
// the CPU kernel (backend/cpu/adamw.cpp) and the CUDA kernel (backend/cuda/kernels/adamw.cu) call
// alike. The update is split where the CPU kernel splits its loops (the square root gets its own
// loop there so the rest vectorises), so the CPU keeps its code and its bits.
#pragma once

#include <cmath>
#include <cstdint>

#include "base/hd.h"

namespace mt {

// The per-step constants of one tensor's update.
struct AdamWConsts {
  float b1, b2, eps, unscale, clip, step_size, inv_sqrt_bc2, decay;
};

// Host only (double pow). Bias corrections in double (β^t for large t), folded into per-step
// constants as torch does:  param −= (lr / bc1) · m / (√v / √bc2 + eps).
inline AdamWConsts adamw_consts(float lr, float beta1, float beta2, float eps, int64_t step, float grad_unscale,
                                float grad_clip, float weight_decay) {
  AdamWConsts k;
  k.b1 = beta1;
  k.b2 = beta2;
  k.eps = eps;
  k.unscale = grad_unscale;
  k.clip = grad_clip;
  const double t = static_cast<double>(step);
  const double bc1 = 1.0 - std::pow(static_cast<double>(beta1), t);
  const double bc2 = 1.0 - std::pow(static_cast<double>(beta2), t);
  k.step_size = static_cast<float>(lr / bc1);
  k.inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  k.decay = static_cast<float>(1.0 - static_cast<double>(lr) * weight_decay);
  return k;
}

// g = fl(fl(grad · unscale) · clip): two roundings, as the separate unscale and clip passes did
// (×1 is exact), then the moments m = β1·m + (1 − β1)·g, v = β2·v + (1 − β2)·g².
MT_HD inline void adamw_moments(float grad, float& m, float& v, float b1, float b2, float unscale, float clip) {
  const float gu = grad * unscale;
  const float gi = gu * clip;
  m = b1 * m + (1.0f - b1) * gi;
  v = b2 * v + (1.0f - b2) * gi * gi;
}

// The decayed, updated parameter from the new m and sqrt_v = √v.
MT_HD inline float adamw_param(float param, float m, float sqrt_v, float decay, float step_size, float inv_sqrt_bc2,
                               float eps) {
  return param * decay - step_size * m / (sqrt_v * inv_sqrt_bc2 + eps);
}

}  // namespace mt
