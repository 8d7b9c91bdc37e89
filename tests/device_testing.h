// The device op tier: every op run on the device under test and compared with the same op on the
// CPU backend (itself checked against fp64 references and finite differences in tests/ops).
// The device under test is CUDA when this build has it and a GPU is visible; otherwise the guard
// backend, whose kernels are the CPU's, so there every result must match bit for bit and the
// harness itself is exercised in CI. Each case states the tolerance CUDA must meet.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>

#include "backend/arena.h"
#include "backend/guard.h"
#include "testing.h"
#if MT_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

namespace mt::test {

inline Device device_under_test() {
#if MT_HAVE_CUDA
  static const bool gpu = cuda_device_count() > 0;
  if (gpu) return Device::cuda;
#endif
  return Device::guard;
}

// One line for the log: what the device tier ran on, and why not on CUDA.
inline std::string device_under_test_reason() {
#if MT_HAVE_CUDA
  std::string why;
  if (cuda_device_count(&why) > 0) return "CUDA: " + cuda_device_description();
  return "guard backend (CUDA built, but no GPU: " + why + ")";
#else
  return "guard backend (built without CUDA: -DMT_CUDA=off or no toolkit)";
#endif
}

// Device copies of host tensors for one test case, from an arena on the device under test.
class DeviceCase {
 public:
  explicit DeviceCase(size_t capacity = size_t{64} << 20)
      : backend_(backend_for(device_under_test())),
        arena_(std::make_unique<Arena>(backend_, MemCategory::workspace, capacity, nullptr)) {}

  bool exact() const { return backend_.device() == Device::guard; }

  // A device tensor holding `host`'s bytes (inputs, and outputs that an op accumulates into).
  TensorView upload(const TensorView& host) {
    const TensorView d = arena_->alloc(host.dtype, host.shape);
    if (host.numel() > 0) backend_.copy_from_host(d.data, host.data, host.bytes());
    return d;
  }
  TensorView upload(HostTensor& host) { return upload(host.view()); }
  // An uninitialised-looking device tensor: filled with NaN bytes, so an element the op fails to
  // write shows up in the comparison.
  TensorView poisoned(DType dtype, Shape shape) {
    HostTensor nan(dtype, shape);
    std::memset(nan.bytes.data(), 0xff, nan.bytes.size());
    return upload(nan);
  }
  HostTensor download(const TensorView& d) {
    HostTensor h(d.dtype, d.shape);
    if (d.numel() > 0) backend_.copy_to_host(h.bytes.data(), d.data, d.bytes());
    return h;
  }

  // The device result equals the CPU result: bit for bit on the guard backend, else within
  // |a − b| <= atol + rtol·|b| elementwise (f32), or exactly for integer and byte tensors.
  void expect_matches(const TensorView& device, const TensorView& cpu, double atol, double rtol,
                      const char* what) {
    ASSERT_EQ(device.dtype, cpu.dtype) << what;
    ASSERT_EQ(device.shape, cpu.shape) << what;
    HostTensor got = download(device);
    if (exact() || cpu.dtype != DType::f32) {
      EXPECT_EQ(0, std::memcmp(got.bytes.data(), cpu.data, cpu.bytes())) << what << " differs from the CPU's";
      return;
    }
    std::vector<double> want(static_cast<size_t>(cpu.numel()));
    for (int64_t i = 0; i < cpu.numel(); ++i) want[i] = cpu.f32()[i];
    expect_close(got.f32(), want, atol, rtol, what);
  }
  void expect_matches(const TensorView& device, HostTensor& cpu, double atol, double rtol, const char* what) {
    expect_matches(device, cpu.view(), atol, rtol, what);
  }

 private:
  Backend& backend_;
  std::unique_ptr<Arena> arena_;
};

}  // namespace mt::test
