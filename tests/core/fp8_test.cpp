// OCP FP8 (e4m3fn, e5m2) against the textbook formula in double (float_reference.h).
#include "core/fp8.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "core/float_reference.h"

namespace latentserve {
namespace {

using test::minifloat_value;
using test::round_to_format;

constexpr float kInf = std::numeric_limits<float>::infinity();

bool is_e4m3_nan(uint8_t c) { return (c & 0x7f) == 0x7f; }
bool is_e5m2_special(uint8_t c) { return (c & 0x7c) == 0x7c; }  // exponent field all ones

// Reference decode of a code (NaN as quiet NaN, infinities for e5m2).
double ref_e4m3(uint8_t c) {
  return is_e4m3_nan(c) ? std::numeric_limits<double>::quiet_NaN() : minifloat_value(c, 4, 3, 7);
}
double ref_e5m2(uint8_t c) {
  if (!is_e5m2_special(c)) return minifloat_value(c, 5, 2, 15);
  if ((c & 3) == 0) return (c & 0x80) ? -HUGE_VAL : HUGE_VAL;
  return std::numeric_limits<double>::quiet_NaN();
}

TEST(Fp8E4M3, DecodesEveryCodeLikeTheFormula) {
  for (int c = 0; c < 256; ++c) {
    const float got = fp8_e4m3_to_f32(uint8_t(c));
    if (is_e4m3_nan(uint8_t(c))) {
      EXPECT_TRUE(std::isnan(got)) << "code " << c;
      continue;
    }
    EXPECT_EQ(double(got), ref_e4m3(uint8_t(c))) << "code " << c;
    EXPECT_EQ(std::signbit(got), c >= 0x80) << "code " << c;
  }
  // Anchors from the spec's table.
  EXPECT_EQ(fp8_e4m3_to_f32(0x7e), 448.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0xfe), -448.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x38), 1.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x08), 0.015625f);        // 2^-6, min normal
  EXPECT_EQ(fp8_e4m3_to_f32(0x07), 0.013671875f);     // 7 * 2^-9, max subnormal
  EXPECT_EQ(fp8_e4m3_to_f32(0x01), 0.001953125f);     // 2^-9, min subnormal
  EXPECT_EQ(fp8_e4m3_to_f32(0x78), 256.0f);           // S.1111.000 is a number, not inf
}

TEST(Fp8E5M2, DecodesEveryCodeLikeTheFormula) {
  for (int c = 0; c < 256; ++c) {
    const float got = fp8_e5m2_to_f32(uint8_t(c));
    const double want = ref_e5m2(uint8_t(c));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << "code " << c;
      continue;
    }
    EXPECT_EQ(double(got), want) << "code " << c;
    EXPECT_EQ(std::signbit(got), c >= 0x80) << "code " << c;
  }
  EXPECT_EQ(fp8_e5m2_to_f32(0x7b), 57344.0f);
  EXPECT_EQ(fp8_e5m2_to_f32(0x3c), 1.0f);
  EXPECT_EQ(fp8_e5m2_to_f32(0x04), 0.00006103515625f);    // 2^-14, min normal
  EXPECT_EQ(fp8_e5m2_to_f32(0x01), 0.0000152587890625f);  // 2^-16, min subnormal
  EXPECT_EQ(fp8_e5m2_to_f32(0x7c), kInf);
  EXPECT_EQ(fp8_e5m2_to_f32(0xfc), -kInf);
}

// The three encoders under test, with their decoder, code range and overflow rule.
struct Codec {
  const char* name;
  std::function<uint8_t(float)> encode;
  std::function<float(uint8_t)> decode;
  std::function<double(uint8_t)> reference;
  uint8_t max_code;   // largest finite positive code
  double max_value;
  bool overflow_to_inf;
  int man_bits, emin;
};

std::vector<Codec> codecs() {
  return {
      {"e4m3", f32_to_fp8_e4m3, fp8_e4m3_to_f32, ref_e4m3, 0x7e, 448.0, false, 3, -6},
      {"e5m2", f32_to_fp8_e5m2, fp8_e5m2_to_f32, ref_e5m2, 0x7b, 57344.0, false, 2, -14},
      {"e5m2_nonsat", f32_to_fp8_e5m2_nonsat, fp8_e5m2_to_f32, ref_e5m2, 0x7b, 57344.0, true, 2, -14},
  };
}

TEST(Fp8, EveryFiniteCodeRoundTrips) {
  for (const Codec& k : codecs()) {
    for (int sign = 0; sign < 2; ++sign) {
      for (int c = 0; c <= k.max_code; ++c) {
        const uint8_t code = uint8_t(c | (sign << 7));
        EXPECT_EQ(k.encode(float(k.reference(code))), code) << k.name << " code " << int(code);
      }
    }
  }
}

// Between neighbours a < b (codes c, c+1) the midpoint goes to the even code, and the
// floats just beside it go to the nearer neighbour. FP8 midpoints are exact in f32.
TEST(Fp8, MidpointsRoundToEvenAndNeighboursToNearest) {
  for (const Codec& k : codecs()) {
    for (int sign = 0; sign < 2; ++sign) {
      for (int c = 0; c < k.max_code; ++c) {
        const uint8_t lo = uint8_t(c | (sign << 7)), hi = uint8_t((c + 1) | (sign << 7));
        const double a = k.reference(lo), b = k.reference(hi);
        const float mid = float((a + b) / 2);
        ASSERT_EQ(double(mid), (a + b) / 2);
        const uint8_t even = (c % 2 == 0) ? lo : hi;
        EXPECT_EQ(k.encode(mid), even) << k.name << " between codes " << int(lo) << " and " << int(hi);
        const float toward_b = std::nextafter(mid, float(b)), toward_a = std::nextafter(mid, float(a));
        EXPECT_EQ(k.encode(toward_b), hi) << k.name << " just past the midpoint of " << int(lo);
        EXPECT_EQ(k.encode(toward_a), lo) << k.name << " just before the midpoint of " << int(lo);
      }
    }
  }
}

