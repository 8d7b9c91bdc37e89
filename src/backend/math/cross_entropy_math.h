// Owns the per-element and per-row arithmetic of the fused softmax cross entropy (host/device,
// base/hd.h), shared by the CPU kernels (backend/cpu/cross_entropy.cpp) and the CUDA kernels
// (backend/cuda/kernels/cross_entropy.cu); each backend sums a row's exps in its own fixed order.
#pragma once

#include <cmath>

#include "backend/math/exp_math.h"
#include "base/hd.h"

namespace mt {

// A row's running maximum, as a ternary: a NaN logit is skipped here but still poisons the sum.
MT_HD inline float ce_max(float x, float mx) { return x > mx ? x : mx; }

// One element's exp(x − max), summed over the row.
MT_HD inline float ce_exp(float x, float mx) { return exp_f32(x - mx); }

// lse = max + log Σ exp(x − max), in double; the loss lse − logits[label], rounded once to f32.
MT_HD inline double ce_lse(float mx, double sum_exp) { return static_cast<double>(mx) + log(sum_exp); }
MT_HD inline float ce_loss(double lse, float target) { return static_cast<float>(lse - static_cast<double>(target)); }

// dlogits = dloss · exp(x − lse) (− dloss at the label, subtracted from this rounded product).
MT_HD inline float ce_grad(float dloss, float x, float lse) {
  const float e = exp_f32(x - lse);
#if defined(__CUDA_ARCH__)
  return __fmul_rn(dloss, e);  // never fused with the label's subtraction, as on the CPU
#else
  return dloss * e;
#endif
}

}  // namespace mt
