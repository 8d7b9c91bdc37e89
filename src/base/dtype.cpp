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

}  // namespace mt
