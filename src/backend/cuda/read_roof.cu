// Read-only bandwidth kernel: a grid-stride stream of 16-byte non-coherent loads, eight in
// flight per thread (8 x 16 B x 1024 threads = 128 KB per SM, enough to cover HBM latency).
#include "backend/cuda/read_roof.h"

#include <cstdint>

#include "backend/cuda/kernel_error.h"

namespace latentserve::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kBlocksPerSm = 4;
constexpr int kUnroll = 8;

__device__ __forceinline__ uint4 load_streaming(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// data: [n16] 16-byte words; block_sums: [gridDim.x] (the xor of every word a block read)
__global__ void __launch_bounds__(kThreads) read_only_pass_kernel(const uint4* data, size_t n16, float* block_sums) {
  uint32_t x = 0;
  size_t i = size_t(blockIdx.x) * kThreads * kUnroll + threadIdx.x;
  const size_t step = size_t(gridDim.x) * kThreads * kUnroll;
  for (; i + size_t(kUnroll - 1) * kThreads < n16; i += step) {
    uint4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = load_streaming(data + i + size_t(u) * kThreads);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) x ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  // the one partial group of this thread (later groups start past the end)
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const size_t j = i + size_t(u) * kThreads;
    if (j < n16) {
      const uint4 v = load_streaming(data + j);
      x ^= v.x ^ v.y ^ v.z ^ v.w;
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x ^= __shfl_xor_sync(0xffffffffu, x, o);
  __shared__ uint32_t warp_x[kThreads / 32];
  if ((threadIdx.x & 31) == 0) warp_x[threadIdx.x >> 5] = x;
  __syncthreads();
  if (threadIdx.x == 0) {
    uint32_t b = 0;
#pragma unroll
    for (int w = 0; w < kThreads / 32; ++w) b ^= warp_x[w];
    block_sums[blockIdx.x] = float(b);
  }
}

}  // namespace

int read_only_pass_blocks() {
  int device = 0, n_sm = 0;
  LS_CUDA_CHECK(cudaGetDevice(&device));
  LS_CUDA_CHECK(cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, device));
  return n_sm * kBlocksPerSm;
}

void read_only_pass(const void* data, size_t bytes, float* block_sums, int n_blocks_out, cudaStream_t s) {
  if (data == nullptr) kernel_fail("read_only_pass: data must not be null");
  if ((reinterpret_cast<uintptr_t>(data) & 15u) != 0) kernel_fail("read_only_pass: data must be 16-byte aligned, found ", data);
  if (bytes == 0 || bytes % 16 != 0) kernel_fail("read_only_pass: bytes must be a positive multiple of 16, found ", bytes);
  if (block_sums == nullptr) kernel_fail("read_only_pass: block_sums must not be null");
  const int blocks = read_only_pass_blocks();
  if (n_blocks_out < blocks)
    kernel_fail("read_only_pass: block_sums must hold read_only_pass_blocks() = ", blocks, " values, found n_blocks_out ",
                n_blocks_out);
  read_only_pass_kernel<<<blocks, kThreads, 0, s>>>(static_cast<const uint4*>(data), bytes / 16, block_sums);
  LS_CUDA_CHECK_LAUNCH("read_only_pass_kernel");
}

}  // namespace latentserve::cuda
