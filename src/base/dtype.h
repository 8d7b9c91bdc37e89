// Owns the element types and the exact fp32 <-> bf16 / fp16 conversions (round to nearest even),
// so that 16-bit storage rounds exactly as the hardware formats do.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace mt {

// f64 exists for host-side reductions (norms, counts) that must not lose precision across ranks.
enum class DType : uint8_t { f32, bf16, f16, i32, u8, f64 };

size_t dtype_size(DType dtype);
std::string_view dtype_name(DType dtype);

inline uint32_t f32_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}
inline float f32_from_bits(uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

// bf16 is the top half of an fp32; round to nearest even, NaN stays a (quiet) NaN.
inline uint16_t f32_to_bf16(float x) {
  uint32_t u = f32_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
inline float bf16_to_f32(uint16_t h) { return f32_from_bits(static_cast<uint32_t>(h) << 16); }

uint16_t f32_to_f16(float x);
float f16_to_f32(uint16_t h);

}  // namespace mt
