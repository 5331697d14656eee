#pragma once
// IEEE half precision through the compiler's _Float16 (g++ 12 on x86-64).
#include <cstdint>
#include <bit>

namespace latentserve {

using f16 = _Float16;

inline float f16_bits_to_f32(uint16_t bits) { return float(std::bit_cast<_Float16>(bits)); }
inline uint16_t f32_to_f16_bits(float f) { return std::bit_cast<uint16_t>(_Float16(f)); }

}  // namespace latentserve
