// Paged prefill attention on Hopper's warpgroup MMA (design: docs/cuda-prefill-attention.md,
// "The wgmma kernel"). Same function as paged_prefill_attention.cu's kernels, head_dim 128,
// bf16 caches.
//
// One CTA of two warpgroups per (query tile of 128 rows, query head, sequence); warpgroup g owns
// rows 64 g .. 64 g + 63. K/V tiles of 128 keys arrive through the block table with 16-byte
// cp.async into a 3-deep ring laid out in the 128-byte swizzle (wgmma.cuh); one barrier per
// tile. Per warpgroup and tile:
//   S[64, 128] = Q K^T     8 x wgmma m64n128k16, Q and K from shared memory (K-major)
//   online softmax on the S accumulators (f32, exp2 with the scale folded in)
//   O[64, 128] += P V      8 x wgmma m64n128k16, P from registers (bf16), V N-major from shared memory
// Key tiles run from the last (diagonal) to the first, as in the mma.sync kernels.
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "backend/cuda/kernel_error.h"
#include "backend/cuda/paged_prefill_attention_wgmma.h"
#include "backend/cuda/tensor_core.cuh"
#include "backend/cuda/wgmma.cuh"

namespace latentserve::cuda {

namespace {

constexpr int kHeadDim = 128;
constexpr int kBlockM = 128;                            // query rows per CTA: 2 warpgroups x 64
constexpr int kBlockN = 128;                            // keys per tile
constexpr int kStages = 3;                              // K/V tiles in flight (2 while one is computed)
constexpr int kThreads = 256;
constexpr int kRowBytes = kHeadDim * 2;                 // one bf16 row (two 128-byte halves)
constexpr int kTileBytes = kBlockN * kRowBytes;         // one K (or V) tile, 32 KiB
constexpr int kQBytes = kBlockM * kRowBytes;            // 32 KiB
constexpr int kStageBytes = 2 * kTileBytes;             // K then V
constexpr int kSmemBytes = kQBytes + kStages * kStageBytes + 1024;  // + room to align to 1024
static_assert(kSmemBytes <= 227 * 1024, "shared memory per CTA");
static_assert(kHeadDim / 8 == 16, "rows of 16 chunks: two 128-byte swizzle halves");

// Copies row `row` of a [rows, 128] bf16 tile from `src` (16 chunks) into the swizzled layout.
// Two adjacent threads share a row (h = 0, 1) and take alternate chunks, so each copy
// instruction of a warp reads whole 32-byte sectors.
__device__ __forceinline__ void copy_row_half(uint32_t tile, int rows, int row, int h, const unsigned char* src,
                                              bool valid) {
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int c = h + 2 * i;
    cp_async_16(tile + wgmma::swizzled_offset(row, c, rows), valid ? src + 16 * c : src, valid);
  }
}

// Named barrier `id` (0 is __syncthreads') over `threads` threads: sync waits, arrive does not.
constexpr int kPingPongBarrier = 1;
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// Grid order. kQTilesFastest: grid (query tiles, heads, sequences), so the CTAs resident at one
// time are the query tiles of one or two (sequence, head) pairs, all streaming the same K/V
// (L2-resident: a few MB); each pair's heaviest (last) tile first. Otherwise (heads, sequences,
// query tiles) as the mma.sync kernels: every pair's heaviest tile first, but the resident CTAs
// then stream ~64 pairs' K/V at once and most of each re-read comes from DRAM.
template <bool kQTilesFastest>
__global__ void __launch_bounds__(kThreads, 1) paged_prefill_wgmma_kernel(const PagedPrefillParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t s_q = (smem_u32(smem_raw) + 1023u) & ~1023u;  // swizzle atoms are 1024-byte aligned
  const uint32_t s_stages = s_q + kQBytes;

  const int head = kQTilesFastest ? blockIdx.y : blockIdx.x, seq = kQTilesFastest ? blockIdx.z : blockIdx.y;
  const int q_tile = kQTilesFastest ? int(gridDim.x) - 1 - int(blockIdx.x) : int(gridDim.z) - 1 - int(blockIdx.z);
  const int q_begin = p.query_start_loc[seq];
  const int q_len = p.query_start_loc[seq + 1] - q_begin;
  const int m0 = q_tile * kBlockM;
  if (m0 >= q_len) return;
  const int seq_len = p.seq_lens[seq];
  const int first_pos = seq_len - q_len;
  if (first_pos < 0) return;  // malformed step: leave the rows unwritten (NaN-visible)

  const int window = p.sliding_window;
  const int pos_lo = first_pos + m0;
  const int kv_end = first_pos + min(q_len, m0 + kBlockM);
  const int kv_lo = window > 0 ? max(0, pos_lo - window + 1) : 0;
  const int tile_lo = kv_lo / kBlockN, tile_hi = (kv_end - 1) / kBlockN;
  const int n_kv_tiles = tile_hi - tile_lo + 1;

  const int tid = int(threadIdx.x), lane = tid % 32;
  const int wg = tid / 128, warp_in_wg = (tid / 32) % 4;
  const int head_kv = head / (p.n_head / p.n_head_kv);
  const int log2_block = __ffs(p.block_size) - 1;
  const int32_t* table = p.block_tables + int64_t(seq) * p.max_blocks_per_seq;
  const int copy_row = tid >> 1, copy_half = tid & 1;  // the row (and alternate chunks) this thread copies

  // ---- Q tile [128, 128]: rows of tokens q_begin + m0 + r (zero past q_len)
  {
    const bool valid = m0 + copy_row < q_len;
    const unsigned char* src = static_cast<const unsigned char*>(p.q);
    if (valid) src += (int64_t(q_begin + m0 + copy_row) * p.q_token_stride + int64_t(head) * kHeadDim) * 2;
    copy_row_half(s_q, kBlockM, copy_row, copy_half, src, valid);
  }
  // ---- K/V tiles. The block-table entry of this thread's key row of tile `it` is read one
  // iteration before its copy is issued (block_of), so no copy waits on a global load. Keys
  // outside [kv_lo, kv_end) are zero-filled and never read (their blocks may not exist), so a
  // masked P = 0 never meets a NaN V.
  auto block_of = [&](int it) {
    const int pos = (tile_hi - it) * kBlockN + copy_row;
    return it < n_kv_tiles && pos >= kv_lo && pos < kv_end ? table[pos >> log2_block] : -1;
  };
  auto load_kv = [&](int it, int block, int stage) {  // tile tile_hi - it into ring slot `stage`
    const int pos = (tile_hi - it) * kBlockN + copy_row;
    const bool valid = block >= 0;
    int64_t offset = 0;  // bytes
    if (valid) {
      const int64_t slot = int64_t(block) * p.block_size + (pos & (p.block_size - 1));
      offset = (slot * p.n_head_kv + head_kv) * kRowBytes;
    }
    const uint32_t dst_k = s_stages + stage * kStageBytes;
    copy_row_half(dst_k, kBlockN, copy_row, copy_half, static_cast<const unsigned char*>(p.kv.k) + offset, valid);
    copy_row_half(dst_k + kTileBytes, kBlockN, copy_row, copy_half, static_cast<const unsigned char*>(p.kv.v) + offset,
                  valid);
  };
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < n_kv_tiles) load_kv(s, block_of(s), s);
    cp_async_commit();
  }
  int next_block = block_of(kStages - 1);  // for the copy issued in iteration 0

  // This warpgroup's rows start at position wg_pos_lo (rows past q_len are computed, not written).
  const int wg_row0 = wg * 64;
  const int wg_pos_lo = first_pos + m0 + wg_row0;
  const int g = lane >> 2, t = lane & 3;  // accumulator coordinates: row group, column pair
  const int row0 = wg_row0 + warp_in_wg * 16 + g;  // this thread's rows: row0 and row0 + 8
  const int row_pos[2] = {first_pos + m0 + row0, first_pos + m0 + row0 + 8};
  const float scale_log2 = p.softmax_scale * 1.4426950408889634f;

  float o[64], s[64];  // accumulators: element 4 j + e at (row e < 2 ? row0 : row0 + 8, column 8 j + 2 t + e % 2)
