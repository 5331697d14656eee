// Read-only bandwidth kernel: a grid-stride stream of 16-byte non-coherent loads, eight in
// flight per thread (8 x 16 B x 1024 threads = 128 KB per SM, enough to cover HBM latency).
#include "backend/cuda/read_roof.h"

#include <cstddef>
#include <cstdint>

#include "backend/cuda/kernel_error.h"
#include "backend/cuda/kv_cache_layout.h"

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

// The xor of every thread's x -> *out (a value the loads feed, so they cannot be elided).
template <int kBlockThreads>
__device__ __forceinline__ void write_block_xor(uint32_t x, float* out) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x ^= __shfl_xor_sync(0xffffffffu, x, o);
  __shared__ uint32_t warp_x[kBlockThreads / 32];
  if ((threadIdx.x & 31) == 0) warp_x[threadIdx.x >> 5] = x;
  __syncthreads();
  if (threadIdx.x == 0) {
    uint32_t b = 0;
#pragma unroll
    for (int w = 0; w < kBlockThreads / 32; ++w) b ^= warp_x[w];
    *out = float(b);
  }
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
  write_block_xor<kThreads>(x, block_sums + blockIdx.x);
}

constexpr int kProbeThreads = 256;
constexpr int kProbeUnroll = 4;  // token groups per round: 4 K + 4 V loads in flight per thread

__device__ __forceinline__ size_t probe_row_offset(const PagedReadProbe& p, int seq, int head, int token) {
  if (p.layout == PagedReadLayout::Contiguous) return ((size_t(seq) * p.n_head_kv + head) * p.context + token) * p.row_bytes;
  const int64_t block = p.block_tables[size_t(seq) * (p.context / p.block_size) + token / p.block_size];
  const KvLayout layout = p.layout == PagedReadLayout::SlotMajor ? KvLayout::SlotMajor : KvLayout::HeadMajor;
  return size_t(kv_row_index(layout, block, token % p.block_size, head, p.n_head_kv, p.block_size)) * p.row_bytes;
}

// grid (context / chunk_tokens, n_head_kv, n_seqs): the decode kernel's order (chunks fastest)
__global__ void __launch_bounds__(kProbeThreads) paged_read_pass_kernel(const PagedReadProbe p) {
  const int words_per_row = p.row_bytes / 16;
  const int rows_per_group = kProbeThreads / words_per_row;
  const int row_in_group = threadIdx.x / words_per_row, word = threadIdx.x % words_per_row;
  const int seq = blockIdx.z, head = blockIdx.y, first = blockIdx.x * p.chunk_tokens;
  const char* k = static_cast<const char*>(p.k);
  const char* v = static_cast<const char*>(p.v);
  uint32_t x = 0;
  for (int t0 = first; t0 < first + p.chunk_tokens; t0 += kProbeUnroll * rows_per_group) {
    size_t off[kProbeUnroll];
#pragma unroll
    for (int u = 0; u < kProbeUnroll; ++u) off[u] = probe_row_offset(p, seq, head, t0 + u * rows_per_group + row_in_group) + word * 16;
    uint4 kv[2 * kProbeUnroll];
#pragma unroll
    for (int u = 0; u < kProbeUnroll; ++u) {
      kv[2 * u] = load_streaming(reinterpret_cast<const uint4*>(k + off[u]));
      kv[2 * u + 1] = load_streaming(reinterpret_cast<const uint4*>(v + off[u]));
    }
#pragma unroll
    for (int u = 0; u < 2 * kProbeUnroll; ++u) x ^= kv[u].x ^ kv[u].y ^ kv[u].z ^ kv[u].w;
  }
  write_block_xor<kProbeThreads>(x, p.block_sums + (size_t(blockIdx.z) * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x);
}

}  // namespace

int paged_read_pass_blocks(const PagedReadProbe& p) {
  return p.chunk_tokens > 0 ? p.n_seqs * p.n_head_kv * (p.context / p.chunk_tokens) : 0;
}

void paged_read_pass(const PagedReadProbe& p, cudaStream_t s) {
  if (!p.k || !p.v || !p.block_sums) kernel_fail("paged_read_pass: k, v and block_sums must not be null");
  if (p.layout != PagedReadLayout::Contiguous && !p.block_tables)
    kernel_fail("paged_read_pass: block_tables must not be null for a paged layout");
  if (p.row_bytes < 16 || p.row_bytes % 16 != 0 || kProbeThreads % (p.row_bytes / 16) != 0)
    kernel_fail("paged_read_pass: row_bytes must be a multiple of 16 whose 16-byte words divide ", kProbeThreads,
                ", found ", p.row_bytes);
  const int rows_per_round = kProbeUnroll * kProbeThreads / (p.row_bytes / 16);
  if (p.n_seqs <= 0 || p.n_head_kv <= 0 || p.block_size <= 0 || p.chunk_tokens <= 0 || p.chunk_tokens % rows_per_round != 0 ||
      p.context % p.chunk_tokens != 0 || p.context % p.block_size != 0)
    kernel_fail("paged_read_pass: expected positive sizes with chunk_tokens a multiple of ", rows_per_round,
                " dividing context (and block_size dividing context), found n_seqs ", p.n_seqs, ", n_head_kv ", p.n_head_kv,
                ", context ", p.context, ", chunk_tokens ", p.chunk_tokens, ", block_size ", p.block_size);
  const dim3 grid(unsigned(p.context / p.chunk_tokens), unsigned(p.n_head_kv), unsigned(p.n_seqs));
  if (p.reserve_smem_bytes < 0 || p.reserve_smem_bytes > 227 * 1024)
    kernel_fail("paged_read_pass: reserve_smem_bytes must be in [0, 227 KB], found ", p.reserve_smem_bytes);
  if (p.reserve_smem_bytes > 48 * 1024)
    LS_CUDA_CHECK(cudaFuncSetAttribute(paged_read_pass_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, p.reserve_smem_bytes));
  paged_read_pass_kernel<<<grid, kProbeThreads, size_t(p.reserve_smem_bytes), s>>>(p);
  LS_CUDA_CHECK_LAUNCH("paged_read_pass_kernel");
}

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
