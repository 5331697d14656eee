#include "backend/cuda/random_fill.h"

#include "backend/cuda/device_math.cuh"
#include "backend/cuda/kernel_error.h"

namespace latentserve::cuda {
namespace {

// splitmix64: a full-period 64-bit mix, good enough for synthetic data.
__device__ __forceinline__ uint64_t mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Uniform in [-1, 1) from 24 random bits.
__device__ __forceinline__ float signed_unit(uint64_t seed, int64_t i) {
  return float(mix(seed ^ mix(uint64_t(i))) >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

__global__ void fill_bf16_kernel(__nv_bfloat16* x, int64_t n, float center, float half_width, uint64_t seed) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    x[i] = __float2bfloat16(center + half_width * signed_unit(seed, i));
}

__global__ void fill_fp8_kernel(unsigned char* x, int64_t n, float half_width, uint64_t seed) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    x[i] = f32_to_fp8_e4m3(half_width * signed_unit(seed, i));
}

int grid_for(int64_t n) { return int(n / 256 + 1 < 132 * 16 ? n / 256 + 1 : 132 * 16); }

}  // namespace

void fill_uniform_bf16(void* x, int64_t n, float center, float half_width, uint64_t seed, cudaStream_t s) {
  if (n <= 0) return;
  if (!x) kernel_fail("fill_uniform_bf16: x is null for ", n, " elements");
  fill_bf16_kernel<<<grid_for(n), 256, 0, s>>>(static_cast<__nv_bfloat16*>(x), n, center, half_width, seed);
  LS_CUDA_CHECK_LAUNCH("fill_bf16_kernel");
}

void fill_uniform_fp8_e4m3(void* x, int64_t n, float half_width, uint64_t seed, cudaStream_t s) {
  if (n <= 0) return;
  if (!x) kernel_fail("fill_uniform_fp8_e4m3: x is null for ", n, " elements");
  if (!(half_width > 0 && half_width <= 448)) kernel_fail("fill_uniform_fp8_e4m3: half_width must be in (0, 448], found ", half_width);
  fill_fp8_kernel<<<grid_for(n), 256, 0, s>>>(static_cast<unsigned char*>(x), n, half_width, seed);
  LS_CUDA_CHECK_LAUNCH("fill_fp8_kernel");
}

}  // namespace latentserve::cuda
