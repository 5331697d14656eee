#include "backend/cpu/kv_quant.h"

#include <algorithm>
#include <array>
#include <cassert>
#include <cmath>
#include <limits>

#include "core/bf16.h"
#include "core/fp8.h"

namespace latentserve::cpu {

namespace {

const std::array<float, 256> kFp8Table = [] {
  std::array<float, 256> t{};
  for (int c = 0; c < 256; ++c) t[size_t(c)] = fp8_e4m3_to_f32(uint8_t(c));
  return t;
}();

// out[i] = e4m3(codes[i]) * scale, i < n, without a table and in a form gcc vectorises: the
// sign goes to bit 31, exponent and mantissa to f32 bits 20..26, and the factor 2^(127 - 7)
// = 2^120 rebiases the exponent. Subnormal codes land on f32 subnormals (mantissa * 2^-126 / 8)
// which the same factor turns into mantissa * 2^-9, as e4m3 has them. The NaN codes (S.1111.111)
// get all-ones exponent bits and a non-zero mantissa: NaN. Both products are exact.
void decode_e4m3(const unsigned char* __restrict codes, int64_t n, float scale, float* __restrict out) {
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t c = codes[i];
    const uint32_t nan_bits = (c & 0x7fu) == 0x7fu ? 0x7fc00000u : 0u;
    const uint32_t bits = ((c & 0x80u) << 24) | ((c & 0x7fu) << 20) | nan_bits;
    float f;
    std::memcpy(&f, &bits, 4);
    out[i] = f * 0x1p120f * scale;
  }
}

inline uint16_t load_u16(const unsigned char* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

}  // namespace

KvRows KvRows::f32(const float* data, int64_t row_elements, int64_t block_size_tokens) {
  KvRows r;
  r.data = data;
  r.row_bytes = row_elements * 4;
  r.row_elements = row_elements;
  r.block_size_tokens = block_size_tokens;
  r.dtype = DType::F32;
  return r;
}

int64_t kv_row_bytes(DType dtype, int64_t row_elements, int64_t fp8_elements) {
  switch (dtype) {
    case DType::F32: return row_elements * 4;
    case DType::BF16: return row_elements * 2;
    case DType::F8_E4M3: return fp8_elements + (row_elements - fp8_elements) * 2;
    default: assert(false && "KV rows are F32, BF16 or F8_E4M3"); return 0;
  }
}

const float* fp8_e4m3_table() { return kFp8Table.data(); }

void dequantize_row(const KvRows& rows, int64_t slot, int64_t begin, int64_t n, float* out) {
  assert(begin >= 0 && begin + n <= rows.row_elements);
  const unsigned char* row = rows.row(slot);
  switch (rows.dtype) {
    case DType::F32:
      std::memcpy(out, row + begin * 4, size_t(n) * 4);
      return;
    case DType::BF16:
      for (int64_t i = 0; i < n; ++i) out[i] = bf16_bits_to_f32(load_u16(row + (begin + i) * 2));
      return;
    case DType::F8_E4M3: {
      const int64_t end = begin + n, fp8_end = std::min(end, rows.fp8_elements);
      const int64_t block = slot / rows.block_size_tokens, ge = rows.scale_group_elements;
      // the fp8 part, one scale group at a time: out = e4m3(code) * scale (both exact products)
      for (int64_t i = begin; i < fp8_end;) {
        const int64_t group = i / ge, group_end = std::min(fp8_end, (group + 1) * ge);
        decode_e4m3(row + i, group_end - i, rows.scale(block, group), out + (i - begin));
        i = group_end;
      }
      // the bf16 tail (MLA k_pe)
      const unsigned char* tail = row + rows.fp8_elements;
      for (int64_t i = std::max(begin, rows.fp8_elements); i < end; ++i)
        out[i - begin] = bf16_bits_to_f32(load_u16(tail + (i - rows.fp8_elements) * 2));
      return;
    }
    default:
      assert(false && "KV rows are F32, BF16 or F8_E4M3");
  }
}

float fp8_pow2_scale(float amax, float headroom) {
  if (!(amax > 0.0f)) return 0.0f;
  const double target = std::min(double(amax) * double(headroom) / double(kFp8E4M3Max),
                                 std::ldexp(1.0, kFp8MaxScaleExp));
  int e = 0;
  const double m = std::frexp(target, &e);  // target = m * 2^e, m in [0.5, 1)
  if (m == 0.5) --e;                        // already a power of two
  e = std::clamp(e, kFp8MinScaleExp, kFp8MaxScaleExp);
  return std::ldexp(1.0f, e);
}

float fp8_amax(const float* x, int64_t n) {
  constexpr float kMax = std::numeric_limits<float>::max();
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float a = std::fabs(x[i]);
    if (a > amax) amax = a;  // NaN fails the test
  }
  return std::min(amax, kMax);  // ±inf counts as the largest finite value
}

int64_t quantize_fp8(const float* x, int64_t n, float scale, unsigned char* codes) {
  if (scale == 0.0f) {  // every x[i] is ±0 or NaN
    for (int64_t i = 0; i < n; ++i) codes[i] = f32_to_fp8_e4m3(x[i]);
    return 0;
  }
  const float inv = 1.0f / scale;  // exact: scale is a power of two in [2^-120, 2^119]
  int64_t saturated = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float y = x[i] * inv;
    codes[i] = f32_to_fp8_e4m3(y);
    saturated += std::fabs(y) > 464.0f;  // 448 + half its quantum (32; the tie rounds to even 448)
  }
  return saturated;
}

uint16_t f32_to_bf16_saturating(float x) {
  const uint16_t bits = bf16::from_f32(x).bits;
  if ((bits & 0x7fffu) == 0x7f80u && std::isfinite(x)) return uint16_t((bits & 0x8000u) | 0x7f7fu);
  return bits;
}

}  // namespace latentserve::cpu
