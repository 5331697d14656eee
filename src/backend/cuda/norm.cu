#include "backend/cuda/norm.h"

#include "backend/cuda/device_math.cuh"
#include "backend/cuda/kernel_error.h"
#include "backend/cuda/pdl_launch.cuh"

namespace latentserve::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kHeadWarps = 4;  // heads per CTA of rms_norm_heads

// Sum over the CTA (kThreads threads): warp shuffles, then one value per warp through smem.
__device__ float block_sum(float x) {
  __shared__ float partial[kThreads / 32];
  __shared__ float total;
  x = warp_sum(x);
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = x;
  __syncthreads();
  if (threadIdx.x < 32) {
    float v = threadIdx.x < kThreads / 32 ? partial[threadIdx.x] : 0.0f;
    v = warp_sum(v);
    if (threadIdx.x == 0) total = v;
  }
  __syncthreads();
  return total;
}

// 8 f32 -> 8 bf16 in one 16-byte word (bf16x8_to_f32 in device_math.cuh is the other way).
__device__ __forceinline__ uint4 pack8(const float* f) {
  uint4 w;
  __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&w);
#pragma unroll
  for (int j = 0; j < 4; ++j) h[j] = __floats2bfloat162_rn(f[2 * j], f[2 * j + 1]);
  return w;
}

// grid: n_rows. Vector path: units of 8 elements (2 float4 of residual, one uint4 of bf16),
// kUnits per thread kept in registers, so the row is read once and written once.
template <bool kAdd, int kUnits>
__global__ void __launch_bounds__(kThreads) rms_norm_vec_kernel(float* residual, const __nv_bfloat16* delta,
                                                                const __nv_bfloat16* weight, __nv_bfloat16* out,
                                                                int dim, float eps) {
  allow_dependent_launch();
  wait_for_previous_kernel();
  const int n_units = dim / 8;
  float4* r = reinterpret_cast<float4*>(residual + int64_t(blockIdx.x) * dim);
  const uint4* d = kAdd ? reinterpret_cast<const uint4*>(delta + int64_t(blockIdx.x) * dim) : nullptr;
  float v[kUnits][8];
  float sum = 0.0f;
#pragma unroll
  for (int j = 0; j < kUnits; ++j) {
    const int u = threadIdx.x + j * kThreads;
    if (u < n_units) {
      const float4 a = r[2 * u], b = r[2 * u + 1];
      v[j][0] = a.x; v[j][1] = a.y; v[j][2] = a.z; v[j][3] = a.w;
      v[j][4] = b.x; v[j][5] = b.y; v[j][6] = b.z; v[j][7] = b.w;
      if constexpr (kAdd) {
        float dd[8];
        bf16x8_to_f32(d[u], dd);
#pragma unroll
        for (int e = 0; e < 8; ++e) v[j][e] += dd[e];
        r[2 * u] = make_float4(v[j][0], v[j][1], v[j][2], v[j][3]);
        r[2 * u + 1] = make_float4(v[j][4], v[j][5], v[j][6], v[j][7]);
      }
#pragma unroll
      for (int e = 0; e < 8; ++e) sum += v[j][e] * v[j][e];
    }
  }
  const float inv_rms = rsqrtf(block_sum(sum) / float(dim) + eps);
  const uint4* w = reinterpret_cast<const uint4*>(weight);
  uint4* o = reinterpret_cast<uint4*>(out + int64_t(blockIdx.x) * dim);
#pragma unroll
  for (int j = 0; j < kUnits; ++j) {
    const int u = threadIdx.x + j * kThreads;
    if (u < n_units) {
      float wf[8], y[8];
      bf16x8_to_f32(w[u], wf);
#pragma unroll
      for (int e = 0; e < 8; ++e) y[e] = v[j][e] * inv_rms * wf[e];
      o[u] = pack8(y);
    }
  }
}

// Any dim and alignment: the row is read twice (sum of squares, then scale), from L1/L2 the second time.
template <bool kAdd>
__global__ void __launch_bounds__(kThreads) rms_norm_scalar_kernel(float* residual, const __nv_bfloat16* delta,
                                                                   const __nv_bfloat16* weight, __nv_bfloat16* out,
                                                                   int dim, float eps) {
  allow_dependent_launch();
  wait_for_previous_kernel();
  float* r = residual + int64_t(blockIdx.x) * dim;
  const __nv_bfloat16* d = kAdd ? delta + int64_t(blockIdx.x) * dim : nullptr;
  float sum = 0.0f;
  for (int i = threadIdx.x; i < dim; i += kThreads) {
    float v = r[i];
    if constexpr (kAdd) {
      v += bf16_to_f32(d[i]);
      r[i] = v;
    }
    sum += v * v;
  }
  const float inv_rms = rsqrtf(block_sum(sum) / float(dim) + eps);
  __nv_bfloat16* o = out + int64_t(blockIdx.x) * dim;
  for (int i = threadIdx.x; i < dim; i += kThreads) o[i] = __float2bfloat16(r[i] * inv_rms * bf16_to_f32(weight[i]));
}