#pragma unroll
  for (int i = 0; i < 64; ++i) o[i] = s[i] = 0.0f;
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};

  int stage = 0;
  for (int it = 0; it < n_kv_tiles; ++it) {
    const int tile = tile_hi - it;
    cp_async_wait<kStages - 2>();             // tile `it` (and Q) have landed for this thread ...
    wgmma::fence_generic_to_async_smem();     // ... are visible to the tensor cores ...
    __syncthreads();                          // ... for all threads; slot (it - 1) % kStages is free again
    const uint32_t s_k = s_stages + stage * kStageBytes, s_v = s_k + kTileBytes;
    int next_stage = stage + kStages - 1;
    if (next_stage >= kStages) next_stage -= kStages;
    if (++stage == kStages) stage = 0;

    // Mask only tiles that cut this warpgroup's diagonal or window edge. Every warpgroup runs
    // every tile, even one none of its rows can see (all masked: P = 0, O unchanged): a wgmma
    // under a branch ptxas cannot prove uniform is serialised (C7518), which costs far more
    // than the few masked tiles.
    const int n_start = tile * kBlockN;
    const bool need_mask = n_start + kBlockN - 1 > wg_pos_lo || (window > 0 && n_start <= wg_pos_lo + 63 - window);

    // ---- S = Q K^T over 8 k16 steps (4 per 128-byte half). Ping-pong: warpgroup 1 issues its
    // product after warpgroup 0's, so the tensor cores finish S0 first and warpgroup 0's softmax
    // runs under S1 (and warpgroup 1's under P0 V) instead of both softmaxes at once.
    if (wg == 1) named_barrier_sync(kPingPongBarrier, kThreads);
    wgmma::fence();
#pragma unroll
    for (int kd = 0; kd < kHeadDim / 16; ++kd) {
      const uint32_t half_q = (kd >> 2) * (kBlockM * 128), half_k = (kd >> 2) * (kBlockN * 128);
      const uint64_t a = wgmma::k_major(s_q + half_q + wg_row0 * 128 + (kd & 3) * 32);
      const uint64_t b = wgmma::k_major(s_k + half_k + (kd & 3) * 32);
      wgmma::m64n128k16_ss(s, a, b, kd > 0);
    }
    wgmma::commit();
    if (wg == 0) named_barrier_arrive(kPingPongBarrier, kThreads);
    // The copy of tile it + kStages - 1 goes out while the product runs.
    if (it + kStages - 1 < n_kv_tiles) load_kv(it + kStages - 1, next_block, next_stage);
    cp_async_commit();
    next_block = block_of(it + kStages);
    wgmma::wait<0>();

    if (need_mask) {
#pragma unroll
      for (int j = 0; j < 16; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = n_start + 8 * j + 2 * t + (e & 1), pos = row_pos[e >> 1];
          if (key > pos || (window > 0 && key <= pos - window)) s[4 * j + e] = -INFINITY;
        }
    }

    // ---- online softmax (rows row0 and row0 + 8; the 4 lanes of a quad hold 32 keys each)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = row_max[r];
#pragma unroll
      for (int j = 0; j < 16; ++j) mx = fmaxf(mx, fmaxf(s[4 * j + 2 * r], s[4 * j + 2 * r + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      // A row with every key so far masked keeps max -inf: subtract 0 so exp2 gives 0, not NaN.
      const float max_scaled = mx == -INFINITY ? 0.0f : mx * scale_log2;
      const float correction = exp2_approx(row_max[r] * scale_log2 - max_scaled);  // 0 on the first tile
      row_max[r] = mx;
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < 16; ++j) {
        s[4 * j + 2 * r] = exp2_approx(fmaf(s[4 * j + 2 * r], scale_log2, -max_scaled));
        s[4 * j + 2 * r + 1] = exp2_approx(fmaf(s[4 * j + 2 * r + 1], scale_log2, -max_scaled));
        sum += s[4 * j + 2 * r] + s[4 * j + 2 * r + 1];
      }
      row_sum[r] = row_sum[r] * correction + sum;  // this lane's partial sum; the quad reduces at the end
#pragma unroll
      for (int j = 0; j < 16; ++j) {
        o[4 * j + 2 * r] *= correction;
        o[4 * j + 2 * r + 1] *= correction;
      }
    }

    // ---- O += P V over 8 k16 steps of keys; P's A fragment of step kk = S columns 16 kk .. 16 kk + 15
    uint32_t pa[8][4];
#pragma unroll
    for (int kk = 0; kk < 8; ++kk) {
      pa[kk][0] = pack_bf16x2(s[8 * kk + 0], s[8 * kk + 1]);
      pa[kk][1] = pack_bf16x2(s[8 * kk + 2], s[8 * kk + 3]);
      pa[kk][2] = pack_bf16x2(s[8 * kk + 4], s[8 * kk + 5]);
      pa[kk][3] = pack_bf16x2(s[8 * kk + 6], s[8 * kk + 7]);
    }
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk)
      wgmma::m64n128k16_rs_bt(o, pa[kk], wgmma::mn_major(s_v + kk * 16 * 128, kBlockN * 128), 1);
    wgmma::commit();
    wgmma::wait<0>();
  }
  cp_async_wait<0>();  // no copy may outlive the CTA's shared memory

  // ---- out = O / l, bf16
  __nv_bfloat16* out = static_cast<__nv_bfloat16*>(p.out);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float l = row_sum[r];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    const int m = row0 + 8 * r;
    if (m0 + m >= q_len) continue;
    __nv_bfloat16* dst = out + (int64_t(q_begin + m0 + m) * p.n_head + head) * kHeadDim + 2 * t;
