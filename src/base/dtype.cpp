#include "base/dtype.h"

#include "base/error.h"

namespace mt {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f32: return 4;
    case DType::bf16: return 2;
    case DType::f16: return 2;
    case DType::i32: return 4;
    case DType::u8: return 1;
    case DType::f64: return 8;
  }
  MT_FAIL() << "unknown dtype";
}

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "f32";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::i32: return "i32";
    case DType::u8: return "u8";
    case DType::f64: return "f64";
  }
  return "?";
}

// IEEE binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits. Round to nearest even,
// overflow to inf, gradual underflow to subnormals.
uint16_t f32_to_f16(float x) {
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

float f16_to_f32(uint16_t h) {
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