// grid: (n_rows, ceil(n_heads / kHeadWarps)); one warp per head. Vector path: 4 elements (8 bytes)
// per lane per unit, kUnits units per lane in registers (head_dim 128: one unit).
template <int kUnits>
__global__ void __launch_bounds__(32 * kHeadWarps) rms_norm_heads_vec_kernel(__nv_bfloat16* x, int64_t row_stride,
                                                                             int n_heads, int head_dim,
                                                                             const __nv_bfloat16* weight, float eps) {
  allow_dependent_launch();
  wait_for_previous_kernel();
  const int head = blockIdx.y * kHeadWarps + (threadIdx.x >> 5), lane = threadIdx.x & 31;
  if (head >= n_heads) return;
  uint2* h = reinterpret_cast<uint2*>(x + int64_t(blockIdx.x) * row_stride + int64_t(head) * head_dim);
  const uint2* w = reinterpret_cast<const uint2*>(weight);
  const int n_units = head_dim / 4;
  float v[kUnits][4];
  float sum = 0.0f;
#pragma unroll
  for (int j = 0; j < kUnits; ++j) {
    const int u = lane + 32 * j;
    if (u < n_units) {
      const uint2 raw = h[u];
      const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.x));
      const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.y));
      v[j][0] = a.x; v[j][1] = a.y; v[j][2] = b.x; v[j][3] = b.y;
#pragma unroll
      for (int e = 0; e < 4; ++e) sum += v[j][e] * v[j][e];
    }
  }
  const float inv_rms = rsqrtf(warp_sum(sum) / float(head_dim) + eps);
#pragma unroll
  for (int j = 0; j < kUnits; ++j) {
    const int u = lane + 32 * j;
    if (u < n_units) {
      const uint2 wr = w[u];
      const float2 wa = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&wr.x));
      const float2 wb = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&wr.y));
      uint2 o;
      *reinterpret_cast<__nv_bfloat162*>(&o.x) = __floats2bfloat162_rn(v[j][0] * inv_rms * wa.x, v[j][1] * inv_rms * wa.y);
      *reinterpret_cast<__nv_bfloat162*>(&o.y) = __floats2bfloat162_rn(v[j][2] * inv_rms * wb.x, v[j][3] * inv_rms * wb.y);
      h[u] = o;
    }
  }
}

__global__ void __launch_bounds__(32 * kHeadWarps) rms_norm_heads_scalar_kernel(__nv_bfloat16* x, int64_t row_stride,
                                                                                int n_heads, int head_dim,
                                                                                const __nv_bfloat16* weight, float eps) {
  allow_dependent_launch();
  wait_for_previous_kernel();
  const int head = blockIdx.y * kHeadWarps + (threadIdx.x >> 5), lane = threadIdx.x & 31;
  if (head >= n_heads) return;
  __nv_bfloat16* h = x + int64_t(blockIdx.x) * row_stride + int64_t(head) * head_dim;
  float sum = 0.0f;
  for (int i = lane; i < head_dim; i += 32) {
    const float v = bf16_to_f32(h[i]);
    sum += v * v;
  }
  const float inv_rms = rsqrtf(warp_sum(sum) / float(head_dim) + eps);
  for (int i = lane; i < head_dim; i += 32)
    h[i] = __float2bfloat16(bf16_to_f32(h[i]) * inv_rms * bf16_to_f32(weight[i]));
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

void check_common(const char* name, const void* residual, const void* weight, const void* out, int n_rows, int dim,
                  float eps) {
  if (!residual) kernel_fail(name, ": residual is null (expected a device pointer to f32 [n_rows, dim])");
  if (!weight) kernel_fail(name, ": weight is null (expected a device pointer to bf16 [dim])");
  if (!out) kernel_fail(name, ": out is null (expected a device pointer to bf16 [n_rows, dim])");
  if (n_rows < 0) kernel_fail(name, ": n_rows must be >= 0, found ", n_rows);
  if (dim <= 0) kernel_fail(name, ": dim must be > 0, found ", dim);
  if (!(eps >= 0.0f)) kernel_fail(name, ": eps must be >= 0, found ", eps);
}

template <bool kAdd>
void launch(const char* name, float* residual, const void* delta, const void* weight, void* out, int n_rows, int dim,
            float eps, cudaStream_t s) {
  auto* d = static_cast<const __nv_bfloat16*>(delta);
  auto* w = static_cast<const __nv_bfloat16*>(weight);
  auto* o = static_cast<__nv_bfloat16*>(out);
  const int n_units = dim / 8;
  const bool vec = dim % 8 == 0 && aligned16(residual) && aligned16(weight) && aligned16(out) &&
                   (!kAdd || aligned16(delta)) && n_units <= 8 * kThreads;
  if (!vec)
    launch_pdl(rms_norm_scalar_kernel<kAdd>, dim3(n_rows), dim3(kThreads), 0, s, residual, d, w, o, dim, eps);
  else if (n_units <= kThreads)
    launch_pdl(rms_norm_vec_kernel<kAdd, 1>, dim3(n_rows), dim3(kThreads), 0, s, residual, d, w, o, dim, eps);
  else if (n_units <= 2 * kThreads)
    launch_pdl(rms_norm_vec_kernel<kAdd, 2>, dim3(n_rows), dim3(kThreads), 0, s, residual, d, w, o, dim, eps);
  else if (n_units <= 4 * kThreads)
    launch_pdl(rms_norm_vec_kernel<kAdd, 4>, dim3(n_rows), dim3(kThreads), 0, s, residual, d, w, o, dim, eps);
  else
    launch_pdl(rms_norm_vec_kernel<kAdd, 8>, dim3(n_rows), dim3(kThreads), 0, s, residual, d, w, o, dim, eps);
  LS_CUDA_CHECK_LAUNCH(name);
}

}  // namespace

