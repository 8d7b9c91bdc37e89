// Owns the fast f32 exp and sigmoid that both backends' kernels evaluate (host/device, base/hd.h):
// glibc's expf is a call the compiler cannot vectorise without -ffast-math; this inline version
// vectorises under `#pragma omp simd` on the CPU at ~1 ulp, and the CUDA kernels run the same
// arithmetic, so the CPU op tests cover what the GPU computes.
#pragma once

#include <cmath>
#include <cstdint>

#include "base/dtype.h"  // f32_bits, f32_from_bits
#include "base/hd.h"

namespace mt {

// exp(x) in float, within ~1 ulp for normal results (measured on a sweep of all f32 inputs in
// range); gradual underflow below −87.3, inf above 88.72, NaN stays NaN.  Cody–Waite reduction
// x = k·ln2 + r, |r| ≤ ln2/2, a degree-6 polynomial for e^r, and 2^k applied as two halves so
// k = 128 and subnormal results need no special case.
MT_HD inline float exp_f32(float x) {
  // The clamp is spelled as std::max then std::min would evaluate it, so a NaN passes through
  // (fmaxf/fminf would replace it by the bound).
  x = x < -104.0f ? -104.0f : x;
  x = 89.0f < x ? 89.0f : x;
  // Round to nearest by adding 1.5·2^23: the sum's low mantissa bits then hold k as an integer
  // (vectorises, unlike nearbyint, and needs no float->int conversion).
  const float shifter = 12582912.0f;
  const float t = x * 1.44269504088896341f + shifter;
  const float k = t - shifter;
  float r = fmaf(k, -0.693359375f, x);
  r = fmaf(k, 2.12194440e-4f, r);
  float p = 1.9875691500e-4f;
  p = fmaf(p, r, 1.3981999507e-3f);
  p = fmaf(p, r, 8.3334519073e-3f);
  p = fmaf(p, r, 4.1665795894e-2f);
  p = fmaf(p, r, 1.6666665459e-1f);
  p = fmaf(p, r, 5.0000001201e-1f);
  p = fmaf(p, r * r, r) + 1.0f;
  const int32_t ki = static_cast<int32_t>(f32_bits(t) - 0x4b400000u);
  const int32_t k1 = ki >> 1, k2 = ki - k1;
  const float s1 = f32_from_bits(static_cast<uint32_t>(k1 + 127) << 23);
  const float s2 = f32_from_bits(static_cast<uint32_t>(k2 + 127) << 23);
  return p * s1 * s2;
}

// σ(x) = 1 / (1 + e^−x); saturates cleanly to 0 and 1 (e^−x = inf gives 0).
MT_HD inline float sigmoid_f32(float x) { return 1.0f / (1.0f + exp_f32(-x)); }

}  // namespace mt
