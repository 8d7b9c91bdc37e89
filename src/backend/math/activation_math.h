// Owns the per-element arithmetic of GeLU (erf and tanh forms), squared ReLU and SwiGLU, with their gradients,
// as host/device functions (base/hd.h) that the CPU kernels (backend/cpu/activation.cpp) and the
// CUDA kernels (backend/cuda/kernels/activation.cu) both call.
#pragma once

#include <cmath>

#include "backend/activation_args.h"
#include "backend/math/exp_math.h"
#include "base/hd.h"

namespace mt {

namespace act {
constexpr float kSqrt1_2 = 0.70710678118654752f;      // 1/√2
constexpr float kInvSqrt2Pi = 0.39894228040143268f;   // 1/√(2π)
constexpr float kSqrt2OverPi = 0.79788456080286536f;  // √(2/π)
constexpr float kGeluCubic = 0.044715f;
}  // namespace act

// Φ(x) = ½·erfc(−x/√2) through the Numerical Recipes erfc fit (fractional error < 1.2e−7 for all
// arguments).  Working from erfc keeps the left tail relatively accurate, where ½(1 + erf) cancels.
MT_HD inline float normal_cdf(float x) {
  const float z = fabsf(x) * act::kSqrt1_2;
  const float t = 1.0f / fmaf(0.5f, z, 1.0f);
  float p = 0.17087277f;
  p = fmaf(p, t, -0.82215223f);
  p = fmaf(p, t, 1.48851587f);
  p = fmaf(p, t, -1.13520398f);
  p = fmaf(p, t, 0.27886807f);
  p = fmaf(p, t, -0.18628806f);
  p = fmaf(p, t, 0.09678418f);
  p = fmaf(p, t, 0.37409196f);
  p = fmaf(p, t, 1.00002368f);
  p = fmaf(p, t, -1.26551223f);
  const float half_erfc = 0.5f * t * exp_f32(p - z * z);  // ½·erfc(|x|/√2) = Φ(−|x|)
  return x >= 0.0f ? 1.0f - half_erfc : half_erfc;
}

MT_HD inline float gelu_erf(float x) { return x * normal_cdf(x); }
// d/dx x·Φ(x) = Φ(x) + x·φ(x)
MT_HD inline float gelu_erf_grad(float x) {
  return normal_cdf(x) + x * act::kInvSqrt2Pi * exp_f32(-0.5f * x * x);
}

// ½x(1 + tanh(u)) = x·σ(2u): the sigmoid form needs one exp and saturates without inf/inf.
MT_HD inline float gelu_tanh(float x) {
  const float u = act::kSqrt2OverPi * (x + act::kGeluCubic * x * x * x);
  return x * sigmoid_f32(2.0f * u);
}
// d/dx x·σ(2u) = σ + x·2σ(1 − σ)·u',  u' = √(2/π)(1 + 3·0.044715·x²).  σ(1 − σ) is taken as
// e/(1 + e)² with e = exp(−|2u|) ≤ 1: 1 − σ computed directly would cancel in the right tail
// (x ≈ 5 gives 1 − σ ≈ 5e-8, below f32's resolution at 1).
MT_HD inline float gelu_tanh_grad(float x) {
  const float z = 2.0f * act::kSqrt2OverPi * (x + act::kGeluCubic * x * x * x);
  const float e = exp_f32(-fabsf(z)), inv = 1.0f / (1.0f + e);
  const float s = z >= 0.0f ? inv : e * inv;
  const float du = act::kSqrt2OverPi * (1.0f + 3.0f * act::kGeluCubic * x * x);
  return s + x * 2.0f * (e * inv * inv) * du;
}

// max(x, 0)² and its gradient 2·max(x, 0) (Megatron's squared_relu: pow(relu(x), 2)).
MT_HD inline float squared_relu(float x) {
  const float r = fmaxf(x, 0.0f);
  return r * r;
}
MT_HD inline float squared_relu_grad(float x) { return 2.0f * fmaxf(x, 0.0f); }

// One pointwise activation and its derivative, chosen at compile time so each kernel's loop
// holds a single form (and vectorises).
template <PointwiseActivation A>
MT_HD inline float pointwise_value(float x) {
  if constexpr (A == PointwiseActivation::gelu) return gelu_erf(x);
  else if constexpr (A == PointwiseActivation::gelu_tanh) return gelu_tanh(x);
  else return squared_relu(x);
}
template <PointwiseActivation A>
MT_HD inline float pointwise_grad(float x) {
  if constexpr (A == PointwiseActivation::gelu) return gelu_erf_grad(x);
  else if constexpr (A == PointwiseActivation::gelu_tanh) return gelu_tanh_grad(x);
  else return squared_relu_grad(x);
}

// SwiGLU on one (gate, up) pair: silu(g)·u, silu(g) = g·σ(g).
MT_HD inline float swiglu(float g, float u) { return g * sigmoid_f32(g) * u; }

// The SwiGLU gradient terms for one pair: dgate = dy·u·silu'(g), dup = dy·g·σ(g), where
// silu'(g) = σ + g·σ(1 − σ) with σ(1 − σ) = e/(1 + e)², e = exp(−|g|) (no cancellation in 1 − σ,
// as in gelu_tanh_grad).
struct SwigluGrad {
  float dgate, dup;
};
MT_HD inline SwigluGrad swiglu_grad(float g, float u, float dy) {
  const float e = exp_f32(-fabsf(g)), inv = 1.0f / (1.0f + e);
  const float s = g >= 0.0f ? inv : e * inv;
  return {dy * u * (s + g * (e * inv * inv)), dy * g * s};
}

}  // namespace mt
