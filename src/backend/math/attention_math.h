// Owns the per-element arithmetic of the attention kernels that the CPU backend and the CUDA
// backend both run (DESIGN "CUDA without a GPU"): the RoPE rotation of one pair, the softmax
// exponential, the online-softmax rescale and log-sum-exp, the dropout index and keep decision,
// and the softmax backward of one element. Each function is written exactly as the CPU kernels
// wrote it before it moved here, so CPU results are unchanged; nvcc may contract a product and a
// sum into an FMA where GCC did not (or the reverse), so CUDA results agree to rounding, not bits.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "base/hd.h"
#include "base/philox.h"

namespace mt {

// ---- RoPE (Megatron's rotate-half and interleaved forms) -----------------------------------------

// The elements (a, b) of a head row that rotated pair c < half turns, where the first 2·half
// elements are rotated: (c, c + half) in the rotate-half form, (2c, 2c + 1) interleaved
// (backend/attention_args.h's RopeForm).
MT_HD inline void rope_pair(int64_t c, int64_t half, bool interleaved, int64_t& a, int64_t& b) {
  a = interleaved ? 2 * c : c;
  b = interleaved ? 2 * c + 1 : c + half;
}

// (x, y) = elements rope_pair(c) of a head row; (cs, sn) = cos/sin[p, c].
MT_HD inline void rope_rotate(float x, float y, float cs, float sn, float& x_out, float& y_out) {
  x_out = x * cs - y * sn;
  y_out = y * cs + x * sn;
}
// The rotation's backward (the rotation by −angle), added into (dx, dy).
MT_HD inline void rope_rotate_back_add(float gx, float gy, float cs, float sn, float& dx, float& dy) {
  dx += gx * cs + gy * sn;
  dy += gy * cs - gx * sn;
}

// ---- softmax ---------------------------------------------------------------------------------

MT_HD inline float attention_float_bits(int32_t i) {
#if defined(__CUDA_ARCH__)
  return __int_as_float(i);
#else
  float f;
  std::memcpy(&f, &i, sizeof f);
  return f;
#endif
}

// exp for the softmax: Cephes-style range reduction and degree-6 polynomial (relative error
// ~2e-7), written without calls so that CPU loops around it vectorise. Inputs below −87 give
// ~1e-38 instead of 0 (masked entries are zeroed explicitly, never passed through here).
MT_HD inline float attention_exp(float x) {
  x = x < -87.0f ? -87.0f : x;  // callers pass x <= ~0 (a score minus its row max or lse)
  // n = round(x·log2 e). Adding and removing 1.5·2^23 rounds without a floor() call, which GCC
  // would not vectorise here; -ffast-math would fold that away, so it gets nearbyint instead.
#if defined(__FAST_MATH__) && !defined(__CUDA_ARCH__)
  const float n = std::nearbyint(x * 1.44269504088896341f);
#else
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
#endif
  const int32_t ni = static_cast<int32_t>(n);
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  return p * attention_float_bits((ni + 127) << 23);
}

// Online softmax: what the accumulated output and normaliser are multiplied by when the running
// maximum moves from m_old to m_new (0 when m_old = −inf, the first live block).
MT_HD inline float online_softmax_rescale(float m_old, float m_new) { return expf(m_old - m_new); }

// Log-sum-exp of a row from its running maximum and normaliser.
MT_HD inline float online_softmax_lse(float m, float l) { return m + logf(l); }

// Merging two attentions of one query over disjoint key sets (context parallelism's ring): with
// log-sum-exps a and b, the merged one is c = log(e^a + e^b) and the outputs combine with weights
// wa = e^(a − c), wb = e^(b − c). A side that saw no key has −inf and weight 0; both −inf give c = −inf.
MT_HD inline void lse_merge(float a, float b, float& c, float& wa, float& wb) {
  const float hi = a > b ? a : b, lo = a > b ? b : a;
  if (hi == -INFINITY) {
    c = -INFINITY;
    wa = wb = 0.0f;
    return;
  }
  c = hi + log1pf(expf(lo - hi));
  wa = expf(a - c);
  wb = expf(b - c);
}

// Softmax backward of one element: dS = P·(dP − D), with dP already multiplied by the dropout
// multiplier and D the row's Σ_t P·dP (= dout·out on the lean path).
MT_HD inline float softmax_grad(float p, float dp, float d_row) { return p * (dp - d_row); }

// ---- dropout on the probabilities --------------------------------------------------------------

// Philox element index of (batch j, local head h, query i, key t), as attention_args.h states.
MT_HD inline uint64_t attention_dropout_index(int64_t j, int64_t h, int64_t i, int64_t t, int64_t total_heads,
                                              int64_t head_offset, int64_t s) {
  return static_cast<uint64_t>(((j * total_heads + head_offset + h) * s + i) * s) + static_cast<uint64_t>(t);
}

// Whether the element with Philox index `index` is kept (threshold = dropout_threshold(p)). The CPU
// draws the same bits 64 elements at a time (backend/cpu/philox_simd.h); this is one element.
MT_HD inline bool attention_dropout_keep(uint64_t seed, uint64_t stream, uint64_t index, uint32_t threshold) {
  return philox_bits24(seed, stream, index) >= threshold;
}

}  // namespace mt