#pragma unroll
    for (int j = 0; j < 16; ++j)
      *reinterpret_cast<uint32_t*>(dst + 8 * j) = pack_bf16x2(o[4 * j + 2 * r] * inv, o[4 * j + 2 * r + 1] * inv);
  }
#else
  __trap();  // built without sm_90a: the launcher never selects this kernel then
#endif
}

// One warpgroup: s = q k^T, o = bf16(s) v on one tile (wgmma_attention_tile_probe).
__global__ void __launch_bounds__(128) wgmma_tile_probe_kernel(const unsigned char* q, const unsigned char* k,
                                                                const unsigned char* v, float* s_out, float* o_out) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t s_q = (smem_u32(smem_raw) + 1023u) & ~1023u;
  const uint32_t s_k = s_q + 64 * kRowBytes, s_v = s_k + kTileBytes;
  const int tid = int(threadIdx.x), lane = tid % 32, warp = tid / 32;
  for (int r = tid / 2; r < 128; r += 64) {
    if (r < 64) copy_row_half(s_q, 64, r, tid & 1, q + r * kRowBytes, true);
    copy_row_half(s_k, 128, r, tid & 1, k + r * kRowBytes, true);
    copy_row_half(s_v, 128, r, tid & 1, v + r * kRowBytes, true);
  }
  cp_async_commit();
  cp_async_wait<0>();
  wgmma::fence_generic_to_async_smem();
  __syncthreads();
  float s[64], o[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) s[i] = o[i] = 0.0f;
  wgmma::fence();