void rms_norm(const float* residual, const void* weight, void* out, int n_rows, int dim, float eps, cudaStream_t s) {
  check_common("rms_norm", residual, weight, out, n_rows, dim, eps);
  if (n_rows == 0) return;
  // kAdd = false never writes the residual.
  launch<false>("rms_norm_kernel", const_cast<float*>(residual), nullptr, weight, out, n_rows, dim, eps, s);
}

void add_rms_norm(float* residual, const void* delta, const void* weight, void* out, int n_rows, int dim, float eps,
                  cudaStream_t s) {
  check_common("add_rms_norm", residual, weight, out, n_rows, dim, eps);
  if (!delta) kernel_fail("add_rms_norm: delta is null (expected a device pointer to bf16 [n_rows, dim])");
  if (n_rows == 0) return;
  launch<true>("add_rms_norm_kernel", residual, delta, weight, out, n_rows, dim, eps, s);
}

void rms_norm_heads_inplace(void* x, int64_t row_stride, int n_rows, int n_heads, int head_dim, const void* weight,
                            float eps, cudaStream_t s) {
  if (!x) kernel_fail("rms_norm_heads_inplace: x is null (expected a device pointer to bf16 [n_rows, row_stride])");
  if (!weight) kernel_fail("rms_norm_heads_inplace: weight is null (expected a device pointer to bf16 [head_dim])");
  if (n_rows < 0) kernel_fail("rms_norm_heads_inplace: n_rows must be >= 0, found ", n_rows);
  if (n_heads <= 0) kernel_fail("rms_norm_heads_inplace: n_heads must be > 0, found ", n_heads);
  if (head_dim <= 0) kernel_fail("rms_norm_heads_inplace: head_dim must be > 0, found ", head_dim);
  if (row_stride < int64_t(n_heads) * head_dim)
    kernel_fail("rms_norm_heads_inplace: row_stride must be >= n_heads * head_dim = ", int64_t(n_heads) * head_dim,
                ", found ", row_stride);
  if (!(eps >= 0.0f)) kernel_fail("rms_norm_heads_inplace: eps must be >= 0, found ", eps);
  if (n_rows == 0) return;
  if (n_rows > 2147483647 || (n_heads + kHeadWarps - 1) / kHeadWarps > 65535)
    kernel_fail("rms_norm_heads_inplace: at most 65535 * ", kHeadWarps, " heads, found ", n_heads);
  auto* h = static_cast<__nv_bfloat16*>(x);
  auto* w = static_cast<const __nv_bfloat16*>(weight);
  const dim3 grid(unsigned(n_rows), unsigned((n_heads + kHeadWarps - 1) / kHeadWarps));
  const int n_units = head_dim / 4;
  // 8-byte units need every head start 8-byte aligned: x, row_stride and head_dim multiples of 4 elements.
  const bool vec = head_dim % 4 == 0 && row_stride % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 8 == 0 &&
                   reinterpret_cast<uintptr_t>(weight) % 8 == 0 && n_units <= 4 * 32;
  if (!vec)
    launch_pdl(rms_norm_heads_scalar_kernel, dim3(grid), dim3(32 * kHeadWarps), 0, s, h, row_stride, n_heads, head_dim, w, eps);
  else if (n_units <= 32)
    launch_pdl(rms_norm_heads_vec_kernel<1>, dim3(grid), dim3(32 * kHeadWarps), 0, s, h, row_stride, n_heads, head_dim, w, eps);
  else if (n_units <= 64)
    launch_pdl(rms_norm_heads_vec_kernel<2>, dim3(grid), dim3(32 * kHeadWarps), 0, s, h, row_stride, n_heads, head_dim, w, eps);
  else
    launch_pdl(rms_norm_heads_vec_kernel<4>, dim3(grid), dim3(32 * kHeadWarps), 0, s, h, row_stride, n_heads, head_dim, w, eps);
  LS_CUDA_CHECK_LAUNCH("rms_norm_heads_kernel");
}

}  // namespace latentserve::cuda
