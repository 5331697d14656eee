#pragma once
// RoPE on q and k in place, and the store of each new token's K and V into its paged slot,
// in one kernel (one CTA per token). Same rotation as backend/cpu/rope.h: angle =
// float(position) * inv_freq[i] in f32, precise sincosf (not __sinf), cos and sin each times
// attention_factor, the rotation a*c - b*s, b*c + a*s in f32 without FMA contraction (as the
// CPU computes it); neox pairs (i, i + rotary_dim/2) or interleaved (2i, 2i+1); the head's last
// head_dim - rotary_dim elements pass through.
//
// The cache gets the rotated f32 values (not the bf16 written back into qkv): bf16 rounds to
// nearest even and saturates at +-max bf16 (cpu::f32_to_bf16_saturating); e4m3 stores
// sat(x / scale) with the layer's static scale (a scale of 0, uncalibrated, stores e4m3(x) as
// cpu::quantize_fp8 does).
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/kv_cache_layout.h"

namespace latentserve::cuda {

struct RopeKvWriteParams {
  void* qkv;                 // bf16 [n_tokens, (n_head + 2*n_head_kv) * head_dim]: [q | k | v] per token; q, k rotated in place
  int64_t qkv_token_stride;  // elements
  const int32_t* positions;     // [n_tokens] (device)
  const int64_t* slot_mapping;  // [n_tokens] (device); -1 = padding: K/V not written (q still rotated)
  DeviceKvLayer kv;          // one layer (kv_cache_layout.h): k, v [n_slots, n_head_kv, head_dim]
  const float* inv_freq;     // [rows, rotary_dim / 2] (device), from compute_rope_tables (model/rope_config.h)
  // [n_tokens] (device): the row of inv_freq each token rotates with (dynamic NTK: one table per
  // sequence length; the caller keeps every index < rows); null: row 0 for every token.
  const int32_t* inv_freq_rows = nullptr;
  float attention_factor;    // cos/sin multiplier (yarn), 1 otherwise
  int n_tokens, n_head, n_head_kv, head_dim, rotary_dim;  // rotary_dim even <= head_dim
  bool interleaved;          // false: neox pairs (i, i + rotary_dim/2); true: pairs (2i, 2i+1)
  bool apply_rope = true;    // false: qkv is already rotated (the write half only)
  bool write_kv = true;      // false: the rotation half only
};

// head_dim <= kRopeMaxHeadDim (the per-token cos/sin table lives in shared memory).
inline constexpr int kRopeMaxHeadDim = 1024;
// n_head_kv <= kKvMaxScaleGroups (calibration keeps one amax per group in shared memory).
inline constexpr int kKvMaxScaleGroups = 512;

void rope_and_write_kv(const RopeKvWriteParams& p, cudaStream_t s);
// The checks rope_and_write_kv makes on p (also made by the gemv that does the same work in its
// epilogue, gemv.h): throws Error, prefixed with `who`, naming the field that is wrong.
void validate_rope_kv_write(const char* who, const RopeKvWriteParams& p);

// FP8 static scales (per tensor: one K and one V scale, DeviceKvLayer::scale_head_stride 0;
// per head: n_head_kv each, stride 1), calibrated ON THE DEVICE from this batch, as
// CpuKvCache::write_fp8 calibrates (backend/cpu/cpu_kv_cache.cpp): every K and V scale group
// whose scale is still 0 gets fp8_pow2_scale(amax, headroom) = the smallest power of two >=
// amax * headroom / 448 (exponent clamped to [-120, 119]), amax = max |x| over this batch's
// non-padding tokens (slot >= 0) of the group (NaN ignored, inf counted as the largest finite
// float); amax 0 leaves it 0. Groups already calibrated are never changed. Two small kernels,
// no scratch memory, no host round trip (graph-capturable).
//
// This one measures exactly the values rope_and_write_kv(p) will store: with p.apply_rope it
// rotates K on the fly (f32, the same arithmetic), so call it BEFORE rope_and_write_kv(p), on
// the unrotated qkv; with !p.apply_rope it reads K as it stands in qkv.
void calibrate_kv_scales(const RopeKvWriteParams& p, float headroom, cudaStream_t s);

// The same calibration for a caller that has ALREADY rotated qkv (rope_and_write_kv with
// write_kv = false, then this, then rope_and_write_kv with apply_rope = false): K and V are
// read as they stand in qkv whatever p.apply_rope says. amax_scratch is not needed any more
// (may be null); the parameter stays so existing callers compile.
void calibrate_kv_scales(const RopeKvWriteParams& p, float headroom, unsigned* amax_scratch, cudaStream_t s);

}  // namespace latentserve::cuda
