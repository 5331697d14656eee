#include "core/fp8.h"

#include <bit>

namespace latentserve {

namespace {

// One 8-bit format: 1 sign bit, then exponent and man_bits mantissa bits (7 bits in all).
struct Fp8Format {
  int man_bits;
  int bias;
  uint8_t max_finite_code;  // magnitude code of the largest finite value
  uint8_t nan_code;         // magnitude code written for NaN
  uint8_t inf_code;         // magnitude code of infinity (0 when the format has none)
};

constexpr Fp8Format kE4M3{3, 7, 0x7e, 0x7f, 0};
constexpr Fp8Format kE5M2{2, 15, 0x7b, 0x7f, 0x7c};

enum class Overflow { saturate, to_infinity };

// Rounds |value| (given as f32 bits without sign) to the format and returns the
// magnitude code. Works in integers on the f32 significand:
//   value = sig * 2^(exp - 23), sig < 2^24 (the implicit bit included for normals).
// The format's quantum at that exponent is 2^(max(exp, emin) - man_bits), so the
// rounded significand is q = RNE(sig / 2^shift) with shift = 23 - man_bits + (emin - exp
// when below the normal range). The code is then ((max(exp, emin) - emin) << man_bits) + q:
// for normals q carries the implicit bit which adds the one missing exponent step, for
// subnormals q is the mantissa itself, and a carry out of q moves into the exponent field.
uint32_t round_magnitude(uint32_t abs_bits, const Fp8Format& f) {
  const int emin = 1 - f.bias;
  const int f32_exp_field = int(abs_bits >> 23);
  uint32_t sig = abs_bits & 0x7fffffu;
  int exp = f32_exp_field - 127;
  if (f32_exp_field == 0) {
    exp = -126;  // f32 subnormal: no implicit bit
  } else {
    sig |= 0x800000u;
  }
  const int exp_used = exp > emin ? exp : emin;
  const int shift = 23 - f.man_bits + (exp_used - exp);
  if (shift >= 26) return 0;  // below half the smallest subnormal: rounds to zero
  uint32_t q = sig >> shift;
  const uint32_t rem = sig & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1u))) ++q;
  return (uint32_t(exp_used - emin) << f.man_bits) + q;
}

uint8_t encode(float value, const Fp8Format& f, Overflow overflow) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint8_t sign = uint8_t((bits >> 24) & 0x80u);
  const uint32_t abs_bits = bits & 0x7fffffffu;
  if (abs_bits > 0x7f800000u) return sign | f.nan_code;
  const bool is_inf = abs_bits == 0x7f800000u;
  // Huge finite inputs are clamped before rounding so the code arithmetic stays small.
  const uint32_t code = is_inf ? 0xffffu : round_magnitude(abs_bits < 0x60000000u ? abs_bits : 0x60000000u, f);
  if (code > f.max_finite_code) {
    if (overflow == Overflow::to_infinity) return sign | f.inf_code;
    return sign | f.max_finite_code;
  }
  return sign | uint8_t(code);
}

// Decoding builds the f32 directly: normals by moving exponent and mantissa into
// place, subnormals as mantissa * 2^(emin - man_bits) (an exact product).
float decode(uint8_t code, const Fp8Format& f) {
  const uint32_t sign = uint32_t(code & 0x80u) << 24;
  const uint32_t exp_field = uint32_t(code & 0x7fu) >> f.man_bits;
  const uint32_t man = code & ((1u << f.man_bits) - 1u);
  float magnitude;
  if ((code & 0x7fu) == f.nan_code || (f.inf_code != 0 && (code & 0x7fu) > f.inf_code)) {
    magnitude = std::bit_cast<float>(0x7fc00000u);
  } else if (f.inf_code != 0 && (code & 0x7fu) == f.inf_code) {
    magnitude = std::bit_cast<float>(0x7f800000u);
  } else if (exp_field == 0) {
    const int scale_exp = 1 - f.bias - f.man_bits;  // f32 exponent of the subnormal quantum
    magnitude = float(man) * std::bit_cast<float>(uint32_t(scale_exp + 127) << 23);
  } else {
    magnitude = std::bit_cast<float>(((exp_field - uint32_t(f.bias) + 127u) << 23) |
                                     (man << (23 - f.man_bits)));
  }
  return std::bit_cast<float>(std::bit_cast<uint32_t>(magnitude) | sign);
}

}  // namespace

uint8_t f32_to_fp8_e4m3(float value) { return encode(value, kE4M3, Overflow::saturate); }
float fp8_e4m3_to_f32(uint8_t bits) { return decode(bits, kE4M3); }

uint8_t f32_to_fp8_e5m2(float value) { return encode(value, kE5M2, Overflow::saturate); }
uint8_t f32_to_fp8_e5m2_nonsat(float value) { return encode(value, kE5M2, Overflow::to_infinity); }
float fp8_e5m2_to_f32(uint8_t bits) { return decode(bits, kE5M2); }

}  // namespace latentserve
