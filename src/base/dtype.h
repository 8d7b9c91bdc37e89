// Owns the element types and the exact fp32 <-> bf16 / fp16 conversions (round to nearest even),
// so that 16-bit storage rounds exactly as the hardware formats do. The conversions are host/device
// arithmetic (base/hd.h): both backends round through the same code.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "base/hd.h"

namespace mt {

// f64 exists for host-side reductions (norms, counts) that must not lose precision across ranks.
enum class DType : uint8_t { f32, bf16, f16, i32, u8, f64 };

size_t dtype_size(DType dtype);
std::string_view dtype_name(DType dtype);

MT_HD inline uint32_t f32_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}
MT_HD inline float f32_from_bits(uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

// bf16 is the top half of an fp32; round to nearest even, NaN stays a (quiet) NaN.
MT_HD inline uint16_t f32_to_bf16(float x) {
  uint32_t u = f32_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
MT_HD inline float bf16_to_f32(uint16_t h) { return f32_from_bits(static_cast<uint32_t>(h) << 16); }

// IEEE binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits. Round to nearest even,
// overflow to inf, gradual underflow to subnormals.
MT_HD inline uint16_t f32_to_f16(float x) {
  const uint32_t u = f32_bits(x);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;  // NaN
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // rounds to >= 65520: inf
  if (abs < 0x38800000u) {                        // below the smallest normal 2^-14: subnormal
    const float magnitude = f32_from_bits(abs);
    // Adding 0.5 (2^-1) aligns the subnormal f16 ulp (2^-24) with fp32's ulp at 0.5, so the FPU's
    // own round-to-nearest-even does the rounding.
    const uint32_t r = f32_bits(magnitude + 0.5f) - f32_bits(0.5f);
    return sign | static_cast<uint16_t>(r);
  }
  uint32_t mant_odd = (abs >> 13) & 1u;
  uint32_t v = abs + 0xfffu + mant_odd;  // round to nearest even at bit 13
  v -= (127u - 15u) << 23;                // rebias exponent
  return sign | static_cast<uint16_t>(v >> 13);
}

MT_HD inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return f32_from_bits(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {
    const float magnitude = static_cast<float>(mant) * (1.0f / 16777216.0f);  // mant * 2^-24
    return sign ? -magnitude : magnitude;
  }
  return f32_from_bits(sign | ((exp + 127u - 15u) << 23) | (mant << 13));
}


}  // namespace mt
