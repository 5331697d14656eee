// Paged prefill attention on Hopper's warpgroup MMA (design: docs/cuda-prefill-attention.md,
// "The wgmma kernels"). Same function as paged_prefill_attention.cu's kernels, head_dim 128,
// bf16 or FP8 (e4m3) caches: FP8 tiles travel raw and are widened to bf16 in shared memory once
// per tile (exact), the per-head scales folded into the score scale and the output.
//
// One CTA of two warpgroups per (query tile, query head, sequence); each warpgroup owns one or two
// blocks of 64 query rows (Tile: 128 rows x 128-key tiles, or 256 rows x 64-key tiles). K/V tiles
// arrive through the block table with 16-byte cp.async into a ring laid out in the 128-byte
// swizzle (wgmma.cuh); one barrier per tile. Per warpgroup, 64-row block and tile:
//   S[64, N] = Q K^T       8 x wgmma m64nNk16, Q and K from shared memory (K-major)
//   online softmax on the S accumulators (f32, exp2 with the scale folded in)
//   O[64, 128] += P V      N/16 x wgmma m64n128k16, P from registers (bf16), V N-major in shared memory
// Key tiles run from the last (diagonal) to the first, as in the mma.sync kernels.
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "backend/cuda/kernel_error.h"
#include "backend/cuda/paged_prefill_attention_wgmma.h"
#include "backend/cuda/tensor_core.cuh"
#include "backend/cuda/wgmma.cuh"

