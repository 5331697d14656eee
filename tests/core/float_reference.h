#pragma once
// Independent references for the small float formats, computed in double from the
// textbook definitions. They share no code with core/{fp8,bf16,f16}.
#include <cmath>
#include <cstdint>

namespace latentserve::test {

// Value of the finite code of a format with 1 sign bit, exp_bits exponent bits and
// man_bits mantissa bits:  sign * 2^(e - bias) * (1 + m / 2^M)  for e > 0,
//                          sign * 2^(1 - bias) * (m / 2^M)      for e = 0 (subnormal).
// Callers handle the codes their format reserves for inf / NaN.
inline double minifloat_value(uint32_t code, int exp_bits, int man_bits, int bias) {
  const int total_bits = 1 + exp_bits + man_bits;
  const double sign = ((code >> (total_bits - 1)) & 1u) ? -1.0 : 1.0;
  const uint32_t e = (code >> man_bits) & ((1u << exp_bits) - 1u);
  const uint32_t m = code & ((1u << man_bits) - 1u);
  const double fraction = double(m) / std::pow(2.0, man_bits);
  if (e == 0) return sign * std::pow(2.0, 1 - bias) * fraction;
  return sign * std::pow(2.0, int(e) - bias) * (1.0 + fraction);
}

// x rounded to nearest, ties to even, onto a grid with man_bits fraction bits and
// smallest normal exponent emin, with an unbounded exponent above (the caller decides
// what overflow means). x is finite; exact in double for every f32 input.
// Uses std::nearbyint, which rounds ties to even in the default rounding mode.
inline double round_to_format(double x, int man_bits, int emin) {
  if (x == 0.0) return x;
  int e2 = 0;
  std::frexp(x, &e2);  // |x| = f * 2^e2, f in [0.5, 1): the leading bit has weight 2^(e2-1)
  int exponent = e2 - 1;
  if (exponent < emin) exponent = emin;  // subnormal range: a fixed quantum
  const double quantum = std::ldexp(1.0, exponent - man_bits);
  return std::nearbyint(x / quantum) * quantum;
}

}  // namespace latentserve::test
