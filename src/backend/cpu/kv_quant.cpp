#include "backend/cpu/kv_quant.h"

#include <immintrin.h>

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

// out[i] = e4m3(codes[i]) * scale, i < n. Eight codes at a time through F16C: e4m3fn
// S.EEEE.MMM moved to f16 bits S.0EEEE.MMM0000000 is the same number times 2^-8 (exponent
// bias 15 instead of 7), subnormals included (f16's M/8 * 2^-14 is e4m3's M * 2^-9 times
// 2^-8), and vcvtph2ps widens it exactly; so out = f16 * (256 * scale), one exact product.
// The NaN codes (S.1111.111) are given an f16 NaN. Building the f32 bits directly instead
// would make e4m3 subnormals f32 subnormals, whose products take microcode assists (that
// version was 3.5x slower). The tail goes through the 256-entry table.
void decode_e4m3(const unsigned char* codes, int64_t n, float scale, float* out) {
  const float factor = scale * 256.0f;  // scale <= 2^119: finite
  int64_t i = 0;
  const __m128i sign = _mm_set1_epi16(0x80), magnitude = _mm_set1_epi16(0x7f), f16_nan = _mm_set1_epi16(0x7e00);
  const __m256 f = _mm256_set1_ps(factor);
  for (; i + 8 <= n; i += 8) {
    const __m128i w = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + i)));
    const __m128i mag = _mm_and_si128(w, magnitude);
    __m128i h = _mm_or_si128(_mm_slli_epi16(_mm_and_si128(w, sign), 8), _mm_slli_epi16(mag, 7));
    h = _mm_or_si128(h, _mm_and_si128(_mm_cmpeq_epi16(mag, magnitude), f16_nan));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_cvtph_ps(h), f));
  }
  for (; i < n; ++i) out[i] = kFp8Table[codes[i]] * scale;
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

void dequantize_rows(const KvRows& rows, int64_t slot0, int64_t n_rows, int64_t begin, int64_t n, float* out) {
  assert(begin >= 0 && begin + n <= rows.row_elements);
  switch (rows.dtype) {
    case DType::F32:
      for (int64_t j = 0; j < n_rows; ++j) std::memcpy(out + j * n, rows.row(slot0 + j) + begin * 4, size_t(n) * 4);
      return;
    case DType::BF16:
      for (int64_t j = 0; j < n_rows; ++j) {
        const unsigned char* row = rows.row(slot0 + j) + begin * 2;
        for (int64_t i = 0; i < n; ++i) out[j * n + i] = bf16_bits_to_f32(load_u16(row + i * 2));
      }
      return;
    case DType::F8_E4M3: {
      const int64_t end = begin + n, fp8_end = std::min(end, rows.fp8_elements), ge = rows.scale_group_elements;
      const int64_t bs = rows.block_size_tokens;
      for (int64_t j = 0; j < n_rows;) {
        // the rows of one block share their scales
        const int64_t block = (slot0 + j) / bs, rows_here = std::min(n_rows - j, (block + 1) * bs - (slot0 + j));
        for (int64_t i = begin; i < fp8_end;) {  // the fp8 part, a scale group at a time
          const int64_t group = i / ge, group_end = std::min(fp8_end, (group + 1) * ge);
          const float s = rows.scale(block, group);
          for (int64_t jj = j; jj < j + rows_here; ++jj)
            decode_e4m3(rows.row(slot0 + jj) + i, group_end - i, s, out + jj * n + (i - begin));
          i = group_end;
        }
        for (int64_t jj = j; jj < j + rows_here; ++jj) {  // the bf16 tail (MLA k_pe)
          const unsigned char* tail = rows.row(slot0 + jj) + rows.fp8_elements;
          for (int64_t i = std::max(begin, rows.fp8_elements); i < end; ++i)
            out[jj * n + i - begin] = bf16_bits_to_f32(load_u16(tail + (i - rows.fp8_elements) * 2));
        }
        j += rows_here;
      }
      return;
    }
    default: assert(false && "KV rows are F32, BF16 or F8_E4M3");
  }
}

void dequantize_row(const KvRows& rows, int64_t slot, int64_t begin, int64_t n, float* out) {
  dequantize_rows(rows, slot, 1, begin, n, out);
}

float fp8_pow2_scale(float amax, float headroom) {
  if (!(amax > 0.0f)) return 0.0f;
  const double target =
      std::min(double(amax) * double(headroom) / double(kFp8E4M3Max), std::ldexp(1.0, kFp8MaxScaleExp));
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
