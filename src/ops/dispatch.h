// Shared by the op entry points: the error for a device whose backend this build lacks, and the
// check of a tensor argument.
#pragma once

#include "base/error.h"
#include "tensor/tensor.h"

namespace mt {

[[noreturn]] inline void no_kernel(const char* op) {
  MT_FAIL() << op << ": no kernel for this device in this build (CUDA tensors need -DMT_CUDA=ON)";
}

// t has `dtype` and `shape`, and data unless it is empty.
inline void check_tensor(const TensorView& t, const Shape& shape, DType dtype, const char* op, const char* name) {
  check_dtype(t, dtype, op, name);
  check_shape(t, shape, op, name);
  MT_CHECK(!t.empty() || t.numel() == 0) << op << ": " << name << " " << t.str() << " has no data";
}

}  // namespace mt
