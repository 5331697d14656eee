// bfloat16 and IEEE half against the double reference in float_reference.h.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <random>

#include "core/bf16.h"
#include "core/f16.h"
#include "core/float_reference.h"

namespace latentserve {
namespace {

using test::minifloat_value;
using test::round_to_format;

// bf16 keeps f32's exponent range (emin -126, subnormals below it) with 7 fraction bits.
constexpr double kBf16Max = (2.0 - 1.0 / 128.0) * 0x1p127;
constexpr double kF16Max = 65504.0;

// Checks bf16::from_f32 on one f32 bit pattern against round-to-nearest-even in double.
void expect_bf16_rounds(uint32_t bits) {
  const float x = std::bit_cast<float>(bits);
  const bf16 got = bf16::from_f32(x);
  if (std::isnan(x)) {
    ASSERT_TRUE(std::isnan(got.to_f32())) << std::hex << bits;
    ASSERT_EQ(got.bits >> 15, bits >> 31) << "NaN sign, input " << std::hex << bits;
    return;
  }
  double want = std::isinf(x) ? double(x) : round_to_format(double(x), 7, -126);
  if (std::fabs(want) > kBf16Max) want = std::copysign(HUGE_VAL, want);  // IEEE overflow
  ASSERT_EQ(std::bit_cast<uint32_t>(got.to_f32()), std::bit_cast<uint32_t>(float(want)))
      << "input bits 0x" << std::hex << bits << " (" << x << ")";
}

TEST(Bf16, RoundsEveryUpperHalfWithTiesAndNeighbours) {
  // Each of the 65536 bf16 values with the lower halves that matter for rounding:
  // exact, just above, just below the tie, the tie itself, just past it, the top.
  std::mt19937 rng(7);
  for (uint32_t hi = 0; hi < 0x10000u; ++hi)
    for (uint32_t lo : {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu, uint32_t(rng() & 0xffffu)})
      expect_bf16_rounds((hi << 16) | lo);
}

TEST(Bf16, RoundsRandomPatterns) {
  std::mt19937 rng(11);
  for (int i = 0; i < 2'000'000; ++i) expect_bf16_rounds(uint32_t(rng()));
}

TEST(Bf16, EdgeValues) {
  EXPECT_EQ(bf16::from_f32(1.0f).bits, 0x3f80);
  EXPECT_EQ(bf16::from_f32(-2.0f).bits, 0xc000);
  EXPECT_EQ(bf16::from_f32(std::numeric_limits<float>::infinity()).bits, 0x7f80);
  EXPECT_EQ(bf16::from_f32(-std::numeric_limits<float>::infinity()).bits, 0xff80);
  EXPECT_EQ(bf16::from_f32(std::numeric_limits<float>::max()).bits, 0x7f80);  // rounds past max
  EXPECT_EQ(bf16::from_f32(float(kBf16Max)).bits, 0x7f7f);
  EXPECT_EQ(bf16::from_f32(-0.0f).bits, 0x8000);
  EXPECT_EQ(bf16::from_f32(1.0f + 1.0f / 256.0f).bits, 0x3f80);  // tie between 1 and 1+2^-7: even
  EXPECT_EQ(bf16::from_f32(1.0f + 3.0f / 256.0f).bits, 0x3f82);  // tie between odd and even: even
  EXPECT_EQ(bf16::from_f32(std::bit_cast<float>(0x7f800001u)).bits & 0x7fc0, 0x7fc0);  // sNaN -> quiet NaN
  static_assert(bf16::from_f32(1.5f).bits == 0x3fc0, "from_f32 is usable at compile time");
}

TEST(Bf16, DecodesLikeTheFormula) {
  for (uint32_t b = 0; b < 0x10000u; ++b) {
    if (((b >> 7) & 0xff) == 0xff) continue;  // inf / NaN
    ASSERT_EQ(double(bf16::from_bits(uint16_t(b)).to_f32()), minifloat_value(b, 8, 7, 127)) << b;
  }
}

TEST(F16, DecodesEveryCodeAndRoundTrips) {
  for (uint32_t b = 0; b < 0x10000u; ++b) {
    const float x = f16_bits_to_f32(uint16_t(b));
    const bool special = ((b >> 10) & 0x1f) == 0x1f;
    if (special && (b & 0x3ff) != 0) {
      EXPECT_TRUE(std::isnan(x)) << b;
      EXPECT_TRUE(std::isnan(f16_bits_to_f32(f32_to_f16_bits(x)))) << b;
      continue;
    }
    if (special) {
      EXPECT_TRUE(std::isinf(x)) << b;
    } else {
      EXPECT_EQ(double(x), minifloat_value(b, 5, 10, 15)) << b;
    }
    EXPECT_EQ(f32_to_f16_bits(x), b) << "round trip of code " << b;
  }
}

TEST(F16, MidpointsRoundToEven) {
  for (uint32_t b = 0; b < 0x7bffu; ++b) {  // up to the last pair below 65504
    const double a = minifloat_value(b, 5, 10, 15), c = minifloat_value(b + 1, 5, 10, 15);
    const float mid = float((a + c) / 2);
    ASSERT_EQ(double(mid), (a + c) / 2);
    EXPECT_EQ(f32_to_f16_bits(mid), (b % 2 == 0) ? b : b + 1) << "between codes " << b << " and " << b + 1;
    EXPECT_EQ(f32_to_f16_bits(-mid), ((b % 2 == 0) ? b : b + 1) | 0x8000u);
  }
}

TEST(F16, RoundsRandomInputsLikeTheReference) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> log2_magnitude(-26.0, 17.0);
  for (int i = 0; i < 1'000'000; ++i) {
    float x = (i % 2) ? std::bit_cast<float>(uint32_t(rng()))
                      : float(std::exp2(log2_magnitude(rng)) * ((rng() & 1) ? -1.0 : 1.0));
    if (std::isnan(x)) continue;
    double want = std::isinf(x) ? double(x) : round_to_format(double(x), 10, -14);
    if (std::fabs(want) > kF16Max) want = std::copysign(HUGE_VAL, want);
    const float got = f16_bits_to_f32(f32_to_f16_bits(x));
    ASSERT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(float(want))) << x;
  }
}

}  // namespace
}  // namespace latentserve
