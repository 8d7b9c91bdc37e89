// Tests for ops/elementwise.h (add, accumulate, scale, copy, casts with nearest-even rounding,
// sum_squares) and for the CPU backend's vectorised exp_f32 that softmax/GeLU/SiLU rely on.
#include "ops/elementwise.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "backend/cpu/elementwise.h"
#include "testing.h"

namespace mt::test {
namespace {

TEST(Elementwise, AddAccumulateScaleMatchReference) {
  const int64_t n = 1001;  // not a multiple of any SIMD width
  HostTensor a = randn({7, 143}, 281), b = randn({n}, 282), out = zeros({n});
  add_fwd(out.view(), a.view(), b.view());  // flat: shapes may differ, sizes not
  std::vector<double> ref(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) ref[i] = static_cast<double>(a.f32()[i]) + b.f32()[i];
  // One f32 rounding per element (≤ 6e-8 relative): 2e-7 relative plus 1e-7 abs for cancellations.
  expect_close(out.f32(), ref, 1e-7, 2e-7, "add");

  accumulate(out.view(), b.view());
  std::vector<double> acc_ref(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) acc_ref[i] = static_cast<double>(a.f32()[i]) + 2.0 * b.f32()[i];
  expect_close(out.f32(), acc_ref, 1e-6, 1e-6, "accumulate");  // two f32 roundings

  HostTensor t = randn({n}, 283);
  const std::vector<double> t0 = to_double(t);
  scale_inplace(t.view(), -0.375f);
  std::vector<double> scaled(t0);
  for (double& x : scaled) x *= -0.375;
  expect_close(t.f32(), scaled, 1e-30, 2e-7, "scale");  // one f32 rounding
}

TEST(Elementwise, CopyTensorCopiesBytes) {
  HostTensor src = randn({3, 37}, 291), dst = zeros({111});
  copy_tensor(dst.view(), src.view());
  EXPECT_EQ(dst.bytes, src.bytes);
  HostTensor b16(DType::bf16, {111});
  EXPECT_THROW(copy_tensor(b16.view(), src.view()), Error);  // different dtype: use cast
}

// Bit-exact comparison against f32(expected): infinities and signed zeros must match too.
void expect_exact(const float* actual, const std::vector<double>& expected, const char* what) {
  int64_t bad = 0, first = -1;
  for (size_t i = 0; i < expected.size(); ++i) {
    const float want = static_cast<float>(expected[i]);
    if (std::memcmp(&want, actual + i, 4) != 0) {
      if (first < 0) first = static_cast<int64_t>(i);
      ++bad;
    }
  }
  EXPECT_EQ(bad, 0) << what << ": first mismatch at " << first << ": actual "
                    << (first >= 0 ? actual[first] : 0.0f) << " expected " << (first >= 0 ? expected[first] : 0.0);
}

// Independent fp64 reference for rounding f32 to a 16-bit float with `mant` explicit mantissa
// bits and minimum normal exponent `emin`: pick the nearer of the two neighbours, ties to even.
double round_to_format(double x, int mant, int emin) {
  if (x == 0.0 || !std::isfinite(x)) return x;
  int e;
  std::frexp(std::fabs(x), &e);  // |x| = f·2^e, f in [0.5, 1)
  const int exp = std::max(e - 1, emin);
  const double ulp = std::ldexp(1.0, exp - mant);
  const double q = std::fabs(x) / ulp, lo = std::floor(q);
  double r = q - lo > 0.5 ? lo + 1 : q - lo < 0.5 ? lo : (std::fmod(lo, 2.0) == 0.0 ? lo : lo + 1);
  return std::copysign(r * ulp, x);
}

// f32 -> bf16 and f32 -> f16 against the fp64 rounding reference, on random values over many
// binades plus explicit ties; then the round trips 16 -> 32 -> 16 are exact.
// copy_row_block moves rows [src_row, src_row + rows) of every outer slice, any dtype, and leaves
// the other rows of dst alone.
TEST(Elementwise, CopyRowBlockMovesRowsOfEverySlice) {
  const int64_t outer = 3, rs = 5, rd = 7, inner = 4;
  HostTensor src(DType::i32, {outer, rs, inner}), dst(DType::i32, {outer, rd, inner});
  for (int64_t e = 0; e < src.numel(); ++e) src.i32()[e] = static_cast<int32_t>(e);
  for (int64_t e = 0; e < dst.numel(); ++e) dst.i32()[e] = -1;
  copy_row_block(dst.view(), 4, src.view(), 1, 3);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t r = 0; r < rd; ++r)
      for (int64_t c = 0; c < inner; ++c) {
        const int32_t want = r >= 4 ? static_cast<int32_t>((o * rs + r - 3) * inner + c) : -1;
        ASSERT_EQ(dst.i32()[(o * rd + r) * inner + c], want) << o << " " << r << " " << c;
      }
  test::expect_error_mentioning([&] { copy_row_block(dst.view(), 5, src.view(), 1, 3); }, "out of range");
  HostTensor other(DType::i32, {outer, rs, inner + 1});
  test::expect_error_mentioning([&] { copy_row_block(dst.view(), 0, other.view(), 0, 1); }, "alike but for rows");
}

TEST(Cast, RoundsToNearestEvenLikeFp64Reference) {
  const int64_t n = 4096;
  HostTensor x = randn({n}, 301);
  RngStream rng{302, 303};
  for (int64_t i = 0; i < n; ++i) x.f32()[i] *= std::ldexp(1.0f, static_cast<int>(rng.uniform(i) * 24) - 12);
  // Exact ties: 1 + 2^-8 (bf16: down to even 1), 1 + 3·2^-8 (bf16: up to even 1 + 2^-6),
  // 1 + 2^-11 (f16: down), 1 + 3·2^-11 (f16: up), and an f16 subnormal tie 2^-25 (down to 0).
  const float ties[] = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, -(1.0f + 0x1p-8f), 1.0f + 0x1p-11f,
                        1.0f + 3 * 0x1p-11f, 0x1p-25f, 3 * 0x1p-25f, 65504.0f, 0.0f, -0.0f};
  std::memcpy(x.f32(), ties, sizeof(ties));
  HostTensor b16(DType::bf16, {n}), h16(DType::f16, {n}), back = zeros({n});

