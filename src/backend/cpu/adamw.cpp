// CPU kernels for the optimizer step: the AdamW update as one fused pass over param, grad, m, v
// (and the 16-bit model copy), block by block; the sum of squares of the unscaled gradient.
#include "backend/cpu/adamw.h"

#include <algorithm>
#include <cmath>

namespace mt::cpu {

void adamw_update(const TensorView& param, const TensorView& grad, const TensorView& m, const TensorView& v,
                  const AdamWParams& params, const TensorView& model_copy) {
  const int64_t n = param.numel();
  float* p = param.f32();
  const float* g = grad.f32();
  float* m1 = m.f32();
  float* m2 = v.f32();
  const float b1 = params.beta1, b2 = params.beta2, eps = params.eps;
  const float unscale = params.grad_unscale, clip = params.grad_clip;
  // Bias corrections in double (β^t for large t), folded into per-step constants as torch does:
  //   param −= (lr / bc1) · m / (√v / √bc2 + eps)
  const double t = static_cast<double>(params.step);
  const double bc1 = 1.0 - std::pow(static_cast<double>(b1), t);
  const double bc2 = 1.0 - std::pow(static_cast<double>(b2), t);
  const float step_size = static_cast<float>(params.lr / bc1);
  const float inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  const float decay = static_cast<float>(1.0 - static_cast<double>(params.lr) * params.weight_decay);
  uint16_t* copy16 = model_copy.data != nullptr ? static_cast<uint16_t*>(model_copy.data) : nullptr;
  const bool copy_bf16 = copy16 != nullptr && model_copy.dtype == DType::bf16;
  // Blocks of kBlock elements: std::sqrt may set errno, which keeps GCC (without -fno-math-errno)
  // from vectorising any loop that calls it, so the square roots get a short loop of their own and
  // the arithmetic around them stays vectorised. The 16-bit copy of a block is written while the
  // block is still in L1.
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
      // Two roundings, as the separate unscale and clip passes did (×1 is exact).
      const float gu = gb[i] * unscale;
      const float gi = gu * clip;
      mb[i] = b1 * mb[i] + (1.0f - b1) * gi;
      vb[i] = b2 * vb[i] + (1.0f - b2) * gi * gi;
    }
    for (int64_t i = 0; i < len; ++i) denom[i] = std::sqrt(vb[i]);
#pragma omp simd
    for (int64_t i = 0; i < len; ++i) pb[i] = pb[i] * decay - step_size * mb[i] / (denom[i] * inv_sqrt_bc2 + eps);
    if (copy_bf16) {
      uint16_t* cb = copy16 + i0;
#pragma omp simd
      for (int64_t i = 0; i < len; ++i) cb[i] = f32_to_bf16(pb[i]);
    } else if (copy16 != nullptr) {
      uint16_t* cb = copy16 + i0;
      for (int64_t i = 0; i < len; ++i) cb[i] = f32_to_f16(pb[i]);
    }
  }
}

// The partition and the per-chunk simd reduction are those of cpu::sum_squares (elementwise.cpp),
// so with the unscaled values rounded to f32 first the result is the same bits.
double unscaled_sum_squares(const TensorView& grad, float unscale) {
  constexpr int64_t kMaxChunks = 1024, kMinChunk = 16384;
  const int64_t n = grad.numel();
  if (n == 0) return 0.0;
  const int64_t chunks = std::min(kMaxChunks, (n + kMinChunk - 1) / kMinChunk);
  const int64_t chunk = (n + chunks - 1) / chunks;
  const float* x = grad.f32();
  double partial[kMaxChunks];
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * chunk, end = std::min(n, (c + 1) * chunk);
    double acc = 0.0;
#pragma omp simd reduction(+ : acc)
    for (int64_t i = begin; i < end; ++i) {
      const float u = x[i] * unscale;
      acc += static_cast<double>(u) * u;
    }
    partial[c] = acc;
  }
  double total = 0.0;
  for (int64_t c = 0; c < chunks; ++c) total += partial[c];
  return total;
}

}  // namespace mt::cpu
