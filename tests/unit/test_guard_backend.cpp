// The guard backend keeps its memory out of the host's reach outside backend calls, and its ops
// are the CPU backend's bit for bit.
#include "backend/arena.h"
#include "backend/guard.h"
#include "ops/elementwise.h"
#include "testing.h"

#include <cstring>

namespace mt {
namespace {

TEST(GuardBackend, HostAccessOutsideABackendCallCrashes) {
  Arena arena(guard_backend(), MemCategory::activations, 1 << 16, nullptr);
  const TensorView t = arena.alloc(DType::f32, {16});
  EXPECT_EQ(t.device, Device::guard);
  EXPECT_DEATH({ t.f32()[3] = 1.0f; }, "");
  EXPECT_DEATH({ volatile float x = t.f32()[3]; (void)x; }, "");
}

TEST(GuardBackend, OpsAndCopiesMatchTheCpuBitForBit) {
  Arena arena(guard_backend(), MemCategory::activations, 1 << 16, nullptr);
  const int64_t n = 1000;
  std::vector<float> a(n), b(n), cpu_out(n), guard_out(n);
  for (int64_t i = 0; i < n; ++i) {
    a[i] = std::sin(0.1f * i);
    b[i] = std::cos(0.37f * i);
  }
  const TensorView ga = arena.alloc(DType::f32, {n}), gb = arena.alloc(DType::f32, {n}),
                   gout = arena.alloc(DType::f32, {n});
  guard_backend().copy_from_host(ga.data, a.data(), ga.bytes());
  guard_backend().copy_from_host(gb.data, b.data(), gb.bytes());
  add_fwd(gout, ga, gb);
  scale_inplace(gout, 0.3f);
  guard_backend().copy_to_host(guard_out.data(), gout.data, gout.bytes());
  const TensorView ca(a.data(), DType::f32, {n}), cb(b.data(), DType::f32, {n}), cout(cpu_out.data(), DType::f32, {n});
  add_fwd(cout, ca, cb);
  scale_inplace(cout, 0.3f);
  EXPECT_EQ(0, std::memcmp(cpu_out.data(), guard_out.data(), n * sizeof(float)));
}

TEST(GuardBackend, WindowsNestAndCloseAgain) {
  Arena arena(guard_backend(), MemCategory::weights, 4096, nullptr);
  const TensorView t = arena.alloc(DType::f32, {4});
  {
    const GuardWindow outer;
    {
      const GuardWindow inner;
      t.f32()[0] = 2.0f;
    }
    t.f32()[1] = 3.0f;  // still open: the outer window lives
    zero(t.rows(2, 2));  // a backend call inside a window keeps it open
    t.f32()[2] = 4.0f;
  }
  float host[4];
  guard_backend().copy_to_host(host, t.data, sizeof host);
  EXPECT_EQ(host[0], 2.0f);
  EXPECT_EQ(host[1], 3.0f);
  EXPECT_EQ(host[2], 4.0f);
  EXPECT_DEATH({ t.f32()[0] = 1.0f; }, "");
}

}  // namespace
}  // namespace mt