namespace latentserve::cuda {

namespace {

constexpr int kHeadDim = 128;
constexpr int kThreads = 256;            // 2 warpgroups
constexpr int kRowBytes = kHeadDim * 2;  // one bf16 row (two 128-byte halves)
static_assert(kHeadDim / 8 == 16, "rows of 16 chunks: two 128-byte swizzle halves");

// Tile shape: each warpgroup owns kMBlocks blocks of 64 query rows; kBlockN keys per tile; a
// kStages-deep K/V ring. Every shape fills ~224 KiB of shared memory (1 CTA per SM).
template <int MBlocks, int BlockN, int Stages>
struct Tile {
  static constexpr int kMBlocks = MBlocks;
  static constexpr int kBlockM = 2 * 64 * kMBlocks;       // query rows per CTA
  static constexpr int kBlockN = BlockN;
  static constexpr int kStages = Stages;
  static constexpr int kTileBytes = kBlockN * kRowBytes;  // one K (or V) tile
  static constexpr int kQBytes = kBlockM * kRowBytes;
  static constexpr int kStageBytes = 2 * kTileBytes;      // K then V
  static constexpr int kCopyThreadsPerRow = kThreads / kBlockN;  // K/V rows: one pass of the CTA
  static_assert(kBlockN == 64 || kBlockN == 128, "S tiles of m64n64 or m64n128");
  static_assert(kBlockM % 128 == 0, "Q rows: passes of 128 rows, 2 threads each");
};
using TileM128 = Tile<1, 128, 3>;  // 128 x 128: Q 32 KiB + 3 x 64 KiB
using TileM256 = Tile<2, 64, 5>;   // 256 x 64: Q 64 KiB + 5 x 32 KiB; half the K/V bytes per FLOP

// Shared memory of a tile shape for bf16 or FP8 (e4m3) K/V: [Q][ring of K, V tiles][FP8: the
// current tile's K and V widened to bf16]. FP8 rings hold the raw codes (rows of 128 bytes).
template <class T, bool kFp8>
struct Smem {
  static constexpr int kRawTileBytes = T::kBlockN * kHeadDim;  // one FP8 K (or V) tile
  static constexpr int kStageBytes = kFp8 ? 2 * kRawTileBytes : T::kStageBytes;
  static constexpr int kWideOffset = T::kQBytes + T::kStages * kStageBytes;
  static constexpr int kBytes = kWideOffset + (kFp8 ? 2 * T::kTileBytes : 0) + 1024;  // + room to align to 1024
  static constexpr int kRawCopyThreadsPerRow = kThreads / T::kBlockN;  // 8 chunks per FP8 row
  static_assert(kBytes <= 227 * 1024, "shared memory per CTA");
};

// Copies row `row` of a [rows, 128] bf16 tile from `src` (16 chunks of 16 bytes) into the
// swizzled layout; the row is shared by kTpr adjacent threads (h = 0 .. kTpr - 1) that take
// chunks h, h + kTpr, ..., so each copy instruction of a warp reads whole 32-byte sectors.
template <int kTpr>
__device__ __forceinline__ void copy_row(uint32_t tile, int rows, int row, int h, const unsigned char* src, bool valid) {
#pragma unroll
  for (int i = 0; i < 16 / kTpr; ++i) {
    const int c = h + kTpr * i;
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

// Grid (query tiles, heads, sequences): the CTAs resident at one time are the query tiles of one
// or two (sequence, head) pairs, all streaming the same few MB of K/V, so the re-reads hit L2 (95%
// measured at 8K; heads fastest, as the mma.sync kernels order their grid: 60%, with 1.4 TB/s
// from DRAM, at the same speed). Each pair's heaviest (last) query tile goes first.
template <class T, bool kFp8>
__global__ void __launch_bounds__(kThreads, 1) paged_prefill_wgmma_kernel(const PagedPrefillParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using S = Smem<T, kFp8>;
  constexpr int kBlockM = T::kBlockM, kBlockN = T::kBlockN, kStages = T::kStages, kMB = T::kMBlocks;
  constexpr int kSAcc = kBlockN / 2;  // S accumulators per thread per 64-row block
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t s_q = (smem_u32(smem_raw) + 1023u) & ~1023u;  // swizzle atoms are 1024-byte aligned
  const uint32_t s_stages = s_q + T::kQBytes;  // the K/V ring

  const int head = blockIdx.y, seq = blockIdx.z;
  const int q_tile = int(gridDim.x) - 1 - int(blockIdx.x);  // heaviest (last) query tile of the pair first
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

  // ---- Q tile [kBlockM, 128]: rows of tokens q_begin + m0 + r (zero past q_len), 2 threads a row
#pragma unroll
  for (int pass = 0; pass < kBlockM / 128; ++pass) {
    const int r = pass * 128 + (tid >> 1);
    const bool valid = m0 + r < q_len;
    const unsigned char* src = static_cast<const unsigned char*>(p.q);
    if (valid) src += (int64_t(q_begin + m0 + r) * p.q_token_stride + int64_t(head) * kHeadDim) * 2;
    copy_row<2>(s_q, kBlockM, r, tid & 1, src, valid);
  }
  // ---- K/V tiles: each thread copies part of one key row. The block-table entry of that row in
  // tile `it` is read one iteration before its copy is issued (block_of), so no copy waits on a
  // global load. Keys outside [kv_lo, kv_end) are zero-filled and never read (their blocks may
  // not exist), so a masked P = 0 never meets a NaN V.
  constexpr int kTpr = kFp8 ? S::kRawCopyThreadsPerRow : T::kCopyThreadsPerRow;
  const int copy_row_index = tid / kTpr, copy_part = tid % kTpr;
  auto block_of = [&](int it) {
    const int pos = (tile_hi - it) * kBlockN + copy_row_index;
    return it < n_kv_tiles && pos >= kv_lo && pos < kv_end ? table[pos >> log2_block] : -1;
  };
  auto load_kv = [&](int it, int block, int stage) {  // tile tile_hi - it into ring slot `stage`
    const int pos = (tile_hi - it) * kBlockN + copy_row_index;
    const bool valid = block >= 0;
    int64_t offset = 0;  // bytes
    if (valid) {
      offset = kv_row_index(p.kv.layout, block, pos & (p.block_size - 1), head_kv, p.n_head_kv, p.block_size) *
               (kFp8 ? kHeadDim : kRowBytes);
    }
    const unsigned char* k_src = static_cast<const unsigned char*>(p.kv.k) + offset;
    const unsigned char* v_src = static_cast<const unsigned char*>(p.kv.v) + offset;
    const uint32_t dst_k = s_stages + stage * S::kStageBytes;
    if constexpr (kFp8) {  // raw codes, row-major rows of 128 bytes; kTpr threads a row, 8 / kTpr chunks each
#pragma unroll
      for (int i = 0; i < 8 / kTpr; ++i) {
        const int c = copy_part + kTpr * i;
        const uint32_t dst = uint32_t(copy_row_index * kHeadDim + 16 * c);
        cp_async_16(dst_k + dst, valid ? k_src + 16 * c : k_src, valid);
        cp_async_16(dst_k + S::kRawTileBytes + dst, valid ? v_src + 16 * c : v_src, valid);
      }
    } else {
      copy_row<kTpr>(dst_k, kBlockN, copy_row_index, copy_part, k_src, valid);
      copy_row<kTpr>(dst_k + T::kTileBytes, kBlockN, copy_row_index, copy_part, v_src, valid);
    }
  };
  // FP8: the raw K and V codes of ring slot `stage` -> the bf16 tiles at s_wide, swizzled (exact:
  // every e4m3 value is a bf16).
  const uint32_t s_wide = s_q + S::kWideOffset;
  auto widen_fp8 = [&](int stage) {
    constexpr int kItems = 2 * kBlockN * 8;  // K and V rows x 8 chunks of 16 codes
    static_assert(kItems % kThreads == 0, "widening must split evenly");
#pragma unroll
    for (int i = 0; i < kItems / kThreads; ++i) {
      const int idx = tid + i * kThreads;
      const int which = idx / (kBlockN * 8), r = (idx / 8) % kBlockN, c = idx % 8;
      const uint32_t raw = s_stages + stage * S::kStageBytes + which * S::kRawTileBytes + r * kHeadDim + 16 * c;
      uint32_t w[4];
      asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                   : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3])
                   : "r"(raw));
      uint32_t out[8];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        out[2 * j] = fp8x2_to_bf16x2(w[j] & 0xffffu);
        out[2 * j + 1] = fp8x2_to_bf16x2(w[j] >> 16);
      }
      const uint32_t wide = s_wide + which * T::kTileBytes;
      asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(wide + wgmma::swizzled_offset(r, 2 * c, kBlockN)),
                   "r"(out[0]), "r"(out[1]), "r"(out[2]), "r"(out[3])
                   : "memory");
      asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(wide + wgmma::swizzled_offset(r, 2 * c + 1, kBlockN)),
                   "r"(out[4]), "r"(out[5]), "r"(out[6]), "r"(out[7])
                   : "memory");
    }
  };
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < n_kv_tiles) load_kv(s, block_of(s), s);
    cp_async_commit();
  }
  int next_block = block_of(kStages - 1);  // for the copy issued in iteration 0

  // This warpgroup's rows: kMB blocks of 64 from wg_row0 (rows past q_len are computed, not written).
  const int wg_row0 = wg * 64 * kMB;
  const int wg_pos_lo = first_pos + m0 + wg_row0;
  const int g = lane >> 2, t = lane & 3;  // accumulator coordinates: row group, column pair
  const int row0 = wg_row0 + warp_in_wg * 16 + g;  // this thread's rows: row0 + 64 mb + {0, 8}
  // FP8: one KV head per CTA, so its scales fold exactly into the score scale (k) and the output (v).
  float k_scale = 1.0f, v_scale = 1.0f;
  if constexpr (kFp8) {
    k_scale = p.kv.k_scale[head_kv * p.kv.scale_head_stride];
    v_scale = p.kv.v_scale[head_kv * p.kv.scale_head_stride];
  }
  const float scale_log2 = p.softmax_scale * 1.4426950408889634f * k_scale;

  // Accumulators of block mb: element 4 j + e at (row row0 + 64 mb + (e < 2 ? 0 : 8), column 8 j + 2 t + e % 2)
  float o[kMB][64], s[kMB][kSAcc];
  float row_max[kMB][2], row_sum[kMB][2];