  cast(b16.view(), x.view());
  cast(back.view(), b16.view());
  std::vector<double> ref(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) ref[i] = round_to_format(x.f32()[i], 7, -126);
  expect_exact(back.f32(), ref, "f32 -> bf16 -> f32");
  EXPECT_EQ(back.f32()[0], 1.0f);
  EXPECT_EQ(back.f32()[1], 1.0f + 0x1p-6f);

  cast(h16.view(), x.view());
  cast(back.view(), h16.view());
  for (int64_t i = 0; i < n; ++i) {
    const double r = round_to_format(x.f32()[i], 10, -14);
    ref[i] = std::fabs(r) > 65504.0 ? std::copysign(INFINITY, r) : r;
  }
  expect_exact(back.f32(), ref, "f32 -> f16 -> f32");
  EXPECT_EQ(back.f32()[3], 1.0f);
  EXPECT_EQ(back.f32()[4], 1.0f + 0x1p-9f);
  EXPECT_EQ(back.f32()[5], 0.0f);
  EXPECT_EQ(back.f32()[6], 0x1p-23f);

  // Round trips from the 16-bit formats are exact (every 16-bit value is an f32).
  HostTensor b16_again(DType::bf16, {n}), h16_again(DType::f16, {n});
  cast(back.view(), b16.view());
  cast(b16_again.view(), back.view());
  EXPECT_EQ(b16_again.bytes, b16.bytes);
  cast(back.view(), h16.view());
  cast(h16_again.view(), back.view());
  EXPECT_EQ(h16_again.bytes, h16.bytes);
}

TEST(Cast, SpecialValuesAndCrossFormats) {
  const float specials[] = {INFINITY, -INFINITY, NAN, 70000.0f, -0.0f, 1e-30f};
  HostTensor x = zeros({6}), b16(DType::bf16, {6}), h16(DType::f16, {6}), back = zeros({6});
  std::memcpy(x.f32(), specials, sizeof(specials));
  cast(b16.view(), x.view());
  cast(back.view(), b16.view());
  EXPECT_EQ(back.f32()[0], INFINITY);
  EXPECT_EQ(back.f32()[1], -INFINITY);
  EXPECT_TRUE(std::isnan(back.f32()[2]));
  EXPECT_TRUE(std::signbit(back.f32()[4]));
  cast(h16.view(), x.view());
  cast(back.view(), h16.view());
  EXPECT_TRUE(std::isnan(back.f32()[2]));
  EXPECT_EQ(back.f32()[3], INFINITY);  // beyond f16's range
  EXPECT_EQ(back.f32()[5], 0.0f);      // below f16's smallest subnormal
  // bf16 -> f16 goes through f32 exactly, so it equals f32 -> f16 of the bf16 value.
  HostTensor via(DType::f16, {6}), direct(DType::f16, {6}), b16_as_f32 = zeros({6});
  cast(via.view(), b16.view());
  cast(b16_as_f32.view(), b16.view());
  cast(direct.view(), b16_as_f32.view());
  EXPECT_EQ(via.bytes, direct.bytes);
  HostTensor i32(DType::i32, {6}), wrong_size(DType::bf16, {7});
  EXPECT_THROW(cast(i32.view(), x.view()), Error);
  EXPECT_THROW(cast(wrong_size.view(), x.view()), Error);
}

