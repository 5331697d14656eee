#pragma once
// OCP 8-bit floating point (OFP8, "OCP 8-bit Floating Point Specification" v1.0):
//
//   e4m3fn  S.EEEE.MMM  bias 7   no infinities; NaN only S.1111.111; max finite 448;
//                                min normal 2^-6, min subnormal 2^-9
//   e5m2    S.EEEEE.MM  bias 15  IEEE-like: S.11111.00 = inf, S.11111.{01,10,11} = NaN;
//                                max finite 57344; min normal 2^-14, min subnormal 2^-16
//
// Encoding from f32 rounds to nearest, ties to even, through the subnormal range.
// What happens beyond the largest finite value is the spec's "saturation mode":
//
//   input                     e4m3 (always SAT)   e5m2 SAT (default)   e5m2 non-SAT
//   NaN                       NaN (S.1111.111)    NaN (S.11111.11)     NaN
//   ±inf                      ±448                ±57344               ±inf
//   finite, rounds past max   ±448                ±57344               ±inf
//
// e4m3 is only offered saturating: its non-saturating mode turns overflow into NaN,
// and the KV cache must never produce NaN from finite input. Saturating e4m3 also
// maps ±inf to ±max (as CUDA's __NV_SATFINITE does) rather than to NaN: a KV entry
// that overflowed f32 is clamped like any other large value. NaN keeps its sign.
#include <cstdint>

namespace latentserve {

inline constexpr float kFp8E4M3Max = 448.0f;
inline constexpr float kFp8E5M2Max = 57344.0f;

uint8_t f32_to_fp8_e4m3(float value);  // saturating
float fp8_e4m3_to_f32(uint8_t bits);

uint8_t f32_to_fp8_e5m2(float value);         // saturating: overflow and ±inf -> ±57344
uint8_t f32_to_fp8_e5m2_nonsat(float value);  // IEEE-like: overflow and ±inf -> ±inf
float fp8_e5m2_to_f32(uint8_t bits);

}  // namespace latentserve