TEST(Fp8, SignedZeroAndTinyInputs) {
  for (const Codec& k : codecs()) {
    EXPECT_EQ(k.encode(0.0f), 0x00) << k.name;
    EXPECT_EQ(k.encode(-0.0f), 0x80) << k.name;
    EXPECT_EQ(k.encode(1e-30f), 0x00) << k.name;
    EXPECT_EQ(k.encode(-1e-30f), 0x80) << k.name;
    EXPECT_EQ(k.encode(std::numeric_limits<float>::denorm_min()), 0x00) << k.name;
    // Half the smallest subnormal ties to zero (even); a hair more rounds up to it.
    const float half_min = float(std::ldexp(1.0, k.emin - k.man_bits - 1));
    EXPECT_EQ(k.encode(half_min), 0x00) << k.name;
    EXPECT_EQ(k.encode(std::nextafter(half_min, 1.0f)), 0x01) << k.name;
    EXPECT_EQ(k.encode(-std::nextafter(half_min, 1.0f)), 0x81) << k.name;
  }
}

TEST(Fp8, SaturationAtTheTop) {
  // e4m3 saturates everything beyond 448, infinities included (OCP SAT mode).
  for (float x : {449.0f, 464.0f, 480.0f, 1e6f, std::numeric_limits<float>::max(), kInf}) {
    EXPECT_EQ(f32_to_fp8_e4m3(x), 0x7e) << x;
    EXPECT_EQ(f32_to_fp8_e4m3(-x), 0xfe) << -x;
    EXPECT_EQ(f32_to_fp8_e5m2(x * 200.0f), 0x7b) << x * 200.0f;
    EXPECT_EQ(f32_to_fp8_e5m2(-x * 200.0f), 0xfb) << -x * 200.0f;
  }
  // Just below the e4m3 midpoint 464 between 448 and (the non-existent) 480: 448.
  EXPECT_EQ(f32_to_fp8_e4m3(463.9f), 0x7e);
  // e5m2 non-saturating: IEEE overflow. 61440 is the tie between 57344 and 2^16, and
  // 2^16 has the even mantissa, so it (and anything larger) becomes infinity.
  EXPECT_EQ(f32_to_fp8_e5m2_nonsat(61439.0f), 0x7b);
  EXPECT_EQ(f32_to_fp8_e5m2_nonsat(61440.0f), 0x7c);
  EXPECT_EQ(f32_to_fp8_e5m2_nonsat(-61440.0f), 0xfc);
  EXPECT_EQ(f32_to_fp8_e5m2_nonsat(1e30f), 0x7c);
  EXPECT_EQ(f32_to_fp8_e5m2_nonsat(kInf), 0x7c);
  EXPECT_EQ(f32_to_fp8_e5m2_nonsat(-kInf), 0xfc);
  EXPECT_EQ(f32_to_fp8_e5m2(61440.0f), 0x7b);
}

TEST(Fp8, NaNStaysNaN) {
  const float nans[] = {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
                        std::numeric_limits<float>::signaling_NaN(), std::bit_cast<float>(0x7f800001u),
                        std::bit_cast<float>(0xffffffffu)};
  for (float x : nans) {
    EXPECT_TRUE(is_e4m3_nan(f32_to_fp8_e4m3(x)));
    EXPECT_TRUE(std::isnan(fp8_e4m3_to_f32(f32_to_fp8_e4m3(x))));
    EXPECT_TRUE(std::isnan(fp8_e5m2_to_f32(f32_to_fp8_e5m2(x))));
    EXPECT_TRUE(std::isnan(fp8_e5m2_to_f32(f32_to_fp8_e5m2_nonsat(x))));
  }
}

// Random f32 bit patterns (all of them, and ones concentrated on the FP8 range)
// against the double reference: round to nearest even, then apply the overflow rule.
TEST(Fp8, RandomInputsMatchTheReference) {
  std::mt19937 rng(1234);
  std::uniform_int_distribution<uint32_t> any_bits;
  std::uniform_real_distribution<double> log2_magnitude(-20.0, 18.0);
  for (const Codec& k : codecs()) {
    for (int i = 0; i < 400000; ++i) {
      float x;
      if (i % 2 == 0) {
        x = std::bit_cast<float>(any_bits(rng));
        if (std::isnan(x)) continue;
      } else {
        x = float(std::exp2(log2_magnitude(rng)) * ((any_bits(rng) & 1) ? -1.0 : 1.0));
      }
      double want;
      if (std::isinf(x)) {
        want = k.overflow_to_inf ? double(x) : std::copysign(k.max_value, x);
      } else {
        want = round_to_format(double(x), k.man_bits, k.emin);
        if (std::fabs(want) > k.max_value) want = k.overflow_to_inf ? std::copysign(HUGE_VAL, x) : std::copysign(k.max_value, x);
      }
      const float got = k.decode(k.encode(x));
      ASSERT_FALSE(std::isnan(got)) << k.name << " finite input " << x << " gave NaN";
      ASSERT_EQ(double(got), want) << k.name << " input " << x;
      ASSERT_EQ(std::signbit(got), std::signbit(x)) << k.name << " input " << x;
    }
  }
}

}  // namespace
}  // namespace latentserve