#pragma unroll
  for (int mb = 0; mb < kMB; ++mb) {
#pragma unroll
    for (int i = 0; i < 64; ++i) o[mb][i] = 0.0f;
#pragma unroll
    for (int i = 0; i < kSAcc; ++i) s[mb][i] = 0.0f;
    row_max[mb][0] = row_max[mb][1] = -INFINITY;
    row_sum[mb][0] = row_sum[mb][1] = 0.0f;
  }

  int stage = 0;
  for (int it = 0; it < n_kv_tiles; ++it) {
    const int tile = tile_hi - it;
    cp_async_wait<kStages - 2>();             // tile `it` (and Q) have landed for this thread ...
    wgmma::fence_generic_to_async_smem();     // ... are visible to the tensor cores ...
    __syncthreads();                          // ... for all threads; slot (it - 1) % kStages is free again
    if constexpr (kFp8) {
      widen_fp8(stage);
      wgmma::fence_generic_to_async_smem();
      __syncthreads();
    }
    const uint32_t s_k = kFp8 ? s_wide : s_stages + stage * S::kStageBytes, s_v = s_k + T::kTileBytes;
    int next_stage = stage + kStages - 1;
    if (next_stage >= kStages) next_stage -= kStages;
    if (++stage == kStages) stage = 0;

    // Mask only tiles that cut this warpgroup's diagonal or window edge. Every warpgroup runs
    // every tile, even one none of its rows can see (all masked: P = 0, O unchanged): a wgmma
    // under a branch ptxas cannot prove uniform is serialised (C7518), which costs far more
    // than the few masked tiles.
    const int n_start = tile * kBlockN;
    const bool need_mask =
        n_start + kBlockN - 1 > wg_pos_lo || (window > 0 && n_start <= wg_pos_lo + 64 * kMB - 1 - window);

    // ---- S = Q K^T over 8 k16 steps (4 per 128-byte half), one commit group per 64-row block.
    // Ping-pong: warpgroup 1 issues its products after warpgroup 0's, so the tensor cores finish
    // warpgroup 0's S first and its softmax runs under warpgroup 1's products (and warpgroup 1's
    // under warpgroup 0's P V) instead of both softmaxes at once (+11% at 8K).
    if (wg == 1) named_barrier_sync(kPingPongBarrier, kThreads);
    wgmma::fence();
#pragma unroll
    for (int mb = 0; mb < kMB; ++mb) {
#pragma unroll
      for (int kd = 0; kd < kHeadDim / 16; ++kd) {
        const uint32_t half_q = (kd >> 2) * (kBlockM * 128), half_k = (kd >> 2) * (kBlockN * 128);
        const uint64_t a = wgmma::k_major(s_q + half_q + (wg_row0 + 64 * mb) * 128 + (kd & 3) * 32);
        const uint64_t b = wgmma::k_major(s_k + half_k + (kd & 3) * 32);
        wgmma::m64nNk16_ss<kBlockN>(s[mb], a, b, kd > 0);
      }
      wgmma::commit();
    }
    if (wg == 0) named_barrier_arrive(kPingPongBarrier, kThreads);
    // The copy of tile it + kStages - 1 goes out while the products run.
    if (it + kStages - 1 < n_kv_tiles) load_kv(it + kStages - 1, next_block, next_stage);
    cp_async_commit();
    next_block = block_of(it + kStages);

    // Block by block: block mb's softmax runs while the S product of block mb + 1 (or the P V
    // product of block mb - 1) is still on the tensor cores. When block mb's S is needed, the
    // groups that may still be in flight are the S of the later blocks and the P V of the
    // earlier ones: kMB - 1 in all.
#pragma unroll
    for (int mb = 0; mb < kMB; ++mb) {
      wgmma::wait<kMB - 1>();
      wgmma::fence_operand(s[mb]);
      if (need_mask) {
#pragma unroll
        for (int j = 0; j < kBlockN / 8; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int key = n_start + 8 * j + 2 * t + (e & 1);
            const int pos = first_pos + m0 + row0 + 64 * mb + 8 * (e >> 1);
            if (key > pos || (window > 0 && key <= pos - window)) s[mb][4 * j + e] = -INFINITY;
          }
      }
      // ---- online softmax (rows row0 + 64 mb + {0, 8}; the 4 lanes of a quad split the keys)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float mx = row_max[mb][r];
#pragma unroll
        for (int j = 0; j < kBlockN / 8; ++j) mx = fmaxf(mx, fmaxf(s[mb][4 * j + 2 * r], s[mb][4 * j + 2 * r + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        // A row with every key so far masked keeps max -inf: subtract 0 so exp2 gives 0, not NaN.
        const float max_scaled = mx == -INFINITY ? 0.0f : mx * scale_log2;
        const float correction = exp2_approx(row_max[mb][r] * scale_log2 - max_scaled);  // 0 on the first tile
        row_max[mb][r] = mx;
        float sum = 0.0f;
#pragma unroll
        for (int j = 0; j < kBlockN / 8; ++j) {
          s[mb][4 * j + 2 * r] = exp2_approx(fmaf(s[mb][4 * j + 2 * r], scale_log2, -max_scaled));
          s[mb][4 * j + 2 * r + 1] = exp2_approx(fmaf(s[mb][4 * j + 2 * r + 1], scale_log2, -max_scaled));
          sum += s[mb][4 * j + 2 * r] + s[mb][4 * j + 2 * r + 1];
        }
        row_sum[mb][r] = row_sum[mb][r] * correction + sum;  // this lane's partial; the quad reduces at the end
#pragma unroll
        for (int j = 0; j < 16; ++j) {
          o[mb][4 * j + 2 * r] *= correction;
          o[mb][4 * j + 2 * r + 1] *= correction;
        }
      }

      // ---- O += P V over the tile's k16 steps of keys; P's A fragment of step kk = S columns
      // 16 kk .. 16 kk + 15, two n8 blocks of the accumulator packed to bf16
      uint32_t pa[kBlockN / 16][4];
#pragma unroll
      for (int kk = 0; kk < kBlockN / 16; ++kk)
#pragma unroll
        for (int i = 0; i < 4; ++i) pa[kk][i] = pack_bf16x2(s[mb][8 * kk + 2 * i], s[mb][8 * kk + 2 * i + 1]);
      wgmma::fence();
#pragma unroll
      for (int kk = 0; kk < kBlockN / 16; ++kk)
        wgmma::m64n128k16_rs_bt(o[mb], pa[kk], wgmma::mn_major(s_v + kk * 16 * 128, kBlockN * 128), 1);
      wgmma::commit();
    }
    wgmma::wait<0>();
#pragma unroll
    for (int mb = 0; mb < kMB; ++mb) wgmma::fence_operand(o[mb]);
  }
  cp_async_wait<0>();  // no copy may outlive the CTA's shared memory

  // ---- out = O / l, bf16
  __nv_bfloat16* out = static_cast<__nv_bfloat16*>(p.out);
#pragma unroll
  for (int mb = 0; mb < kMB; ++mb)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float l = row_sum[mb][r];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const float inv = l > 0.0f ? v_scale / l : 0.0f;
      const int m = row0 + 64 * mb + 8 * r;
      if (m0 + m >= q_len) continue;
      __nv_bfloat16* dst = out + (int64_t(q_begin + m0 + m) * p.n_head + head) * kHeadDim + 2 * t;
#pragma unroll
      for (int j = 0; j < 16; ++j)
        *reinterpret_cast<uint32_t*>(dst + 8 * j) =
            pack_bf16x2(o[mb][4 * j + 2 * r] * inv, o[mb][4 * j + 2 * r + 1] * inv);
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
  constexpr int kTileBytes = 128 * kRowBytes;
  const uint32_t s_k = s_q + 64 * kRowBytes, s_v = s_k + kTileBytes;
  const int tid = int(threadIdx.x), lane = tid % 32, warp = tid / 32;
  for (int r = tid / 2; r < 128; r += 64) {
    if (r < 64) copy_row<2>(s_q, 64, r, tid & 1, q + r * kRowBytes, true);
    copy_row<2>(s_k, 128, r, tid & 1, k + r * kRowBytes, true);
    copy_row<2>(s_v, 128, r, tid & 1, v + r * kRowBytes, true);
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

template <class T, bool kFp8>
void launch_kernel(const PagedPrefillParams& p, cudaStream_t stream) {
  constexpr int kSmem = Smem<T, kFp8>::kBytes;
  // Opting in to > 48 KiB of dynamic shared memory: once per instantiation, safe during graph capture.
  static const cudaError_t attribute_status =
      cudaFuncSetAttribute(paged_prefill_wgmma_kernel<T, kFp8>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  LS_CUDA_CHECK(attribute_status);
  const int n_q_tiles = (p.max_query_len + T::kBlockM - 1) / T::kBlockM;
  const dim3 grid(unsigned(n_q_tiles), unsigned(p.n_head), unsigned(p.n_seqs));
  paged_prefill_wgmma_kernel<T, kFp8><<<grid, kThreads, kSmem, stream>>>(p);
  LS_CUDA_CHECK_LAUNCH("paged_prefill_wgmma_kernel");
}

}  // namespace

bool prefill_wgmma_supported(const PagedPrefillParams& p) { return p.head_dim == kHeadDim; }

int prefill_wgmma_query_tile(int query_rows) { return query_rows == 256 ? TileM256::kBlockM : TileM128::kBlockM; }

void launch_prefill_wgmma(const PagedPrefillParams& p, int query_rows, cudaStream_t stream) {
  const bool fp8 = p.kv.dtype == KvDtype::Fp8E4M3;
  if (query_rows == 256)
    fp8 ? launch_kernel<TileM256, true>(p, stream) : launch_kernel<TileM256, false>(p, stream);
  else
    fp8 ? launch_kernel<TileM128, true>(p, stream) : launch_kernel<TileM128, false>(p, stream);
}

void wgmma_attention_tile_probe(const void* q, const void* k, const void* v, float* s, float* o,
                                cudaStream_t stream) {
  if (q == nullptr || k == nullptr || v == nullptr || s == nullptr || o == nullptr)
    kernel_fail("wgmma_attention_tile_probe: q, k, v, s and o must be device pointers, found ", q, ", ", k, ", ", v,
                ", ", static_cast<const void*>(s), ", ", static_cast<const void*>(o));
  constexpr int kProbeSmem = 64 * kRowBytes + 2 * 128 * kRowBytes + 1024;
  static const cudaError_t attribute_status =
      cudaFuncSetAttribute(wgmma_tile_probe_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kProbeSmem);
  LS_CUDA_CHECK(attribute_status);
  wgmma_tile_probe_kernel<<<1, 128, kProbeSmem, stream>>>(static_cast<const unsigned char*>(q),
                                                          static_cast<const unsigned char*>(k),
                                                          static_cast<const unsigned char*>(v), s, o);
  LS_CUDA_CHECK_LAUNCH("wgmma_tile_probe_kernel");
}

}  // namespace latentserve::cuda
