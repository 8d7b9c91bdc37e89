// Device cases of ops/dropout.h against the CPU backend: the masks must be bit-identical on CUDA
// too (the same Philox draws and keep rule), the values within a rounding of the CPU's (the
// product is rounded alone on the device, but the CPU's scalar loop remainders may fuse it into the
// residual add or the gradient accumulation: half an ulp of x/(1 − p), up to ~1e-6 here).
#include <cstdint>

#include "device_testing.h"
#include "ops/dropout.h"

namespace mt::test {
namespace {

constexpr double kAtol = 1e-5, kRtol = 1e-6;

struct Case {
  int64_t n;
  float p;
  uint64_t offset;
};
// Sizes not multiples of 4 (a Philox block) nor of the block size, offsets in every lane of a
// block and past 2^32 elements, p = 0 (no draws) and p up to 0.9.
const Case kCases[] = {{1, 0.5f, 0},      {1, 0.5f, 3},       {5, 0.3f, 1},       {1001, 0.3f, 2},
                       {1001, 0.0f, 13},  {40001, 0.1f, 7},   {40000, 0.9f, 0},   {257, 0.5f, (1ull << 33) + 5},
                       {100003, 0.2f, 0}, {100003, 0.0f, 0}};

std::string name(const Case& c) {
  return "n " + std::to_string(c.n) + ", p " + std::to_string(c.p) + ", offset " + std::to_string(c.offset);
}

TEST(DeviceDropout, ForwardMaskAndBackward) {
  const RngStream rng{1234, 56};
  for (const Case& c : kCases) {
    SCOPED_TRACE(name(c));
    DeviceCase dev;
    HostTensor x = randn({c.n}, 1), dy = randn({c.n}, 2), dx = randn({c.n}, 3);
    HostTensor y = zeros({c.n}), mask = zeros({c.n}, DType::u8);
    const TensorView x_dev = dev.upload(x), dy_dev = dev.upload(dy), dx_dev = dev.upload(dx);
    const TensorView y_dev = dev.poisoned(DType::f32, {c.n}), mask_dev = dev.poisoned(DType::u8, {c.n});
    dropout_fwd(y.view(), mask.view(), x.view(), c.p, rng, c.offset);
    dropout_fwd(y_dev, mask_dev, x_dev, c.p, rng, c.offset);
    dev.expect_matches(mask_dev, mask, 0, 0, "dropout_fwd mask");
    dev.expect_matches(y_dev, y, kAtol, kRtol, "dropout_fwd out");

    const TensorView alone_dev = dev.poisoned(DType::u8, {c.n});
    dropout_mask(alone_dev, c.p, rng, c.offset);
    dev.expect_matches(alone_dev, mask, 0, 0, "dropout_mask");

    dropout_bwd(dx.view(), dy.view(), mask.view(), c.p);
    dropout_bwd(dx_dev, dy_dev, mask_dev, c.p);
    dev.expect_matches(dx_dev, dx, kAtol, kRtol, "dropout_bwd");
  }
}

TEST(DeviceDropout, AddForward) {
  const RngStream rng{77, 5};
  for (const Case& c : kCases) {
    SCOPED_TRACE(name(c));
    DeviceCase dev;
    HostTensor x = randn({c.n}, 4), res = randn({c.n}, 5), y = zeros({c.n}), mask = zeros({c.n}, DType::u8);
    const TensorView y_dev = dev.poisoned(DType::f32, {c.n}), mask_dev = dev.poisoned(DType::u8, {c.n});
    dropout_add_fwd(y.view(), mask.view(), x.view(), res.view(), c.p, rng, c.offset);
    dropout_add_fwd(y_dev, mask_dev, dev.upload(x), dev.upload(res), c.p, rng, c.offset);
    dev.expect_matches(mask_dev, mask, 0, 0, "dropout_add_fwd mask");
    dev.expect_matches(y_dev, y, kAtol, kRtol, "dropout_add_fwd out");
  }
}

// Rows keyed by (sample, position) ([s, b, h] with b > 1: the CUDA kernel's per-row Philox blocks),
// every form of the op, against the CPU bit for bit (masks) and within a rounding (values).
TEST(DeviceDropout, RowsKeyedBySample) {
  const RngStream rng{31, 7};
  const int64_t S = 9, b = 3, h = 37;
  const DropoutRows rows(1000, b, 2 * S, S);  // the second half of each sequence
  DeviceCase dev;
  HostTensor x = randn({S, b, h}, 6), res = randn({S, b, h}, 7), y = zeros({S, b, h}), mask = zeros({S, b, h}, DType::u8);
  const TensorView y_dev = dev.poisoned(DType::f32, {S, b, h}), mask_dev = dev.poisoned(DType::u8, {S, b, h});
  dropout_add_fwd(y.view(), mask.view(), x.view(), res.view(), 0.3f, rng, rows);
  dropout_add_fwd(y_dev, mask_dev, dev.upload(x), dev.upload(res), 0.3f, rng, rows);
  dev.expect_matches(mask_dev, mask, 0, 0, "dropout_add_fwd mask (rows)");
  dev.expect_matches(y_dev, y, kAtol, kRtol, "dropout_add_fwd out (rows)");
  const TensorView alone_dev = dev.poisoned(DType::u8, {S, b, h});
  dropout_mask(alone_dev, 0.3f, rng, rows);
  dev.expect_matches(alone_dev, mask, 0, 0, "dropout_mask (rows)");
}

// A shard drawn at its global offset reproduces its slice of the full tensor's mask on the device.
TEST(DeviceDropout, ShardAtOffsetMatchesSliceOfFullMask) {
  const RngStream rng{5, 9};
  const int64_t n = 4099, start = 1023;
  DeviceCase dev;
  HostTensor full = zeros({n}, DType::u8);
  dropout_mask(full.view(), 0.4f, rng, 17);
  const TensorView shard_dev = dev.poisoned(DType::u8, {n - start});
  dropout_mask(shard_dev, 0.4f, rng, 17 + start);
  dev.expect_matches(shard_dev, TensorView(full.u8() + start, DType::u8, {n - start}), 0, 0, "shard mask");
}

// The mask-less form (empty mask, p = 0) on the device: copy, add and accumulate.
TEST(DeviceDropout, EmptyMaskIsDropoutOff) {
  const RngStream rng{1, 2};
  const int64_t n = 333;
  DeviceCase dev;
  HostTensor x = randn({n}, 6), res = randn({n}, 7), dx = randn({n}, 8), y = zeros({n}), z = zeros({n});
  const TensorView x_dev = dev.upload(x), res_dev = dev.upload(res), dx_dev = dev.upload(dx);
  const TensorView y_dev = dev.poisoned(DType::f32, {n}), z_dev = dev.poisoned(DType::f32, {n});
  dropout_fwd(y.view(), TensorView(), x.view(), 0.0f, rng, 0);
  dropout_fwd(y_dev, TensorView(), x_dev, 0.0f, rng, 0);
  dev.expect_matches(y_dev, y, 0, 0, "dropout_fwd without mask");
  dropout_add_fwd(z.view(), TensorView(), x.view(), res.view(), 0.0f, rng, 0);
  dropout_add_fwd(z_dev, TensorView(), x_dev, res_dev, 0.0f, rng, 0);
  dev.expect_matches(z_dev, z, 0, 0, "dropout_add_fwd without mask");
  dropout_bwd(dx.view(), x.view(), TensorView(), 0.0f);
  dropout_bwd(dx_dev, x_dev, TensorView(), 0.0f);
  dev.expect_matches(dx_dev, dx, 0, 0, "dropout_bwd without mask");
}

}  // namespace
}  // namespace mt::test
