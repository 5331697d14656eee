#include "backend/cuda/activation.h"

#include "backend/cuda/device_math.cuh"
#include "backend/cuda/kernel_error.h"
#include "backend/cuda/pdl_launch.cuh"

namespace latentserve::cuda {
namespace {

constexpr int kThreads = 256;

// One thread per 8 outputs: a 16-byte word of gate, one of up, one of out.
__global__ void __launch_bounds__(kThreads) silu_mul_vec_kernel(const uint4* gate_up, uint4* out, int64_t n_units,
                                                                int inter_units) {
  allow_dependent_launch();
  wait_for_previous_kernel();
  for (int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x; i < n_units; i += int64_t(gridDim.x) * kThreads) {
    const int64_t row = i / inter_units, col = i - row * inter_units;
    const uint4 g = gate_up[row * 2 * inter_units + col], u = gate_up[row * 2 * inter_units + inter_units + col];
    const __nv_bfloat162* gh = reinterpret_cast<const __nv_bfloat162*>(&g);
    const __nv_bfloat162* uh = reinterpret_cast<const __nv_bfloat162*>(&u);
    uint4 o;
    __nv_bfloat162* oh = reinterpret_cast<__nv_bfloat162*>(&o);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float2 a = __bfloat1622float2(gh[j]), b = __bfloat1622float2(uh[j]);
      oh[j] = __floats2bfloat162_rn(silu_times(a.x, b.x), silu_times(a.y, b.y));
    }
    out[i] = o;
  }
}

__global__ void __launch_bounds__(kThreads) silu_mul_scalar_kernel(const __nv_bfloat16* gate_up, __nv_bfloat16* out,
                                                                   int64_t n, int inter) {
  allow_dependent_launch();
  wait_for_previous_kernel();
  for (int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x; i < n; i += int64_t(gridDim.x) * kThreads) {
    const int64_t row = i / inter, col = i - row * inter;
    const float g = bf16_to_f32(gate_up[row * 2 * inter + col]), u = bf16_to_f32(gate_up[row * 2 * inter + inter + col]);
    out[i] = __float2bfloat16(silu_times(g, u));
  }
}

__global__ void __launch_bounds__(kThreads) add_bias_f32_kernel(float* y, const __nv_bfloat16* bias, int64_t total,
                                                                int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x; i < total; i += int64_t(gridDim.x) * kThreads)
    y[i] += bf16_to_f32(bias[i % n]);
}

// Enough CTAs to fill the GPU a few times over; the grid-stride loop does the rest.
int grid_for(int64_t work) {
  const int64_t blocks = (work + kThreads - 1) / kThreads;
  return int(blocks < 132 * 16 ? blocks : 132 * 16);
}

}  // namespace

void silu_mul(const void* gate_up, void* out, int n_rows, int inter, cudaStream_t s) {
  if (!gate_up) kernel_fail("silu_mul: gate_up is null (expected a device pointer to bf16 [n_rows, 2 * inter])");
  if (!out) kernel_fail("silu_mul: out is null (expected a device pointer to bf16 [n_rows, inter])");
  if (n_rows < 0) kernel_fail("silu_mul: n_rows must be >= 0, found ", n_rows);
  if (inter <= 0) kernel_fail("silu_mul: inter must be > 0, found ", inter);
  if (n_rows == 0) return;
  const bool vec = inter % 8 == 0 && reinterpret_cast<uintptr_t>(gate_up) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(out) % 16 == 0;
  if (vec) {
    const int64_t n_units = int64_t(n_rows) * (inter / 8);
    launch_pdl(silu_mul_vec_kernel, dim3(grid_for(n_units)), dim3(kThreads), 0, s, static_cast<const uint4*>(gate_up),
                                                               static_cast<uint4*>(out), n_units, inter / 8);
  } else {
    const int64_t n = int64_t(n_rows) * inter;
    launch_pdl(silu_mul_scalar_kernel, dim3(grid_for(n)), dim3(kThreads), 0, s, static_cast<const __nv_bfloat16*>(gate_up),
                                                            static_cast<__nv_bfloat16*>(out), n, inter);
  }
  LS_CUDA_CHECK_LAUNCH("silu_mul_kernel");
}

void add_bias_f32(float* y, const void* bias, int64_t m, int64_t n, cudaStream_t s) {
  if (!y || !bias) kernel_fail("add_bias_f32: y and bias must be device pointers, one is null");
  if (m < 0 || n <= 0) kernel_fail("add_bias_f32: need m >= 0 and n > 0, found m ", m, ", n ", n);
  if (m == 0) return;
  add_bias_f32_kernel<<<grid_for(m * n), kThreads, 0, s>>>(y, static_cast<const __nv_bfloat16*>(bias), m * n, n);
  LS_CUDA_CHECK_LAUNCH("add_bias_f32_kernel");
}

}  // namespace latentserve::cuda
