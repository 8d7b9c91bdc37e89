// Device cases of ops/elementwise.h against the CPU backend.
#include "device_testing.h"
#include "ops/elementwise.h"

namespace mt::test {
namespace {

TEST(DeviceElementwise, AddAccumulateBiasScale) {
  DeviceCase dev;
  HostTensor a = randn({37, 53}, 1), b = randn({37, 53}, 2), bias = randn({53}, 3), out = zeros({37, 53});
  const TensorView da = dev.upload(a), db = dev.upload(b), dbias = dev.upload(bias);
  const TensorView dout = dev.poisoned(DType::f32, {37, 53});
  add_fwd(out.view(), a.view(), b.view());
  add_fwd(dout, da, db);
  dev.expect_matches(dout, out, 0, 0, "add_fwd");
  accumulate(out.view(), a.view());
  accumulate(dout, da);
  bias_add(out.view(), bias.view());
  bias_add(dout, dbias);
  scale_inplace(out.view(), 0.37f);
  scale_inplace(dout, 0.37f);
  dev.expect_matches(dout, out, 0, 0, "accumulate, bias_add, scale_inplace");
  copy_tensor(out.view(), b.view());
  copy_tensor(dout, db);
  dev.expect_matches(dout, out, 0, 0, "copy_tensor");
}

TEST(DeviceElementwise, CastsAndRoundingAreExact) {
  DeviceCase dev;
  HostTensor x = randn({1000}, 4, 300.0f);  // spans f16's subnormals, normals and overflow
  x.f32()[0] = 1e-7f;
  x.f32()[1] = 70000.0f;
  x.f32()[2] = NAN;
  const TensorView dx = dev.upload(x);
  for (DType t : {DType::bf16, DType::f16}) {
    HostTensor narrow(t, {1000}), wide = zeros({1000}), rounded = x;
    const TensorView dnarrow = dev.poisoned(t, {1000}), dwide = dev.poisoned(DType::f32, {1000});
    cast(narrow.view(), x.view());
    cast(dnarrow, dx);
    dev.expect_matches(dnarrow, narrow, 0, 0, "cast f32 -> 16-bit");
    cast(wide.view(), narrow.view());
    cast(dwide, dnarrow);
    dev.expect_matches(dwide, wide, 0, 0, "cast 16-bit -> f32");
    const TensorView drounded = dev.upload(rounded);
    round_to_dtype(rounded.view(), t);
    round_to_dtype(drounded, t);
    dev.expect_matches(drounded, rounded, 0, 0, "round_to_dtype");
  }
}

TEST(DeviceElementwise, CopyRowBlock) {
  DeviceCase dev;
  HostTensor src = randn({3, 5, 6}, 5), dst = randn({3, 9, 6}, 6);
  const TensorView dsrc = dev.upload(src), ddst = dev.upload(dst);
  copy_row_block(dst.view(), 2, src.view(), 1, 4);
  copy_row_block(ddst, 2, dsrc, 1, 4);
  dev.expect_matches(ddst, dst, 0, 0, "copy_row_block");
}

TEST(DeviceElementwise, SumSquares) {
  DeviceCase dev;
  for (int64_t n : {int64_t{1}, int64_t{1000}, int64_t{300000}}) {
    HostTensor x = randn({n}, 5);
    const double cpu = sum_squares(x.view()), device = sum_squares(dev.upload(x));
    if (dev.exact())
      EXPECT_EQ(cpu, device) << n;
    else
      EXPECT_NEAR(cpu, device, 1e-12 * cpu) << n;
  }
}

}  // namespace
}  // namespace mt::test
