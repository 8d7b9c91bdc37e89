// Device cases of ops/adamw.h against the CPU backend: the fused AdamW update (without a 16-bit
// copy, with a bf16 and an f16 copy; with and without decay, unscale and clip), the multi-tensor
// form over more tensors than one launch takes, and the sums of squares of the unscaled gradient
// (single, and multi over more tensors than one device-side batch or one copy back holds).
#include <cmath>
#include <cstring>
#include <vector>

#include "device_testing.h"
#include "ops/adamw.h"
#include "ops/elementwise.h"

namespace mt::test {
namespace {

// CUDA may contract the moment updates into other fused multiply-adds than GCC does: a few ulps.
constexpr double kAtol = 1e-6, kRtol = 1e-5;

struct HostState {
  HostTensor param, grad, m, v, copy;
};

HostState host_state(int64_t n, uint64_t seed, DType copy_dtype) {
  HostState s{randn({n}, seed), randn({n}, seed + 1, 300.0f), randn({n}, seed + 2, 0.01f), randn({n}, seed + 3, 1.0f),
              HostTensor(copy_dtype, {n})};
  for (int64_t i = 0; i < n; ++i) s.v.f32()[i] = s.v.f32()[i] * s.v.f32()[i];  // v ≥ 0
  return s;
}

struct DeviceState {
  TensorView param, grad, m, v, copy;
};

DeviceState device_state(DeviceCase& dev, HostState& h, bool with_copy) {
  return {dev.upload(h.param), dev.upload(h.grad), dev.upload(h.m), dev.upload(h.v),
          with_copy ? dev.poisoned(h.copy.dtype, h.copy.shape) : TensorView()};
}

// The 16-bit copy: bit for bit the CPU's on the guard backend; on CUDA (whose param may differ from
// the CPU's by an ulp, which can move a rounding) bit for bit the cast of the device's own param.
void expect_copy(DeviceCase& dev, const TensorView& dcopy, const TensorView& dparam, HostTensor& cpu_copy,
                 const char* what) {
  if (dev.exact()) return dev.expect_matches(dcopy, cpu_copy, 0, 0, what);
  HostTensor param = dev.download(dparam), want(dcopy.dtype, dcopy.shape);
  cast(want.view(), param.view());
  HostTensor got = dev.download(dcopy);
  EXPECT_EQ(0, std::memcmp(got.bytes.data(), want.bytes.data(), want.bytes.size())) << what;
}

void expect_state(DeviceCase& dev, const DeviceState& d, HostState& h, bool with_copy, const char* what) {
  dev.expect_matches(d.param, h.param, kAtol, kRtol, what);
  dev.expect_matches(d.m, h.m, kAtol, kRtol, what);
  dev.expect_matches(d.v, h.v, kAtol, kRtol, what);
  dev.expect_matches(d.grad, h.grad, 0, 0, "grad is only read");
  if (with_copy) expect_copy(dev, d.copy, d.param, h.copy, what);
}

TEST(DeviceAdamW, UpdateWithAndWithoutCopyDecayUnscaleClip) {
  for (int64_t n : {int64_t{1}, int64_t{37}, int64_t{4096}, int64_t{4097}, int64_t{100003}})
    for (int copy = 0; copy < 3; ++copy)
      for (int fused = 0; fused < 2; ++fused) {
        SCOPED_TRACE(::testing::Message() << "n " << n << " copy " << copy << " fused " << fused);
        DeviceCase dev;
        const DType copy_dtype = copy == 2 ? DType::f16 : DType::bf16;
        HostState h = host_state(n, 10 + n, copy_dtype);
        const DeviceState d = device_state(dev, h, copy > 0);
        AdamWParams p;
        p.lr = 3e-3f;
        p.weight_decay = fused ? 0.1f : 0.0f;
        p.grad_unscale = fused ? 1.0f / 1000.0f : 1.0f;
        p.grad_clip = fused ? 0.37f : 1.0f;
        for (int64_t step = 1; step <= 3; ++step) {
          p.step = step;
          adamw_update(h.param.view(), h.grad.view(), h.m.view(), h.v.view(), p,
                       copy ? h.copy.view() : TensorView());
          adamw_update(d.param, d.grad, d.m, d.v, p, d.copy);
        }
        expect_state(dev, d, h, copy > 0, "adamw_update");
      }
}

TEST(DeviceAdamW, MultiOverMoreTensorsThanOneLaunch) {
  DeviceCase dev;
  const int count = 45;  // more than one batch of kernel slots (32)
  std::vector<HostState> h;
  std::vector<DeviceState> d;
  std::vector<AdamWTensor> ht, dt;
  for (int i = 0; i < count; ++i) {
    const int64_t n = i == 3 ? 0 : (i * 977) % 9000 + 1;  // one empty tensor; sizes off every multiple
    h.push_back(host_state(n, 100 + 4 * i, i % 2 ? DType::bf16 : DType::f16));
  }
  for (int i = 0; i < count; ++i) {
    const bool copy = i % 3 != 0;
    d.push_back(device_state(dev, h[i], copy));
    const float wd = i % 4 == 0 ? 0.0f : 0.05f * static_cast<float>(i % 5);
    ht.push_back({h[i].param.view(), h[i].grad.view(), h[i].m.view(), h[i].v.view(),
                  copy ? h[i].copy.view() : TensorView(), wd});
    dt.push_back({d[i].param, d[i].grad, d[i].m, d[i].v, d[i].copy, wd});
  }
  AdamWParams p;
  p.lr = 1e-2f;
  p.weight_decay = 123.0f;  // not used by the multi form
  p.grad_unscale = 1.0f / 65536.0f;
  p.grad_clip = 0.5f;
  for (int64_t step = 1; step <= 2; ++step) {
    p.step = step;
    adamw_update_multi(ht, p);
    adamw_update_multi(dt, p);
  }
  for (int i = 0; i < count; ++i) {
    SCOPED_TRACE(::testing::Message() << "tensor " << i);
    expect_state(dev, d[i], h[i], i % 3 != 0, "adamw_update_multi");
  }
}

void expect_sum(DeviceCase& dev, double device, double cpu, const char* what) {
  if (dev.exact())
    EXPECT_EQ(0, std::memcmp(&device, &cpu, sizeof cpu)) << what << ": " << device << " vs " << cpu;
  else
    EXPECT_NEAR(device, cpu, 1e-12 * cpu) << what;
}

TEST(DeviceAdamW, UnscaledSumSquares) {
  DeviceCase dev;
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{1000}, int64_t{65537}, int64_t{300000}})
    for (float unscale : {1.0f, 1.0f / 1000.0f}) {
      HostTensor x = randn({n}, 7 + n, 50.0f);
      expect_sum(dev, unscaled_sum_squares(dev.upload(x), unscale), unscaled_sum_squares(x.view(), unscale),
                 "unscaled_sum_squares");
    }
}

