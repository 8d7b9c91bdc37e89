// Owns the per-element and per-row arithmetic of LayerNorm and RMSNorm (host/device, base/hd.h):
// the CPU kernels (backend/cpu/norm.cpp) and the CUDA kernels (backend/cuda/kernels/norm.cu) call
// these on each element, each reducing a row's sums in its own fixed order.
#pragma once

#include <cmath>

#include "base/hd.h"

namespace mt {

// rstd = 1/√(Σ/h + eps) from a row's sum of squares (of deviations, for LayerNorm).
MT_HD inline float norm_rstd(float sum_sq, float inv_h, float eps) { return 1.0f / sqrtf(sum_sq * inv_h + eps); }

// x̂ = (x − mean)·rstd; mean is 0 for RMSNorm's parameter gradient.
MT_HD inline float norm_xhat(float x, float mean, float rstd) { return (x - mean) * rstd; }

// LayerNorm's output without and with bias.
MT_HD inline float layernorm_out(float x, float mean, float rstd, float w) { return (x - mean) * rstd * w; }
MT_HD inline float layernorm_out(float x, float mean, float rstd, float w, float b) {
  return (x - mean) * rstd * w + b;
}
MT_HD inline float rmsnorm_out(float x, float rstd, float w) { return x * rstd * w; }

// The backward with g = dout·w: LayerNorm's row sums Σg and Σg·x̂, then
//   dinp = rstd · (g − mean(g) − x̂ · mean(g·x̂));
MT_HD inline float layernorm_dinp(float x, float dy, float w, float mean, float rstd, float mean_g, float mean_gx) {
  const float xhat = (x - mean) * rstd;
  return rstd * (dy * w - mean_g - xhat * mean_gx);
}
// RMSNorm's row sum Σ g·x̂ (x̂ = x·rstd), then dinp = rstd · (g − x̂ · mean(g·x̂)).
MT_HD inline float rmsnorm_gx(float x, float dy, float w, float rstd) { return dy * w * (x * rstd); }
MT_HD inline float rmsnorm_dinp(float x, float dy, float w, float rstd, float mean_gx) {
  return rstd * (dy * w - x * rstd * mean_gx);
}

// A row's term of dweight[c] (= dout·x̂), summed over rows in double.
MT_HD inline double norm_dweight_term(float dy, float x, float mean, float rstd) {
  return static_cast<double>(dy * ((x - mean) * rstd));
}

}  // namespace mt
