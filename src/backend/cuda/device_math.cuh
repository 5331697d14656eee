#pragma once
// Small device helpers shared by the kernels: bf16 / fp8 conversions, warp reductions.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

namespace latentserve::cuda {

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

// Programmatic dependent launch: lets the next kernel on the stream (if it was launched with
// the PDL attribute, as gemv_bf16 is) start its independent prologue now; that kernel still
// waits (griddepcontrol.wait) for this one to finish before reading what it writes.
__device__ __forceinline__ void allow_dependent_launch() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }

__device__ __forceinline__ float bf16_to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }

// 8 bf16 in one 16-byte word -> 8 f32.
__device__ __forceinline__ void bf16x8_to_f32(const uint4& v, float out[8]) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(h[i]);
    out[2 * i] = f.x;
    out[2 * i + 1] = f.y;
  }
}

// SwiGLU's product in f32: silu(g) * u (activation.h; the gemv's fused epilogue, gemv.h).
__device__ __forceinline__ float silu_times(float g, float u) { return g / (1.0f + expf(-g)) * u; }

// e4m3fn byte -> f32 (hardware conversion on sm_89+).
__device__ __forceinline__ float fp8_e4m3_to_f32(unsigned char code) {
  __nv_fp8_e4m3 v;
  v.__x = code;
  return float(v);
}

// f32 -> e4m3fn, round to nearest even, saturating at ±448 (NaN stays NaN).
__device__ __forceinline__ unsigned char f32_to_fp8_e4m3(float x) {
  return __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3);
}

}  // namespace latentserve::cuda
