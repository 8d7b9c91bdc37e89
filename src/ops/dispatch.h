// Shared by the op entry points: the error for a device whose backend this build lacks.
#pragma once

#include "base/error.h"

namespace mt {

[[noreturn]] inline void no_kernel(const char* op) {
  MT_FAIL() << op << ": no kernel for this device in this build (CUDA tensors need -DMT_CUDA=ON)";
}

}  // namespace mt
