#pragma once
// Scalar reference for the quantised KV cache rows (backend/cpu/kv_quant.h): element
// decoding written from the layout description alone, in f64, and the error bound of the
// element formats that the tests hold the cache to.
#include <cstdint>
#include <vector>

#include "backend/cpu/kv_quant.h"

namespace latentserve::reference {

// Element `element` of slot `slot`'s row, decoded in f64 (through core/fp8 and bf16 bit
// patterns, not through cpu::dequantize_row).
double kv_element(const cpu::KvRows& rows, int64_t slot, int64_t element);

// rows[slots[i]] elements [begin, begin + n) for every i, as f32: [slots.size(), n].
std::vector<float> kv_gather(const cpu::KvRows& rows, const std::vector<int64_t>& slots, int64_t begin, int64_t n);

// Unit roundoff of the element formats: round to nearest keeps |x - x̂| <= u |x| for values in
// the normal range. e4m3 has 3 stored mantissa bits (p = 4): u = 2^-4; bf16 has 7 (p = 8): u = 2^-8.
inline constexpr double kE4M3UnitRoundoff = 0x1p-4;
inline constexpr double kBf16UnitRoundoff = 0x1p-8;

// An upper bound on |x - x̂| when x was written to (slot, element) of `rows`, x̂ what is read
// back, from the format and the element's final scale s:
//   F32 0;  BF16 u |x|;
//   F8_E4M3 (fp8 part)  |x| - 448 s when |x| > 448 s (saturation), else
//                       u |x| + 2^-9 s: u |x| for rounding in e4m3's normal range, at most
//                       2^-10 s for rounding among its subnormals (quantum 2^-9 s), and as much
//                       again, in all, for per-block re-scaling (by powers of two, which moves
//                       normal codes exactly and only rounds codes that become subnormal:
//                       2^-10 (s/2 + s/4 + ...) < 2^-10 s).
double kv_store_error_bound(const cpu::KvRows& rows, int64_t slot, int64_t element, double x);

}  // namespace latentserve::reference
