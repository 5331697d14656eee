#pragma once
// The device arithmetic of RoPE and of the K/V store into a paged slot (rope_kv_write.h says
// what it computes), shared by the RoPE kernel (rope_kv_write.cu) and the q|k|v gemv that
// does the same work in its epilogue (gemv.h, GemvFusion::rope_kv). Both must give the same
// bits, so both call these.
#include <cuda_bf16.h>

#include <cstdint>

#include "backend/cuda/device_math.cuh"
#include "backend/cuda/rope_kv_write.h"

namespace latentserve::cuda::rope_math {

// Token t's cos and sin of rotated pair i, times attention_factor: angle = float(position) *
// inv_freq[row][i] in f32, precise sincosf, no contraction (the calibration pass, the RoPE kernel
// and the gemv epilogue get the same bits).
__device__ __forceinline__ float2 cos_sin(const RopeKvWriteParams& p, float position, float inv_freq) {
  float s, c;
  sincosf(__fmul_rn(position, inv_freq), &s, &c);
  return make_float2(__fmul_rn(c, p.attention_factor), __fmul_rn(s, p.attention_factor));
}

// Token t's row of inv_freq [rows, rotary_dim / 2].
__device__ __forceinline__ const float* inv_freq_row(const RopeKvWriteParams& p, int t) {
  return p.inv_freq + (p.inv_freq_rows ? int64_t(p.inv_freq_rows[t]) * (p.rotary_dim / 2) : 0);
}

// Rotated pair (a, b) -> (a c - b s, b c + a s), f32 without FMA (as backend/cpu/rope.cpp).
__device__ __forceinline__ float2 rotate(float a, float b, float c, float s) {
  return make_float2(__fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s)), __fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s)));
}

// Element offsets of pair i inside a head.
__device__ __forceinline__ int2 pair_of(int i, int half, bool interleaved) {
  return interleaved ? make_int2(2 * i, 2 * i + 1) : make_int2(i, i + half);
}

// bf16 that saturates finite overflow to +-max bf16 (cpu::f32_to_bf16_saturating).
__device__ __forceinline__ __nv_bfloat16 bf16_saturating(float x) {
  __nv_bfloat16 b = __float2bfloat16_rn(x);
  const unsigned short bits = __bfloat16_as_ushort(b);
  if ((bits & 0x7fffu) == 0x7f80u && isfinite(x)) b = __ushort_as_bfloat16((unsigned short)((bits & 0x8000u) | 0x7f7fu));
  return b;
}

// Stores one K (or V) element of KV head `head` at element `index` of the cache: bf16
// saturating, or e4m3 of x / scale (scale 0, uncalibrated: e4m3(x), as cpu::quantize_fp8).
struct KvStore {
  void* base;
  KvDtype dtype;
  const float* scale;
  int scale_head_stride;
  __device__ __forceinline__ void operator()(int64_t index, int head, float x) const {
    if (dtype == KvDtype::Bf16) {
      static_cast<__nv_bfloat16*>(base)[index] = bf16_saturating(x);
    } else {
      const float sc = scale[head * scale_head_stride];
      static_cast<unsigned char*>(base)[index] = f32_to_fp8_e4m3(sc == 0.0f ? x : __fmul_rn(x, __frcp_rn(sc)));
    }
  }
};
__device__ __forceinline__ KvStore k_store(const DeviceKvLayer& kv) { return {kv.k, kv.dtype, kv.k_scale, kv.scale_head_stride}; }
__device__ __forceinline__ KvStore v_store(const DeviceKvLayer& kv) { return {kv.v, kv.dtype, kv.v_scale, kv.scale_head_stride}; }

// Where a slot's K (or V) rows live: kv_slot(p, slot)(h) is the element offset of KV head h's
// row (head_dim elements) in this layer's cache; the slot's block and offset are found once.
struct KvSlot {
  int64_t head0, head_stride;  // elements
  __device__ __forceinline__ int64_t operator()(int h) const { return head0 + h * head_stride; }
};
__device__ __forceinline__ KvSlot kv_slot(const RopeKvWriteParams& p, int64_t slot) {
  return {kv_slot_row_index(p.kv.layout, slot, 0, p.n_head_kv, p.kv.block_size) * p.head_dim,
          kv_head_row_stride(p.kv.layout, p.kv.block_size) * p.head_dim};
}

}  // namespace latentserve::cuda::rope_math
