#pragma once
// bfloat16: the top 16 bits of an IEEE f32. Conversion from f32 rounds to nearest even;
// NaN stays NaN (quiet).
#include <bit>
#include <cstdint>

namespace latentserve {

struct bf16 {
  uint16_t bits = 0;

  static constexpr bf16 from_bits(uint16_t b) { bf16 v; v.bits = b; return v; }

  static constexpr bf16 from_f32(float f) {
    uint32_t u = std::bit_cast<uint32_t>(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return from_bits(uint16_t((u >> 16) | 0x0040u));  // NaN -> quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
    return from_bits(uint16_t(u >> 16));
  }

  constexpr float to_f32() const { return std::bit_cast<float>(uint32_t(bits) << 16); }
};

inline constexpr float to_f32(bf16 v) { return v.to_f32(); }

}  // namespace latentserve
