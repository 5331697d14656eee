#include "backend/cuda/gemv.h"

#include "backend/cuda/device_math.cuh"
#include "backend/cuda/kernel_error.h"
#include "backend/cuda/pdl_launch.cuh"

namespace latentserve::cuda {
namespace {

constexpr int kWarps = 4;

__device__ __forceinline__ void bf16x8_to_f32(const uint4& v, float out[8]) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(h[i]);
    out[2 * i] = f.x;
    out[2 * i + 1] = f.y;
  }
}

// grid: ceil(n / (kWarps * kRowsPerWarp)); warp w of CTA b owns rows [(b * kWarps + w) * 4, +4).
// Lane l reads 16-byte chunks l, l + 32, ... of each row (k / 8 chunks per row).
template <typename OutT>
__device__ __forceinline__ OutT from_f32(float v);
template <>
__device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) { return __float2bfloat16(v); }

template <int M, int kRowsPerWarp, int kUnroll, typename OutT>
__global__ void __launch_bounds__(kWarps * 32) gemv_kernel(const uint4* __restrict__ x, const uint4* __restrict__ w,
                                                           OutT* __restrict__ y, const __nv_bfloat16* bias,
                                                           int n, int k_chunks) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int row0 = (blockIdx.x * kWarps + warp) * kRowsPerWarp;
  float acc[kRowsPerWarp][M];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r)
#pragma unroll
    for (int i = 0; i < M; ++i) acc[r][i] = 0.0f;
  const uint4* wr[kRowsPerWarp];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) wr[r] = w + int64_t(min(row0 + r, n - 1)) * k_chunks;  // rows past n: read row n-1, not stored

  // The first weight loads go out before waiting on the kernel that produces x (programmatic
  // dependent launch): the weights do not depend on it, so their latency hides under its tail.
  uint4 wv[kUnroll][kRowsPerWarp];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u)
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int c = lane + u * 32;
      wv[u][r] = (row0 < n && c < k_chunks) ? __ldcs(wr[r] + c) : make_uint4(0, 0, 0, 0);
    }
  wait_for_previous_kernel();
  if (row0 >= n) return;

  for (int c0 = lane; c0 < k_chunks; c0 += 32 * kUnroll) {
    if (c0 != lane) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)  // all weight loads of this iteration in flight together
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r) {
          const int c = c0 + u * 32;
          wv[u][r] = c < k_chunks ? __ldcs(wr[r] + c) : make_uint4(0, 0, 0, 0);  // streamed: read once
        }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = c0 + u * 32;
      if (c >= k_chunks) break;
#pragma unroll
      for (int i = 0; i < M; ++i) {
        float xf[8];
        bf16x8_to_f32(__ldg(x + int64_t(i) * k_chunks + c), xf);
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r) {
          float wf[8];
          bf16x8_to_f32(wv[u][r], wf);
#pragma unroll
          for (int j = 0; j < 8; ++j) acc[r][i] = fmaf(wf[j], xf[j], acc[r][i]);
        }
      }
    }
  }
  // Every load is done: the next kernel (a norm, RoPE, SwiGLU) may launch and wait for us. Not
  // at the start: its CTAs would sit on the slots this grid's later waves need.
  allow_dependent_launch();
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r)
#pragma unroll
    for (int i = 0; i < M; ++i) acc[r][i] = warp_sum(acc[r][i]);
  if (lane == 0) {
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int row = row0 + r;
      if (row >= n) break;
      const float b = bias ? bf16_to_f32(bias[row]) : 0.0f;
#pragma unroll
      for (int i = 0; i < M; ++i) y[int64_t(i) * n + row] = from_f32<OutT>(acc[r][i] + b);
    }
  }
}

template <int M, int R, int U, typename OutT>
void launch_one(const void* x, const void* w, void* y, int n, int k, const void* bias, cudaStream_t s) {
  const int rows_per_cta = kWarps * R;
  launch_pdl(gemv_kernel<M, R, U, OutT>, dim3(unsigned((n + rows_per_cta - 1) / rows_per_cta)), dim3(kWarps * 32), 0, s,
             static_cast<const uint4*>(x), static_cast<const uint4*>(w), static_cast<OutT*>(y),
             static_cast<const __nv_bfloat16*>(bias), n, k / 8);
}

template <int M, typename OutT>
void launch_config(GemvConfig config, const void* x, const void* w, void* y, int n, int k, const void* bias,
                   cudaStream_t s) {
  switch (config) {
    case GemvConfig::Rows4Unroll4: launch_one<M, 4, 4, OutT>(x, w, y, n, k, bias, s); break;
    case GemvConfig::Rows4Unroll8: launch_one<M, 4, 8, OutT>(x, w, y, n, k, bias, s); break;
    case GemvConfig::Rows2Unroll8: launch_one<M, 2, 8, OutT>(x, w, y, n, k, bias, s); break;
    case GemvConfig::Rows1Unroll8: launch_one<M, 1, 8, OutT>(x, w, y, n, k, bias, s); break;
  }
}

template <typename OutT>
void launch(GemvConfig config, const void* x, const void* w, void* y, int64_t m, int n, int k, const void* bias,
            cudaStream_t s) {
  switch (m) {
    case 1: launch_config<1, OutT>(config, x, w, y, n, k, bias, s); break;
    case 2: launch_config<2, OutT>(config, x, w, y, n, k, bias, s); break;
    case 3: launch_config<3, OutT>(config, x, w, y, n, k, bias, s); break;
    default: launch_config<4, OutT>(config, x, w, y, n, k, bias, s); break;
  }
}

}  // namespace

const char* gemv_config_name(GemvConfig config) {
  switch (config) {
    case GemvConfig::Rows4Unroll4: return "r4u4";
    case GemvConfig::Rows4Unroll8: return "r4u8";
    case GemvConfig::Rows2Unroll8: return "r2u8";
    case GemvConfig::Rows1Unroll8: return "r1u8";
  }
  return "?";
}

bool gemv_supported(const void* x, const void* w, const void* y, int64_t m, int64_t k) {
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  return m >= 1 && m <= kGemvMaxRows && k % 8 == 0 && k > 0 && aligned(x) && aligned(w) && aligned(y);
}

void gemv_bf16(const void* x, const void* w, void* y, int64_t m, int64_t n, int64_t k, bool y_f32, const void* bias,
               cudaStream_t s, GemvConfig config) {
  if (!x || !w || !y) kernel_fail("gemv_bf16: x, w and y must be device pointers, one is null");
  if (!gemv_supported(x, w, y, m, k))
    kernel_fail("gemv_bf16: needs 1 <= m <= ", kGemvMaxRows, ", k % 8 == 0 and 16-byte aligned x, w, y; found m ", m,
                ", k ", k);
  if (n <= 0 || n > (int64_t(1) << 30) || k > (int64_t(1) << 30)) kernel_fail("gemv_bf16: n must be in [1, 2^30], found ", n);
  if (y_f32)
    launch<float>(config, x, w, y, m, int(n), int(k), bias, s);
  else
    launch<__nv_bfloat16>(config, x, w, y, m, int(n), int(k), bias, s);
  LS_CUDA_CHECK_LAUNCH("gemv_kernel");
}

}  // namespace latentserve::cuda
