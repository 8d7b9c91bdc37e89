// Shared by the op entry points: routing to the backend that owns a tensor's memory, the error for
// a device whose backend this build lacks, and the check of a tensor argument.
#pragma once

#include <vector>

#include "backend/backend.h"
#include "backend/guard.h"
#include "base/error.h"
#include "ops/op_profile.h"
#include "tensor/tensor.h"
#if MT_HAVE_CUDA
#include "backend/cuda/ops.h"
#endif

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

// The values of an i32 tensor (indices an op checks) readable by the host: its own memory on the
// CPU, else a copy in `storage` read through its backend.
inline const int32_t* host_i32(const TensorView& t, std::vector<int32_t>& storage) {
  if (t.device == Device::cpu) return t.i32();
  storage.resize(static_cast<size_t>(t.numel()));
  if (!storage.empty()) backend_for(t.device).copy_to_host(storage.data(), t.data, t.bytes());
  return storage.data();
}

}  // namespace mt

#if MT_HAVE_CUDA
#define MT_ROUTE_CUDA(op, call) return cuda::call
#else
#define MT_ROUTE_CUDA(op, call) no_kernel(op)
#endif

// Returns `call` from the backend owning `device`: cpu::call, cuda::call (same name and
// arguments), or cpu::call inside a GuardWindow for the guard device; timed under --profile-ops.
#define MT_ROUTE(device, op, call) MT_ROUTE_WITH_CUDA(device, op, call, MT_ROUTE_CUDA(op, call))

// MT_ROUTE for an op with no CUDA kernel yet: a CUDA tensor stops with the op's name.
#define MT_ROUTE_CPU_ONLY(device, op, call) MT_ROUTE_WITH_CUDA(device, op, call, break)

#define MT_ROUTE_WITH_CUDA(device, op, call, cuda_case) \
  const ::mt::OpTimer op_timer{op, device};             \
  switch (device) {                                     \
    case ::mt::Device::cpu:                             \
      return cpu::call;                                 \
    case ::mt::Device::guard: {                         \
      const ::mt::GuardWindow open;                     \
      return cpu::call;                                 \
    }                                                   \
    case ::mt::Device::cuda:                            \
      cuda_case;                                        \
  }                                                     \
  no_kernel(op)