TEST(DeviceAdamW, UnscaledSumSquaresMulti) {
  DeviceCase dev(size_t{128} << 20);
  // 1100 tensors: more than one copy back (1024 sums) and many device batches (64 tensors); 20 of
  // 70000 elements (256 partials each) overflow a batch's partials too.
  std::vector<HostTensor> host;
  for (int i = 0; i < 1100; ++i) {
    const int64_t n = i % 55 == 7 ? 70000 : (i == 5 ? 0 : (i * 131) % 700 + 1);
    host.push_back(randn({n}, 1000 + i, 20.0f));
  }
  std::vector<TensorView> hv, dv;
  for (HostTensor& t : host) {
    hv.push_back(t.view());
    dv.push_back(dev.upload(t));
  }
  const float unscale = 1.0f / 3000.0f;
  std::vector<double> scratch(static_cast<size_t>(unscaled_sum_squares_multi_scratch(hv)));
  std::vector<double> want(host.size()), got(host.size(), -1.0);
  unscaled_sum_squares_multi(hv, unscale, scratch, want);
  std::vector<double> dscratch(static_cast<size_t>(unscaled_sum_squares_multi_scratch(dv)));
  unscaled_sum_squares_multi(dv, unscale, dscratch, got);
  for (size_t i = 0; i < host.size(); ++i) {
    SCOPED_TRACE(::testing::Message() << "tensor " << i);
    expect_sum(dev, got[i], want[i], "unscaled_sum_squares_multi");
  }
}

}  // namespace
}  // namespace mt::test
