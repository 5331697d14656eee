#pragma once
// KV cache element formats on the CPU and the conversions between them and f32.
//
// KvRows describes how one layer's K rows, V rows or MLA latent rows are stored, slot-major
// (slot s = block * block_size_tokens + offset), in one of three element types:
//
//   F32       row_elements floats, as computed;
//   BF16      row_elements bfloat16 (round to nearest even, saturating at ±max bf16);
//   F8_E4M3   OCP e4m3fn of x / scale (round to nearest even, saturating at ±448): elements
//             [0, fp8_elements) are one byte each; elements [fp8_elements, row_elements) follow
//             as bf16 (MLA's k_pe when it is kept in bf16 as FlashMLA does; none otherwise).
//
// FP8 scales. The fp8 part of a row is cut into scale groups of scale_group_elements (a KV
// head; for the MLA latent a tile of c_kv, and k_pe as a group of its own when it is fp8).
// Element i of a row in block b is stored as e4m3(x / s), s = scales[b * scale_block_stride +
// (i / scale_group_elements) * scale_group_stride]:
//   per-tensor  block stride 0, group stride 0   one scale per layer (for K, and one for V)
//   per-head    block stride 0, group stride 1   one per layer per group
//   per-block   block stride n_groups, stride 1  one per KV block per group
// Scales are powers of two, so x / s and re-scaling by a ratio of scales are exact in f32.
// A scale of 0 means "nothing non-zero written yet"; its group's codes are all zero.
#include <cstdint>
#include <cstring>

#include "core/dtype.h"

namespace latentserve::cpu {

struct KvRows {
  const void* data = nullptr;  // slot s's row starts at data + s * row_bytes
  int64_t row_bytes = 0;
  int64_t row_elements = 0;
  int64_t block_size_tokens = 0;  // slot s lies in block s / block_size_tokens (per-block scales)
  DType dtype = DType::F32;       // F32, BF16 or F8_E4M3
  // F8_E4M3 only
  int64_t fp8_elements = 0;  // elements [fp8_elements, row_elements) are bf16
  const float* scales = nullptr;
  int64_t scale_block_stride = 0;
  int64_t scale_group_stride = 0;
  int64_t scale_group_elements = 1;

  // Plain f32 rows, row_elements apart.
  static KvRows f32(const float* data, int64_t row_elements, int64_t block_size_tokens);

  const unsigned char* row(int64_t slot) const { return static_cast<const unsigned char*>(data) + slot * row_bytes; }
  float scale(int64_t block, int64_t group) const {
    return scales[block * scale_block_stride + group * scale_group_stride];
  }
};

// Bytes of one row of `row_elements` in `dtype` (fp8_elements of them e4m3 when F8_E4M3).
int64_t kv_row_bytes(DType dtype, int64_t row_elements, int64_t fp8_elements);

// out[j * n + i] = f32 value of element begin + i of slot (slot0 + j)'s row, i < n, j < n_rows.
// This is how quantised rows are read: the attention kernel calls it per tile (the rows of one
// KV block) into a small per-thread buffer.
void dequantize_rows(const KvRows& rows, int64_t slot0, int64_t n_rows, int64_t begin, int64_t n, float* out);
void dequantize_row(const KvRows& rows, int64_t slot, int64_t begin, int64_t n, float* out);  // n_rows = 1

// e4m3 code -> f32 (the 256-entry table; NaN codes decode to NaN).
const float* fp8_e4m3_table();

// The power-of-two scale for a group whose largest finite magnitude is amax, with
// `headroom`: the smallest 2^e with amax * headroom / 2^e <= 448, e clamped to
// [kFp8MinScaleExp, kFp8MaxScaleExp] so that 1 / scale and 448 * scale are finite.
// amax == 0 gives 0 (no scale yet).
inline constexpr int kFp8MinScaleExp = -120;
inline constexpr int kFp8MaxScaleExp = 119;
float fp8_pow2_scale(float amax, float headroom);

// The magnitude that sets a group's scale: max |x|, NaN ignored, ±inf counted as the largest
// finite f32 (so an overflowed entry saturates like any other large value, as core/fp8.h does).
float fp8_amax(const float* x, int64_t n);

// codes[i] = e4m3(x[i] / scale), saturating; scale is a power of two > 0 (or 0 when every
// x[i] is ±0 or NaN). Returns how many x[i] saturated (|x / scale| rounded past 448).
int64_t quantize_fp8(const float* x, int64_t n, float scale, unsigned char* codes);

// bf16 that saturates: finite values that would round past the largest bf16 store ±max bf16
// (plain rounding makes them ±inf). NaN stays NaN, ±inf stays ±inf.
uint16_t f32_to_bf16_saturating(float x);
inline float bf16_bits_to_f32(uint16_t bits) {
  const uint32_t u = uint32_t(bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace latentserve::cpu
