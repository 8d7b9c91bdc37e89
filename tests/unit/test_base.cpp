// base/: the Philox generator against published known-answer vectors, distribution sanity,
// 16-bit conversions, and error messages.
#include <cmath>

#include "base/dtype.h"
#include "base/error.h"
#include "base/rng.h"
#include "testing.h"

namespace mt {
namespace {

// Known-answer vectors of Philox4x32-10 from the Random123 distribution (kat_vectors).
TEST(Philox, KnownAnswerVectors) {
  EXPECT_EQ(philox4x32({0, 0, 0, 0}, 0), (Philox4{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
  EXPECT_EQ(philox4x32({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, 0xffffffffffffffffull),
            (Philox4{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}));
  EXPECT_EQ(philox4x32({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, 0x299f31d0a4093822ull),
            (Philox4{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}));
}

TEST(RngStream, UniformAndNormalMoments) {
  const RngStream rng{42, stream_id("moments")};
  const int n = 200000;
  double su = 0, sn = 0, sn2 = 0;
  for (int i = 0; i < n; ++i) {
    const float u = rng.uniform(i);
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    su += u;
    const double z = rng.normal(i);
    sn += z;
    sn2 += z * z;
  }
  EXPECT_NEAR(su / n, 0.5, 0.005);
  EXPECT_NEAR(sn / n, 0.0, 0.01);
  EXPECT_NEAR(sn2 / n, 1.0, 0.02);
}

TEST(RngStream, PureFunctionOfSeedStreamIndex) {
  const RngStream a{1, 2}, b{1, 2}, c{1, 3}, d{2, 2};
  EXPECT_EQ(a.uniform(12345), b.uniform(12345));
  EXPECT_NE(a.uniform(12345), c.uniform(12345));
  EXPECT_NE(a.uniform(12345), d.uniform(12345));
  EXPECT_NE(stream_id("a"), stream_id("b"));
}

TEST(DType, Bf16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  // 1 + 2^-8 is exactly halfway between two bf16 values: ties go to the even mantissa (1.0).
  EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  // 1 + 3·2^-8 is halfway too; the even neighbour is above.
  EXPECT_EQ(f32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -16)), 0x3f81);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(-2.5f)), -2.5f);
}

TEST(DType, F16ConversionsAreExact) {
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);   // largest finite
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);   // rounds to inf
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);  // tie to even: 0
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie to even
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
  // Every f16 value survives a round trip through f32.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const auto bits = static_cast<uint16_t>(h);
    const float x = f16_to_f32(bits);
    if (std::isnan(x)) continue;
    ASSERT_EQ(f32_to_f16(x), bits) << std::hex << h;
  }
}

// The message is the user's alone; the location and the failed condition stay apart (--verbose).
TEST(Error, CheckCarriesMessageAndLocation) {
  try {
    MT_CHECK(1 + 1 == 3) << "arithmetic is broken; fix the universe";
    FAIL() << "MT_CHECK did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "arithmetic is broken; fix the universe");
    EXPECT_NE(e.where().find("test_base.cpp:"), std::string::npos) << e.where();
    EXPECT_NE(e.where().find("(check: 1 + 1 == 3)"), std::string::npos) << e.where();
  }
  try {
    MT_FAIL() << "no condition";
  } catch (const Error& e) {
    EXPECT_EQ(e.where().find("check:"), std::string::npos) << e.where();
  }
  try {
    MT_CHECK(false);  // no message: still says what failed
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "internal check failed: false");
  }
}

}  // namespace
}  // namespace mt
