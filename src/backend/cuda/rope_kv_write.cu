#include "backend/cuda/rope_kv_write.h"

#include <cfloat>

#include "backend/cuda/device_math.cuh"
#include "backend/cuda/kernel_error.h"
#include "backend/cuda/pdl_launch.cuh"
#include "backend/cuda/rope_math.cuh"

namespace latentserve::cuda {
namespace {

constexpr int kThreads = 128;
// q+k heads rotated per CTA: a decode step (one token) spreads over (n_head + n_head_kv) / 4 CTAs
// instead of one CTA walking every head (latency-bound: 16.7 us per layer at Llama-3-8B, ncu).
constexpr int kHeadsPerCta = 4;
constexpr int kMinScaleExp = -120, kMaxScaleExp = 119;  // backend/cpu/kv_quant.h
constexpr float kE4M3Max = 448.0f;

using rope_math::pair_of;
using rope_math::rotate;

// This token's cos and sin per rotated pair (times attention_factor), into smem.
__device__ void angle_table(const RopeKvWriteParams& p, int t, float* cos_t, float* sin_t) {
  const float position = float(p.positions[t]);
  const float* inv_freq = rope_math::inv_freq_row(p, t);
  for (int i = threadIdx.x; i < p.rotary_dim / 2; i += blockDim.x) {
    const float2 cs = rope_math::cos_sin(p, position, inv_freq[i]);
    cos_t[i] = cs.x;
    sin_t[i] = cs.y;
  }
}

// grid: (n_tokens, ceil((n_head + n_head_kv) / kHeadsPerCta)). CTA (t, y) rotates the pairs of
// q|k heads [y * kHeadsPerCta, +kHeadsPerCta) of token t (k pairs also go to the cache), then
// stores the k pass-through part and v of the KV heads h = y, y + gridDim.y, ...; the two sets
// of elements are disjoint, so the CTAs of a token need no ordering between them.
__global__ void __launch_bounds__(kThreads) rope_kv_write_kernel(RopeKvWriteParams p) {
  allow_dependent_launch();  // the attention kernel may launch and stage what does not depend on us
  wait_for_previous_kernel();
  __shared__ float cos_t[kRopeMaxHeadDim / 2], sin_t[kRopeMaxHeadDim / 2];
  const int t = blockIdx.x;
  __nv_bfloat16* row = static_cast<__nv_bfloat16*>(p.qkv) + int64_t(t) * p.qkv_token_stride;
  const int half = p.rotary_dim / 2, hd = p.head_dim, nh = p.n_head, nkv = p.n_head_kv;
  const int64_t slot = p.write_kv ? p.slot_mapping[t] : -1;
  const rope_math::KvSlot kv_row = rope_math::kv_slot(p, slot >= 0 ? slot : 0);  // kv_row(h): KV head h's row
  const rope_math::KvStore store_k = rope_math::k_store(p.kv), store_v = rope_math::v_store(p.kv);
  const bool rotate_here = p.apply_rope && half > 0;
  if (rotate_here) {
    angle_table(p, t, cos_t, sin_t);
    __syncthreads();
    // This CTA's heads of the q heads then k heads: [head0, head1).
    const int head0 = blockIdx.y * kHeadsPerCta, head1 = min(nh + nkv, head0 + kHeadsPerCta);
    for (int u = threadIdx.x; u < (head1 - head0) * half; u += kThreads) {
      const int head = head0 + u / half, i = u % half;
      const int2 e = pair_of(i, half, p.interleaved);
      __nv_bfloat16* x = row + int64_t(head) * hd;
      const float2 r = rotate(bf16_to_f32(x[e.x]), bf16_to_f32(x[e.y]), cos_t[i], sin_t[i]);
      x[e.x] = __float2bfloat16_rn(r.x);
      x[e.y] = __float2bfloat16_rn(r.y);
      if (head >= nh && slot >= 0) {
        const int kh = head - nh;
        store_k(kv_row(kh) + e.x, kh, r.x);
        store_k(kv_row(kh) + e.y, kh, r.y);
      }
    }
  }
  if (slot < 0) return;
  // K elements not rotated here (pass-through, or all of K when the rotation was done before), and V.
  const __nv_bfloat16* k = row + int64_t(nh) * hd;
  const __nv_bfloat16* v = k + int64_t(nkv) * hd;
  // KV heads h with h % gridDim.y == blockIdx.y are this CTA's for V and K's unrotated elements.
  const int k_from = rotate_here ? p.rotary_dim : 0;
  for (int h = blockIdx.y; h < nkv; h += gridDim.y) {
    for (int e = k_from + threadIdx.x; e < hd; e += kThreads)
      store_k(kv_row(h) + e, h, bf16_to_f32(k[int64_t(h) * hd + e]));
    for (int e = threadIdx.x; e < hd; e += kThreads)
      store_v(kv_row(h) + e, h, bf16_to_f32(v[int64_t(h) * hd + e]));
  }
}

// ---- calibration ----
// The scale arrays double as the accumulators: a group's scale is 0 (uncalibrated), > 0
// (calibrated: never touched), or, between the two kernels, -amax (sign bit set). As unsigned
// bits, a larger negative float is a larger integer, so atomicMax on the bits of -amax keeps
// the largest magnitude, and 0 (+0.0) is below every negative.

__device__ __forceinline__ float amax_of(float x) { return fminf(fabsf(x), FLT_MAX); }  // NaN -> NaN (skipped)

// grid: n_tokens. smem: per group amax bits for K then V; skip groups already calibrated.
__global__ void __launch_bounds__(kThreads) kv_amax_kernel(RopeKvWriteParams p, bool rotate_k, int n_groups) {
  __shared__ float cos_t[kRopeMaxHeadDim / 2], sin_t[kRopeMaxHeadDim / 2];
  __shared__ unsigned amax[2 * kKvMaxScaleGroups];
  __shared__ int any_open;
  const int t = blockIdx.x;
  if (p.slot_mapping[t] < 0) return;  // uniform over the CTA
  const int hd = p.head_dim, nkv = p.n_head_kv, half = p.rotary_dim / 2;
  const int group_div = n_groups == 1 ? nkv * hd : hd;  // element -> group
  unsigned* k_bits = reinterpret_cast<unsigned*>(p.kv.k_scale);
  unsigned* v_bits = reinterpret_cast<unsigned*>(p.kv.v_scale);
  if (threadIdx.x == 0) any_open = 0;
  __syncthreads();
  for (int g = threadIdx.x; g < 2 * n_groups; g += kThreads) {
    amax[g] = 0u;
    const unsigned bits = g < n_groups ? k_bits[g] : v_bits[g - n_groups];
    if (bits == 0u || (bits & 0x80000000u)) any_open = 1;  // uncalibrated, or being calibrated by this call
  }
  if (rotate_k && half > 0) angle_table(p, t, cos_t, sin_t);
  __syncthreads();
  if (!any_open) return;
  const __nv_bfloat16* k = static_cast<const __nv_bfloat16*>(p.qkv) + int64_t(t) * p.qkv_token_stride +
                           int64_t(p.n_head) * hd;
  const __nv_bfloat16* v = k + int64_t(nkv) * hd;
  for (int e = threadIdx.x; e < nkv * hd; e += kThreads) {
    const int h = e / hd, i = e - h * hd, g = e / group_div;
    float x = bf16_to_f32(k[e]);
    if (rotate_k && i < p.rotary_dim) {  // this element's rotated value, as the write kernel computes it
      const int pair = p.interleaved ? i / 2 : (i < half ? i : i - half);
      const int2 pe = pair_of(pair, half, p.interleaved);
      const float2 r = rotate(bf16_to_f32(k[int64_t(h) * hd + pe.x]), bf16_to_f32(k[int64_t(h) * hd + pe.y]),
                              cos_t[pair], sin_t[pair]);
      x = i == pe.x ? r.x : r.y;
    }
    const float ak = amax_of(x), av = amax_of(bf16_to_f32(v[e]));
    if (ak > 0.0f) atomicMax(&amax[g], __float_as_uint(ak));
    if (av > 0.0f) atomicMax(&amax[n_groups + g], __float_as_uint(av));
  }
  __syncthreads();
  for (int g = threadIdx.x; g < 2 * n_groups; g += kThreads) {
    if (amax[g] == 0u) continue;
    unsigned* target = g < n_groups ? &k_bits[g] : &v_bits[g - n_groups];
    const unsigned bits = *target;
    if (bits != 0u && !(bits & 0x80000000u)) continue;  // calibrated before this call
    atomicMax(target, amax[g] | 0x80000000u);           // bits of -amax
  }
}

// cpu::fp8_pow2_scale in the same double arithmetic.
__device__ float pow2_scale(float amax, float headroom) {
  if (!(amax > 0.0f)) return 0.0f;
  const double target = fmin(double(amax) * double(headroom) / double(kE4M3Max), ldexp(1.0, kMaxScaleExp));
  int e = 0;
  const double m = frexp(target, &e);  // target = m * 2^e, m in [0.5, 1)
  if (m == 0.5) --e;                   // already a power of two
  e = max(kMinScaleExp, min(kMaxScaleExp, e));
  return ldexpf(1.0f, e);
}

// One CTA: every group still holding -amax gets its power-of-two scale.
__global__ void set_scales_kernel(float* k_scale, float* v_scale, int n_groups, float headroom) {
  for (int g = threadIdx.x; g < 2 * n_groups; g += blockDim.x) {
    float* scale = g < n_groups ? &k_scale[g] : &v_scale[g - n_groups];
    const float value = *scale;
    if (__float_as_uint(value) & 0x80000000u) *scale = pow2_scale(-value, headroom);
  }
}

}  // namespace

void validate_rope_kv_write(const char* name, const RopeKvWriteParams& p) {
  if (!p.qkv) kernel_fail(name, ": qkv is null (expected a device pointer to bf16 [n_tokens, qkv_token_stride])");
  if (!p.positions) kernel_fail(name, ": positions is null (expected a device pointer to int32 [n_tokens])");
  if (!p.slot_mapping) kernel_fail(name, ": slot_mapping is null (expected a device pointer to int64 [n_tokens])");
  if (p.apply_rope && p.rotary_dim > 0 && !p.inv_freq)
    kernel_fail(name, ": inv_freq is null (expected a device pointer to f32 [rotary_dim / 2])");
  if (p.write_kv && !p.kv.k) kernel_fail(name, ": kv.k is null (expected this layer's K cache)");
  if (p.write_kv && !p.kv.v) kernel_fail(name, ": kv.v is null (expected this layer's V cache)");
  if (p.write_kv && p.kv.layout == KvLayout::HeadMajor && p.kv.block_size <= 0)
    kernel_fail(name, ": kv.block_size must be > 0 for the HeadMajor layout (it places a slot's rows), found ", p.kv.block_size);
  if (p.n_tokens < 0) kernel_fail(name, ": n_tokens must be >= 0, found ", p.n_tokens);
  if (p.n_head <= 0) kernel_fail(name, ": n_head must be > 0, found ", p.n_head);
  if (p.n_head_kv <= 0) kernel_fail(name, ": n_head_kv must be > 0, found ", p.n_head_kv);
  if (p.n_head % p.n_head_kv != 0)
    kernel_fail(name, ": n_head (", p.n_head, ") must be a multiple of n_head_kv (", p.n_head_kv, ")");
  if (p.head_dim <= 0 || p.head_dim > kRopeMaxHeadDim)
    kernel_fail(name, ": head_dim must be in [1, ", kRopeMaxHeadDim, "], found ", p.head_dim);
  if (p.rotary_dim < 0 || p.rotary_dim % 2 != 0 || p.rotary_dim > p.head_dim)
    kernel_fail(name, ": rotary_dim must be even and in [0, head_dim = ", p.head_dim, "], found ", p.rotary_dim);
  const int64_t width = int64_t(p.n_head + 2 * p.n_head_kv) * p.head_dim;
  if (p.qkv_token_stride < width)
    kernel_fail(name, ": qkv_token_stride must be >= (n_head + 2 n_head_kv) * head_dim = ", width, ", found ",
                p.qkv_token_stride);
  if (p.kv.dtype != KvDtype::Bf16 && p.kv.dtype != KvDtype::Fp8E4M3)
    kernel_fail(name, ": kv.dtype must be Bf16 or Fp8E4M3, found ", int(p.kv.dtype));
  if (p.kv.dtype == KvDtype::Fp8E4M3) {
    if (!p.kv.k_scale) kernel_fail(name, ": kv.k_scale is null (an fp8 KV layer needs its K scales)");
    if (!p.kv.v_scale) kernel_fail(name, ": kv.v_scale is null (an fp8 KV layer needs its V scales)");
    if (p.kv.scale_head_stride != 0 && p.kv.scale_head_stride != 1)
      kernel_fail(name, ": kv.scale_head_stride must be 0 (per tensor) or 1 (per head), found ",
                  p.kv.scale_head_stride);
  }
  if (!(p.attention_factor == p.attention_factor)) kernel_fail(name, ": attention_factor is NaN");
}

namespace {

void calibrate(const RopeKvWriteParams& p, float headroom, bool rotate_k, cudaStream_t s) {
  validate_rope_kv_write("calibrate_kv_scales", p);
  if (p.kv.dtype != KvDtype::Fp8E4M3) kernel_fail("calibrate_kv_scales: kv.dtype must be Fp8E4M3 (found Bf16)");
  if (!(headroom >= 1.0f) || headroom > 1e30f)
    kernel_fail("calibrate_kv_scales: headroom must be finite and >= 1, found ", headroom);
  if (rotate_k && p.rotary_dim > 0 && !p.inv_freq) kernel_fail("calibrate_kv_scales: inv_freq is null");
  const int n_groups = p.kv.scale_head_stride == 0 ? 1 : p.n_head_kv;
  if (n_groups > kKvMaxScaleGroups)
    kernel_fail("calibrate_kv_scales: at most ", kKvMaxScaleGroups, " scale groups (n_head_kv), found ", n_groups);
  if (p.n_tokens == 0) return;
  kv_amax_kernel<<<p.n_tokens, kThreads, 0, s>>>(p, rotate_k, n_groups);
  LS_CUDA_CHECK_LAUNCH("kv_amax_kernel");
  set_scales_kernel<<<1, 256, 0, s>>>(p.kv.k_scale, p.kv.v_scale, n_groups, headroom);
  LS_CUDA_CHECK_LAUNCH("set_scales_kernel");
}

}  // namespace

void rope_and_write_kv(const RopeKvWriteParams& p, cudaStream_t s) {
  validate_rope_kv_write("rope_and_write_kv", p);
  if (p.n_tokens == 0 || (!p.apply_rope && !p.write_kv)) return;
  const unsigned head_ctas = unsigned((p.n_head + p.n_head_kv + kHeadsPerCta - 1) / kHeadsPerCta);
  launch_pdl(rope_kv_write_kernel, dim3(unsigned(p.n_tokens), head_ctas), dim3(kThreads), 0, s, p);
  LS_CUDA_CHECK_LAUNCH("rope_kv_write_kernel");
}

void calibrate_kv_scales(const RopeKvWriteParams& p, float headroom, cudaStream_t s) {
  calibrate(p, headroom, p.apply_rope, s);
}

void calibrate_kv_scales(const RopeKvWriteParams& p, float headroom, unsigned* /*amax_scratch*/, cudaStream_t s) {
  calibrate(p, headroom, false, s);
}

}  // namespace latentserve::cuda