#pragma unroll
  for (int kd = 0; kd < 8; ++kd)
    wgmma::m64n128k16_ss(s, wgmma::k_major(s_q + (kd >> 2) * 64 * 128 + (kd & 3) * 32),
                         wgmma::k_major(s_k + (kd >> 2) * 128 * 128 + (kd & 3) * 32), kd > 0);
  wgmma::commit();
  wgmma::wait<0>();
  uint32_t pa[8][4];
#pragma unroll
  for (int kk = 0; kk < 8; ++kk)
#pragma unroll
    for (int i = 0; i < 4; ++i) pa[kk][i] = pack_bf16x2(s[8 * kk + 2 * i], s[8 * kk + 2 * i + 1]);
  wgmma::fence();
#pragma unroll
  for (int kk = 0; kk < 8; ++kk) wgmma::m64n128k16_rs_bt(o, pa[kk], wgmma::mn_major(s_v + kk * 16 * 128, 128 * 128), kk > 0);
  wgmma::commit();
  wgmma::wait<0>();
  const int row = warp * 16 + lane / 4, col = 2 * (lane % 4);
#pragma unroll
  for (int j = 0; j < 16; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int idx = (row + 8 * (e >> 1)) * 128 + 8 * j + col + (e & 1);
      s_out[idx] = s[4 * j + e];
      o_out[idx] = o[4 * j + e];
    }