// Σ t² in double against a double loop; on 2^20 + 7 elements the partition-based reduction must
// match to ~1e-15 relative and be bitwise identical for any thread count.
TEST(SumSquares, MatchesFp64ReferenceAndIsDeterministic) {
  const int64_t n = (1 << 20) + 7;
  HostTensor t = randn({n}, 311);
  double ref = 0.0;
  for (int64_t i = 0; i < n; ++i) ref += static_cast<double>(t.f32()[i]) * t.f32()[i];
  const double got = sum_squares(t.view());
  EXPECT_NEAR(got, ref, 1e-12 * ref);
#ifdef _OPENMP
  const int saved = omp_get_max_threads();
  for (int threads : {1, 3, 4}) {
    omp_set_num_threads(threads);
    const double again = sum_squares(t.view());
    EXPECT_EQ(std::memcmp(&again, &got, sizeof(double)), 0) << threads << " threads";
  }
  omp_set_num_threads(saved);
#endif
  HostTensor small = zeros({3});
  small.f32()[0] = 1.0f, small.f32()[1] = -2.0f, small.f32()[2] = 0.5f;
  EXPECT_EQ(sum_squares(small.view()), 5.25);
  HostTensor b16(DType::bf16, {n});
  cast(b16.view(), t.view());
  HostTensor widened = zeros({n});
  cast(widened.view(), b16.view());
  double ref16 = 0.0;
  for (int64_t i = 0; i < n; ++i) ref16 += static_cast<double>(widened.f32()[i]) * widened.f32()[i];
  EXPECT_NEAR(sum_squares(b16.view()), ref16, 1e-12 * ref16);
  HostTensor i32(DType::i32, {4});
  EXPECT_THROW(sum_squares(i32.view()), Error);
}

TEST(Elementwise, SizeAndDtypeMismatchesThrow) {
  HostTensor a = randn({8}, 1), b = randn({9}, 2), out = zeros({8});
  HostTensor b16(DType::bf16, {8});
  EXPECT_THROW(add_fwd(out.view(), a.view(), b.view()), Error);
  EXPECT_THROW(add_fwd(b16.view(), a.view(), a.view()), Error);
  EXPECT_THROW(accumulate(out.view(), b.view()), Error);
  EXPECT_THROW(scale_inplace(b16.view(), 2.0f), Error);
}

// exp_f32 against std::exp in double: ≤ 4 ulp (5e-7 relative) over the whole normal range,
// exact special cases, and gradual underflow (abs error below 2 subnormal steps).
TEST(ExpF32, MatchesStdExp) {
  double worst = 0.0;
  for (int k = 0; k <= 200000; ++k) {
    const float x = -87.0f + 175.7f * static_cast<float>(k) / 200000.0f;  // [-87, 88.7]
    const double ref = std::exp(static_cast<double>(x));
    worst = std::max(worst, std::fabs(cpu::exp_f32(x) - ref) / ref);
  }
  EXPECT_LT(worst, 5e-7);
  EXPECT_EQ(cpu::exp_f32(0.0f), 1.0f);
  EXPECT_EQ(cpu::exp_f32(-INFINITY), 0.0f);
  EXPECT_EQ(cpu::exp_f32(INFINITY), INFINITY);
  EXPECT_EQ(cpu::exp_f32(89.0f), INFINITY);
  EXPECT_EQ(cpu::exp_f32(-200.0f), 0.0f);
  EXPECT_TRUE(std::isnan(cpu::exp_f32(NAN)));
  for (float x : {-88.0f, -95.0f, -100.0f, -103.0f})
    EXPECT_NEAR(cpu::exp_f32(x), std::exp(static_cast<double>(x)), 2.0 * std::numeric_limits<float>::denorm_min())
        << x;
  EXPECT_NEAR(cpu::sigmoid_f32(0.0f), 0.5f, 1e-7f);
  EXPECT_EQ(cpu::sigmoid_f32(-200.0f), 0.0f);
  EXPECT_EQ(cpu::sigmoid_f32(200.0f), 1.0f);
}

}  // namespace
}  // namespace mt::test

namespace mt {
namespace {

TEST(RoundToDtype, MatchesACastRoundTrip) {
  for (DType dtype : {DType::bf16, DType::f16}) {
    test::HostTensor x = test::randn({1001}, 77, 3.0f);
    test::HostTensor half(dtype, {1001}), back = test::zeros({1001});
    cast(half.view(), x.view());
    cast(back.view(), half.view());
    round_to_dtype(x.view(), dtype);
    for (int64_t i = 0; i < 1001; ++i) ASSERT_EQ(x.f32()[i], back.f32()[i]) << dtype_name(dtype) << " at " << i;
  }
  test::HostTensor y = test::randn({7}, 1);
  const float before = y.f32()[3];
  round_to_dtype(y.view(), DType::f32);
  EXPECT_EQ(y.f32()[3], before);
  EXPECT_THROW(round_to_dtype(y.view(), DType::i32), Error);
}

}  // namespace
}  // namespace mt