#else
  __trap();
#endif
}

}  // namespace

bool prefill_wgmma_supported(const PagedPrefillParams& p) {
  return p.head_dim == kHeadDim && p.kv.dtype == KvDtype::Bf16;
}

void launch_prefill_wgmma(const PagedPrefillParams& p, cudaStream_t stream) {
  // Benchmarking knob: LATENTSERVE_CUDA_PREFILL_GRID=heads runs the heads-fastest grid order.
  static const bool heads_fastest = [] {
    const char* v = std::getenv("LATENTSERVE_CUDA_PREFILL_GRID");
    return v != nullptr && std::strcmp(v, "heads") == 0;
  }();
  // Opting in to > 48 KiB of dynamic shared memory: once per kernel, safe during graph capture.
  static const cudaError_t attribute_status = [] {
    const cudaError_t a =
        cudaFuncSetAttribute(paged_prefill_wgmma_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
    const cudaError_t b =
        cudaFuncSetAttribute(paged_prefill_wgmma_kernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
    return a != cudaSuccess ? a : b;
  }();
  LS_CUDA_CHECK(attribute_status);
  const int n_q_tiles = (p.max_query_len + kBlockM - 1) / kBlockM;
  if (heads_fastest) {
    if (n_q_tiles > 65535)
      kernel_fail("paged_prefill_attention: max_query_len ", p.max_query_len, " needs ", n_q_tiles,
                  " query tiles, more than the grid's 65535");
    const dim3 grid(unsigned(p.n_head), unsigned(p.n_seqs), unsigned(n_q_tiles));
    paged_prefill_wgmma_kernel<false><<<grid, kThreads, kSmemBytes, stream>>>(p);
  } else {
    const dim3 grid(unsigned(n_q_tiles), unsigned(p.n_head), unsigned(p.n_seqs));
    paged_prefill_wgmma_kernel<true><<<grid, kThreads, kSmemBytes, stream>>>(p);
  }
  LS_CUDA_CHECK_LAUNCH("paged_prefill_wgmma_kernel");
}

void wgmma_attention_tile_probe(const void* q, const void* k, const void* v, float* s, float* o,
                                cudaStream_t stream) {
  if (q == nullptr || k == nullptr || v == nullptr || s == nullptr || o == nullptr)
    kernel_fail("wgmma_attention_tile_probe: q, k, v, s and o must be device pointers, found ", q, ", ", k, ", ", v,
                ", ", static_cast<const void*>(s), ", ", static_cast<const void*>(o));
  constexpr int kProbeSmem = 64 * kRowBytes + 2 * kTileBytes + 1024;
  static const cudaError_t attribute_status =
      cudaFuncSetAttribute(wgmma_tile_probe_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kProbeSmem);
  LS_CUDA_CHECK(attribute_status);
  wgmma_tile_probe_kernel<<<1, 128, kProbeSmem, stream>>>(static_cast<const unsigned char*>(q),
                                                          static_cast<const unsigned char*>(k),
                                                          static_cast<const unsigned char*>(v), s, o);
  LS_CUDA_CHECK_LAUNCH("wgmma_tile_probe_kernel");
}

}  // namespace latentserve::cuda
