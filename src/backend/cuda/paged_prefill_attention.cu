// Paged prefill attention: FlashAttention-2 on mma.sync (design: docs/cuda-prefill-attention.md).
//
// One CTA per (query tile of kBlockM = 16 * kWarps rows, query head, sequence); each warp owns
// 16 query rows and keeps its Q fragment in registers for the whole key loop. K/V tiles of
// kBlockN keys arrive through the block table with cp.async (16-byte copies, one slot per key
// row) into a kStages-deep ring of XOR-swizzled shared buffers; S = Q K^T and O += P V run on
// m16n8k16 bf16 MMAs with f32 accumulators; the softmax is online in f32 with exp2 and the
// scale folded as log2(e) * scale. Key tiles run from the last (diagonal) to the first, so the
// causal mask is applied only on the first one or two tiles a warp sees.
// FP8 caches: the codes are staged raw by cp.async and widened to bf16 tiles in shared memory
// (e4m3 -> bf16 is exact); the per-head scales are folded into the score scale (k) and the
// output (v), which is exact for one KV head per CTA.
// Variants (PagedPrefillParams::variant): Base is the kernel above; the others run
// paged_prefill_variant_kernel, the same algorithm with the tile shape as template parameters
// (docs: "Variants"). Base stays the default until the benchmark says otherwise.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cmath>
#include <cstdint>

#include "backend/cuda/device_math.cuh"
#include "backend/cuda/kernel_error.h"
#include "backend/cuda/paged_prefill_attention.h"
#include "backend/cuda/paged_prefill_attention_wgmma.h"
#include "backend/cuda/tensor_core.cuh"

namespace latentserve::cuda {

namespace {

template <int HeadDim, bool Fp8>
struct Config {
  static constexpr int kWarps = 8;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kBlockM = 16 * kWarps;  // query rows per CTA
  static constexpr int kBlockN = 64;           // keys per tile
  static constexpr int kStages = 3;            // K/V tiles in flight
  static constexpr int kMinBlocksPerSm = 1;
  static constexpr int kRowBytes = HeadDim * 2;  // one bf16 row in shared memory
  static constexpr int kChunks = HeadDim / 8;    // 16-byte chunks per bf16 row
  static constexpr int kTileBytes = kBlockN * kRowBytes;  // one bf16 K (or V) tile
  static constexpr int kQBytes = kBlockM * kRowBytes;
  static constexpr int kRawChunks = HeadDim / 16;            // 16-byte chunks per fp8 row
  static constexpr int kRawTileBytes = kBlockN * HeadDim;    // one fp8 K (or V) tile
  static constexpr int kStageBytes = Fp8 ? 2 * kRawTileBytes : 2 * kTileBytes;  // K then V
  // [Q][stage 0 .. kStages-1][FP8 only: the widened bf16 K, V tiles]
  static constexpr int kSmemBytes = kQBytes + kStages * kStageBytes + (Fp8 ? 2 * kTileBytes : 0);
  static_assert(HeadDim == 64 || HeadDim == 128, "head_dim 64 or 128");
  static_assert(kChunks >= 8, "the XOR swizzle needs at least 8 chunks per row");
};

// Byte offset of 16-byte chunk `chunk` of row `row` in a tile of rows of kRowBytes: the chunk
// index is XORed with row % 8 so the 8 rows an ldmatrix phase reads hit 8 distinct bank groups.
template <int kRowBytes>
__device__ __forceinline__ uint32_t swizzle(int row, int chunk) {
  return uint32_t(row * kRowBytes + ((chunk ^ (row & 7)) << 4));
}

// FP8 widening, one item of a stage: 16 e4m3 codes of a K (item < kBlockN * kRawChunks) or V
// row -> 16 bf16 in the swizzled wide tile (exact: every e4m3 value is a bf16).
// raw_stage: the stage's [K tile][V tile] of codes; wide: the bf16 [K tile][V tile].
template <class C>
__device__ __forceinline__ void widen_fp8_item(const unsigned char* raw_stage, unsigned char* wide, int idx) {
  const int which = idx / (C::kBlockN * C::kRawChunks), rem = idx % (C::kBlockN * C::kRawChunks);
  const int r = rem / C::kRawChunks, c = rem % C::kRawChunks;
  const uint4 codes = *reinterpret_cast<const uint4*>(raw_stage + which * C::kRawTileBytes + r * C::kRawChunks * 16 + c * 16);
  const uint32_t w[4] = {codes.x, codes.y, codes.z, codes.w};
  uint32_t out[8];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    out[2 * j] = fp8x2_to_bf16x2(w[j] & 0xffffu);
    out[2 * j + 1] = fp8x2_to_bf16x2(w[j] >> 16);
  }
  unsigned char* tile = wide + which * C::kTileBytes;
  *reinterpret_cast<uint4*>(tile + swizzle<C::kRowBytes>(r, 2 * c)) = make_uint4(out[0], out[1], out[2], out[3]);
  *reinterpret_cast<uint4*>(tile + swizzle<C::kRowBytes>(r, 2 * c + 1)) = make_uint4(out[4], out[5], out[6], out[7]);
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// c[16x8] += a[16x16] · b[16x8], bf16 inputs, f32 accumulators.
__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <int HeadDim, bool Fp8>
__global__ void __launch_bounds__(Config<HeadDim, Fp8>::kThreads, Config<HeadDim, Fp8>::kMinBlocksPerSm)
    paged_prefill_kernel(const PagedPrefillParams p) {
  using C = Config<HeadDim, Fp8>;
  constexpr int kBlockM = C::kBlockM, kBlockN = C::kBlockN, kStages = C::kStages;
  extern __shared__ __align__(128) unsigned char smem[];

  const int head = blockIdx.x, seq = blockIdx.y;
  const int q_tile = int(gridDim.z) - 1 - int(blockIdx.z);  // heaviest (last) query tiles first
  const int q_begin = p.query_start_loc[seq];
  const int q_len = p.query_start_loc[seq + 1] - q_begin;
  const int m0 = q_tile * kBlockM;  // first query row of this tile within the sequence
  if (m0 >= q_len) return;
  const int seq_len = p.seq_lens[seq];
  const int first_pos = seq_len - q_len;  // position of the sequence's first query
  if (first_pos < 0) return;              // malformed step: leave the rows unwritten (NaN-visible)

  const int window = p.sliding_window;
  const int pos_lo = first_pos + m0;                                  // the tile's first query position
  const int kv_end = first_pos + min(q_len, m0 + kBlockM);           // past the last real query's position
  const int kv_lo = window > 0 ? max(0, pos_lo - window + 1) : 0;    // no query of the tile sees a key below
  const int tile_lo = kv_lo / kBlockN, tile_hi = (kv_end - 1) / kBlockN;
  const int n_kv_tiles = tile_hi - tile_lo + 1;

  const int tid = int(threadIdx.x), warp = tid / 32, lane = tid % 32;
  const int head_kv = head / (p.n_head / p.n_head_kv);
  const int log2_block = __ffs(p.block_size) - 1;
  const int32_t* table = p.block_tables + int64_t(seq) * p.max_blocks_per_seq;

  const uint32_t s_q = smem_u32(smem);
  const uint32_t s_stages = s_q + C::kQBytes;
  const uint32_t s_wide = s_stages + kStages * C::kStageBytes;  // FP8: the bf16 K, V tiles

  // ---- Q tile: [kBlockM, HeadDim] bf16 rows of tokens q_begin + m0 + r (zero past q_len)
  {
    const __nv_bfloat16* q = static_cast<const __nv_bfloat16*>(p.q);
    const __nv_bfloat16* q_rows = q + int64_t(q_begin + m0) * p.q_token_stride + int64_t(head) * HeadDim;
    constexpr int kPasses = kBlockM * C::kChunks / C::kThreads;
#pragma unroll
    for (int i = 0; i < kPasses; ++i) {
      const int idx = tid + i * C::kThreads, r = idx / C::kChunks, c = idx % C::kChunks;
      const bool valid = m0 + r < q_len;
      const __nv_bfloat16* src = valid ? q_rows + int64_t(r) * p.q_token_stride + c * 8 : q;
      cp_async_16(s_q + swizzle<C::kRowBytes>(r, c), src, valid);
    }
  }

  // ---- K/V tile `tile` (keys [tile*kBlockN, +kBlockN)) into ring slot `stage`. Each key row's slot
  // comes from the block table; keys outside [kv_lo, kv_end) are zero-filled, never read (their
  // blocks may not exist), so a masked P = 0 never meets a garbage (NaN) V.
  auto load_kv = [&](int tile, int stage) {
    const int n_start = tile * kBlockN;
    const uint32_t dst_k = s_stages + stage * C::kStageBytes, dst_v = dst_k + C::kStageBytes / 2;
    const unsigned char* k_base = static_cast<const unsigned char*>(p.kv.k);
    const unsigned char* v_base = static_cast<const unsigned char*>(p.kv.v);
    constexpr int kChunksPerRow = Fp8 ? C::kRawChunks : C::kChunks;
    constexpr int kPasses = kBlockN * kChunksPerRow / C::kThreads;
    static_assert(kPasses >= 1 && kBlockN * kChunksPerRow % C::kThreads == 0, "tile copy must split evenly");
#pragma unroll
    for (int i = 0; i < kPasses; ++i) {
      const int idx = tid + i * C::kThreads, r = idx / kChunksPerRow, c = idx % kChunksPerRow;
      const int pos = n_start + r;
      const bool valid = pos >= kv_lo && pos < kv_end;
      int64_t offset = 0;  // bytes
      if (valid) {
        offset = kv_row_index(p.kv.layout, table[pos >> log2_block], pos & (p.block_size - 1), head_kv, p.n_head_kv,
                              p.block_size) * HeadDim * (Fp8 ? 1 : 2) + c * 16;
      }
      const uint32_t dst = Fp8 ? uint32_t(r * HeadDim + c * 16) : swizzle<C::kRowBytes>(r, c);
      cp_async_16(dst_k + dst, k_base + offset, valid);
      cp_async_16(dst_v + dst, v_base + offset, valid);
    }
  };

  // FP8: raw codes of ring slot `stage` -> bf16 swizzled K, V tiles at s_wide.
  auto widen_fp8 = [&](int stage) {
    constexpr int kItems = 2 * kBlockN * C::kRawChunks;  // K and V, 16 codes each
    constexpr int kPasses = kItems / C::kThreads;
    static_assert(kItems % C::kThreads == 0, "widening must split evenly");
#pragma unroll
    for (int i = 0; i < kPasses; ++i) {
      widen_fp8_item<C>(smem + C::kQBytes + stage * C::kStageBytes, smem + (s_wide - s_q), tid + i * C::kThreads);
    }
  };

  // Prologue: Q and the first kStages-1 key tiles (last tile first), one commit group each.
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < n_kv_tiles) load_kv(tile_hi - s, s);
    cp_async_commit();
  }

  // This warp's real query rows: positions [w_pos_lo, w_pos_hi]; none when the warp is past q_len.
  const int w_row0 = m0 + warp * 16;
  const int w_rows = min(16, q_len - w_row0);
  const int w_pos_lo = first_pos + w_row0, w_pos_hi = w_pos_lo + w_rows - 1;
  const int g = lane >> 2, t = lane & 3;  // mma fragment coordinates: row group, column pair
  const int row_pos[2] = {w_pos_lo + g, w_pos_lo + g + 8};

  // Per-lane ldmatrix coordinates (see docs: fragment layouts).
  const int q_row = warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, q_chunk = lane >> 4;
  const int k_row = (lane & 7) + (lane >> 4) * 8, k_chunk = (lane >> 3) & 1;
  const int v_row = (lane & 7) + ((lane >> 3) & 1) * 8, v_chunk = lane >> 4;

  float k_scale = 1.0f, v_scale = 1.0f;
  if constexpr (Fp8) {
    k_scale = p.kv.k_scale[head_kv * p.kv.scale_head_stride];
    v_scale = p.kv.v_scale[head_kv * p.kv.scale_head_stride];
  }
  const float scale_log2 = p.softmax_scale * 1.4426950408889634f * k_scale;

  uint32_t q_frag[HeadDim / 16][4];
  float o[HeadDim / 8][4];
#pragma unroll
  for (int d = 0; d < HeadDim / 8; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.0f;
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};

  int stage = 0;
  for (int it = 0; it < n_kv_tiles; ++it) {
    const int tile = tile_hi - it;
    cp_async_wait<kStages - 2>();  // tile `it` (and Q) have landed for this thread ...
    __syncthreads();               // ... and for all; slot (it - 1) % kStages is free again
    if (it == 0) {
#pragma unroll
      for (int kd = 0; kd < HeadDim / 16; ++kd)
        ldmatrix_x4(q_frag[kd], s_q + swizzle<C::kRowBytes>(q_row, kd * 2 + q_chunk));
    }
    if constexpr (Fp8) {
      widen_fp8(stage);
      __syncthreads();
    }
    {
      const int next = it + kStages - 1;
      int next_stage = stage + kStages - 1;
      if (next_stage >= kStages) next_stage -= kStages;
      if (next < n_kv_tiles) load_kv(tile_hi - next, next_stage);
      cp_async_commit();
    }
    const uint32_t s_k = Fp8 ? s_wide : s_stages + stage * C::kStageBytes;
    const uint32_t s_v = s_k + (Fp8 ? C::kTileBytes : C::kStageBytes / 2);
    if (++stage == kStages) stage = 0;

    const int n_start = tile * kBlockN;
    // Warp-uniform: skip a tile none of this warp's rows can see (above the diagonal, or wholly
    // before every row's window); mask only tiles that cut the diagonal or a window edge.
    if (w_rows <= 0 || n_start > w_pos_hi) continue;
    if (window > 0 && n_start + kBlockN - 1 <= w_pos_lo - window) continue;
    const bool need_mask =
        n_start + kBlockN - 1 > w_pos_lo || (window > 0 && n_start <= w_pos_lo + 15 - window);

    // ---- S = Q K^T: [16, kBlockN] per warp, f32
    float s[kBlockN / 8][4];
#pragma unroll
    for (int j = 0; j < kBlockN / 8; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
    for (int kd = 0; kd < HeadDim / 16; ++kd) {
#pragma unroll
      for (int np = 0; np < kBlockN / 16; ++np) {
        uint32_t b[4];
        ldmatrix_x4(b, s_k + swizzle<C::kRowBytes>(np * 16 + k_row, kd * 2 + k_chunk));
        mma_bf16(s[2 * np], q_frag[kd], b[0], b[1]);
        mma_bf16(s[2 * np + 1], q_frag[kd], b[2], b[3]);
      }
    }

    if (need_mask) {
#pragma unroll
      for (int j = 0; j < kBlockN / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = n_start + j * 8 + 2 * t + (e & 1), pos = row_pos[e >> 1];
          if (key > pos || (window > 0 && key <= pos - window)) s[j][e] = -INFINITY;
        }
    }

    // ---- online softmax (rows g and g + 8 of the warp; the 4 lanes of a row hold 16 keys each)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = row_max[r];
#pragma unroll
      for (int j = 0; j < kBlockN / 8; ++j) mx = fmaxf(mx, fmaxf(s[j][2 * r], s[j][2 * r + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      // A row with every key so far masked keeps max -inf: subtract 0 so exp2 gives 0, not NaN.
      const float max_scaled = mx == -INFINITY ? 0.0f : mx * scale_log2;
      const float correction = exp2_approx(row_max[r] * scale_log2 - max_scaled);  // 0 on the first tile
      row_max[r] = mx;
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < kBlockN / 8; ++j) {
        s[j][2 * r] = exp2_approx(fmaf(s[j][2 * r], scale_log2, -max_scaled));
        s[j][2 * r + 1] = exp2_approx(fmaf(s[j][2 * r + 1], scale_log2, -max_scaled));
        sum += s[j][2 * r] + s[j][2 * r + 1];
      }
      row_sum[r] = row_sum[r] * correction + sum;  // this lane's partial sum; lanes reduce at the end
#pragma unroll
      for (int d = 0; d < HeadDim / 8; ++d) {
        o[d][2 * r] *= correction;
        o[d][2 * r + 1] *= correction;
      }
    }

    // ---- O += P V: P from the S accumulators (bf16), V through ldmatrix.trans
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk) {
      const uint32_t a[4] = {pack_bf16x2(s[2 * kk][0], s[2 * kk][1]), pack_bf16x2(s[2 * kk][2], s[2 * kk][3]),
                             pack_bf16x2(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                             pack_bf16x2(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int dp = 0; dp < HeadDim / 16; ++dp) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, s_v + swizzle<C::kRowBytes>(kk * 16 + v_row, dp * 2 + v_chunk));
        mma_bf16(o[2 * dp], a, b[0], b[1]);
        mma_bf16(o[2 * dp + 1], a, b[2], b[3]);
      }
    }
  }
  cp_async_wait<0>();  // no copy may outlive the CTA's shared memory

  // ---- out = O / l (times the V scale), bf16
  __nv_bfloat16* out = static_cast<__nv_bfloat16*>(p.out);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float l = row_sum[r];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const float inv = l > 0.0f ? v_scale / l : 0.0f;
    const int m = w_row0 + g + 8 * r;
    if (m >= q_len) continue;
    __nv_bfloat16* dst = out + (int64_t(q_begin + m) * p.n_head + head) * HeadDim + 2 * t;
#pragma unroll
    for (int d = 0; d < HeadDim / 8; ++d)
      *reinterpret_cast<uint32_t*>(dst + d * 8) = pack_bf16x2(o[d][2 * r] * inv, o[d][2 * r + 1] * inv);
  }
}

// ==== Variant kernel (docs/cuda-prefill-attention.md, "Variants") =================================
// The same algorithm as paged_prefill_kernel, with the shape as template parameters: kWarps warps of
// kMTiles m16 tiles (16 * kMTiles contiguous query rows) each, kBlockN-key tiles, a kStages ring.
// With kMTiles == 1 each warp keeps its Q fragment in registers (as Base); with kMTiles == 2 the
// registers go to the second O / S tile and Q is re-read from shared memory per k16 step, and each
// K / V fragment loaded by ldmatrix feeds two MMAs instead of one. kPackGqa: the CTA serves one KV
// head, its rows are (query, head of the group) pairs with the head fastest, so one K/V tile in
// shared memory serves the whole group. kPolyExp: every 8th n8 column block of P takes its exp2
// from a polynomial on the FMA pipe instead of MUFU.
template <int HeadDim, bool Fp8, int Warps, int MTiles, int BlockN, int Stages, bool PackGqa, bool PolyExp>
struct VariantConfig {
  static constexpr int kWarps = Warps;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kMTiles = MTiles;
  static constexpr int kWarpRows = 16 * kMTiles;
  static constexpr int kBlockM = kWarpRows * kWarps;  // rows per CTA
  static constexpr int kBlockN = BlockN;
  static constexpr int kStages = Stages;
  static constexpr bool kQInRegs = kMTiles == 1;
  static constexpr bool kPackGqa = PackGqa;
  static constexpr bool kPolyExp = PolyExp;
  static constexpr int kRowBytes = HeadDim * 2;
  static constexpr int kChunks = HeadDim / 8;
  static constexpr int kTileBytes = kBlockN * kRowBytes;
  static constexpr int kQBytes = kBlockM * kRowBytes;
  static constexpr int kRawChunks = HeadDim / 16;
  static constexpr int kRawTileBytes = kBlockN * HeadDim;
  static constexpr int kStageBytes = Fp8 ? 2 * kRawTileBytes : 2 * kTileBytes;
  // + kRowBytes: room to start the tiles on a kRowBytes boundary (see the kernel)
  static constexpr int kSmemBytes = kQBytes + kStages * kStageBytes + (Fp8 ? 2 * kTileBytes : 0) + kRowBytes;
  // 2 CTAs per SM when both the registers (<= 256 per thread) and 2 x smem (<= 227 KiB) allow it.
  static constexpr int kMinBlocksPerSm = (kThreads <= 128 && 2 * kSmemBytes <= 227 * 1024) ? 2 : 1;
  static_assert(HeadDim == 64 || HeadDim == 128, "head_dim 64 or 128");
  static_assert(kMTiles == 1 || kMTiles == 2, "16 or 32 rows per warp");
  static_assert(kBlockN % 16 == 0 && kStages >= 2, "key tile of k16 steps, at least double buffering");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory per CTA");
};

// 2^x for x <= ~0 on the FMA pipe: x = n + f, n = round(x), f in [-0.5, 0.5]; 2^f by a degree-3
// relative-minimax polynomial (max relative error 7.5e-5, below P's bf16 rounding, 2^-9), and 2^n
// added to the exponent field by one shift-add (ptxas: one IMAD/LEA): bits(x + 1.5 * 2^23) =
// bits(1.5 * 2^23) + n, and bits(1.5 * 2^23) << 23 == 0 mod 2^32, so the shift leaves n << 23. Clamped at -126 (the result stays a positive
// number ~1e-38 instead of 0 for -inf: negligible next to any visible key's weight).
__device__ __forceinline__ float exp2_poly(float x) {
  x = fmaxf(x, -126.0f);
  const float shifted = __fadd_rn(x, 12582912.0f);  // 1.5 * 2^23: rounds x to an integer
  const float n = __fsub_rn(shifted, 12582912.0f);
  const float f = __fsub_rn(x, n);
  float y = fmaf(0.05517166493031861f, f, 0.24261112187716832f);
  y = fmaf(y, f, 0.6932609862225352f);
  y = fmaf(y, f, 0.9999280735783069f);
  return __uint_as_float((__float_as_uint(shifted) << 23) + __float_as_uint(y));
}

template <class C, int HeadDim, bool Fp8>
__global__ void __launch_bounds__(C::kThreads, C::kMinBlocksPerSm)
    paged_prefill_variant_kernel(const PagedPrefillParams p) {
  constexpr int kBlockM = C::kBlockM, kBlockN = C::kBlockN, kStages = C::kStages, kMT = C::kMTiles;
  constexpr int kNT = kBlockN / 8;  // n8 tiles of S per m16 tile
  extern __shared__ __align__(128) unsigned char smem_raw[];
  // Tiles start on a kRowBytes boundary (kSmemBytes has room for the shift): the ldmatrix
  // addresses below are then (lane base) XOR (k16 step), one LOP3 with an immediate each.
  unsigned char* smem = smem_raw + ((C::kRowBytes - (smem_u32(smem_raw) & (C::kRowBytes - 1))) & (C::kRowBytes - 1));

  const int group = p.n_head / p.n_head_kv;
  // Rows of the CTA tile: row r is query r / rpq of the tile, head head0 + r % rpq.
  const int rpq = C::kPackGqa ? group : 1;
  const int head_kv = C::kPackGqa ? int(blockIdx.x) : int(blockIdx.x) / group;
  const int head0 = C::kPackGqa ? head_kv * group : int(blockIdx.x);
  const int tile_q = C::kPackGqa ? kBlockM / rpq : kBlockM;  // queries per tile (launcher: rpq <= kBlockM)
  const int rows_used = C::kPackGqa ? tile_q * rpq : kBlockM;
  auto row_query = [&](int r) { return C::kPackGqa ? r / rpq : r; };
  auto row_head = [&](int r) { return C::kPackGqa ? head0 + r % rpq : head0; };

  const int seq = blockIdx.y;
  const int q_tile = int(gridDim.z) - 1 - int(blockIdx.z);
  const int q_begin = p.query_start_loc[seq];
  const int q_len = p.query_start_loc[seq + 1] - q_begin;
  const int m0 = q_tile * tile_q;  // first query of this tile within the sequence
  if (m0 >= q_len) return;
  const int seq_len = p.seq_lens[seq];
  const int first_pos = seq_len - q_len;
  if (first_pos < 0) return;

  const int window = p.sliding_window;
  const int pos_lo = first_pos + m0;
  const int kv_end = first_pos + min(q_len, m0 + tile_q);
  const int kv_lo = window > 0 ? max(0, pos_lo - window + 1) : 0;
  const int tile_lo = kv_lo / kBlockN, tile_hi = (kv_end - 1) / kBlockN;
  const int n_kv_tiles = tile_hi - tile_lo + 1;

  const int tid = int(threadIdx.x), warp = tid / 32, lane = tid % 32;
  const int log2_block = __ffs(p.block_size) - 1;
  const int32_t* table = p.block_tables + int64_t(seq) * p.max_blocks_per_seq;

  const uint32_t s_q = smem_u32(smem);
  const uint32_t s_stages = s_q + C::kQBytes;
  const uint32_t s_wide = s_stages + kStages * C::kStageBytes;

  // ---- Q tile: row r <- token q_begin + m0 + row_query(r), head row_head(r); zero when invalid
  {
    const __nv_bfloat16* q = static_cast<const __nv_bfloat16*>(p.q);
    constexpr int kPasses = kBlockM * C::kChunks / C::kThreads;
    static_assert(kBlockM * C::kChunks % C::kThreads == 0, "Q copy must split evenly");
#pragma unroll
    for (int i = 0; i < kPasses; ++i) {
      const int idx = tid + i * C::kThreads, r = idx / C::kChunks, c = idx % C::kChunks;
      const int qi = row_query(r);
      const bool valid = r < rows_used && m0 + qi < q_len;
      const __nv_bfloat16* src =
          valid ? q + int64_t(q_begin + m0 + qi) * p.q_token_stride + int64_t(row_head(r)) * HeadDim + c * 8 : q;
      cp_async_16(s_q + swizzle<C::kRowBytes>(r, c), src, valid);
    }
  }

  // Each key row is copied by kThreadsPerRow adjacent threads (one block-table read and one
  // address per thread per tile); thread h of a row takes chunks h, h + kThreadsPerRow, ... so
  // each copy instruction reads whole 32-byte sectors, and its swizzled destination is the lane's
  // base XOR an immediate.
  auto load_kv = [&](int tile, int stage) {
    constexpr int kChunksPerRow = Fp8 ? C::kRawChunks : C::kChunks;
    constexpr int kThreadsPerRow = C::kThreads / kBlockN;
    constexpr int kCopies = kChunksPerRow / kThreadsPerRow;  // per thread per K (and V) tile
    static_assert(kThreadsPerRow >= 1 && (kThreadsPerRow & (kThreadsPerRow - 1)) == 0 &&
                      C::kThreads % kBlockN == 0 && kChunksPerRow % kThreadsPerRow == 0,
                  "tile copy must split evenly");
    const int r = tid / kThreadsPerRow, h = tid % kThreadsPerRow;
    const int pos = tile * kBlockN + r;
    const bool valid = pos >= kv_lo && pos < kv_end;
    int64_t offset = 0;  // bytes
    if (valid) {
      offset = kv_row_index(p.kv.layout, table[pos >> log2_block], pos & (p.block_size - 1), head_kv, p.n_head_kv,
                            p.block_size) * HeadDim * (Fp8 ? 1 : 2) + h * 16;
    }
    const unsigned char* k_src = static_cast<const unsigned char*>(p.kv.k) + offset;
    const unsigned char* v_src = static_cast<const unsigned char*>(p.kv.v) + offset;
    const uint32_t dst_k = s_stages + stage * C::kStageBytes, dst_v = dst_k + C::kStageBytes / 2;
    const uint32_t lane_dst = Fp8 ? uint32_t(r * HeadDim + h * 16) : swizzle<C::kRowBytes>(r, h);
#pragma unroll
    for (int i = 0; i < kCopies; ++i) {
      // chunk c = h + kThreadsPerRow * i == h | kThreadsPerRow * i: swizzle(r, c) == swizzle(r, h) ^ (16 * kThreadsPerRow * i)
      const uint32_t dst = Fp8 ? lane_dst + uint32_t(16 * kThreadsPerRow * i) : lane_dst ^ uint32_t(16 * kThreadsPerRow * i);
      cp_async_16(dst_k + dst, valid ? k_src + 16 * kThreadsPerRow * i : k_src, valid);
      cp_async_16(dst_v + dst, valid ? v_src + 16 * kThreadsPerRow * i : v_src, valid);
    }
  };

  auto widen_fp8 = [&](int stage) {
    constexpr int kItems = 2 * kBlockN * C::kRawChunks;
    constexpr int kPasses = kItems / C::kThreads;
    static_assert(kItems % C::kThreads == 0, "widening must split evenly");
    // Not unrolled: with O (and for kMTiles 2 the second O tile) live, 8 passes of 12 registers
    // in flight would spill.
#pragma unroll 1
    for (int i = 0; i < kPasses; ++i) {
      widen_fp8_item<C>(smem + C::kQBytes + stage * C::kStageBytes, smem + (s_wide - s_q), tid + i * C::kThreads);
    }
  };

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < n_kv_tiles) load_kv(tile_hi - s, s);
    cp_async_commit();
  }

  // This warp's rows [w_row0, w_row0 + kWarpRows) of the tile; the real ones are those < rows_used
  // whose query is < q_len. Positions: w_pos_lo (first row) .. w_pos_hi (last real row).
  const int w_row0 = warp * C::kWarpRows;
  const int w_last_row = min(w_row0 + C::kWarpRows, rows_used) - 1;
  const bool w_any = w_last_row >= w_row0 && m0 + row_query(w_row0) < q_len;
  const int w_pos_lo = first_pos + m0 + row_query(w_row0);
  const int w_pos_hi = first_pos + min(m0 + row_query(max(w_last_row, w_row0)), q_len - 1);
  // The warp's largest row position, real or not (for the window-edge mask test: conservative).
  const int w_pos_top = first_pos + m0 + row_query(w_row0 + C::kWarpRows - 1);
  const int g = lane >> 2, t = lane & 3;

  // Per-lane ldmatrix bases: swizzle(row + 16 i, 2 kd + chunk) == (swizzle(row, chunk) ^ 32 kd)
  // + 16 i * kRowBytes, as the XOR term stays below kRowBytes and row + 16 i keeps row % 8.
  const int q_row = w_row0 + (lane & 7) + ((lane >> 3) & 1) * 8, q_chunk = lane >> 4;
  const int k_row = (lane & 7) + (lane >> 4) * 8, k_chunk = (lane >> 3) & 1;
  const int v_row = (lane & 7) + ((lane >> 3) & 1) * 8, v_chunk = lane >> 4;
  const uint32_t q_lane = s_q + swizzle<C::kRowBytes>(q_row, q_chunk);
  const uint32_t k_lane_off = swizzle<C::kRowBytes>(k_row, k_chunk);
  const uint32_t v_lane_off = swizzle<C::kRowBytes>(v_row, v_chunk);

  float k_scale = 1.0f, v_scale = 1.0f;
  if constexpr (Fp8) {
    k_scale = p.kv.k_scale[head_kv * p.kv.scale_head_stride];
    v_scale = p.kv.v_scale[head_kv * p.kv.scale_head_stride];
  }
  const float scale_log2 = p.softmax_scale * 1.4426950408889634f * k_scale;

  uint32_t q_frag[C::kQInRegs ? HeadDim / 16 : 1][4];
  float o[kMT][HeadDim / 8][4];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int d = 0; d < HeadDim / 8; ++d) o[mt][d][0] = o[mt][d][1] = o[mt][d][2] = o[mt][d][3] = 0.0f;
  float row_max[kMT][2], row_sum[kMT][2];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) row_max[mt][0] = row_max[mt][1] = -INFINITY, row_sum[mt][0] = row_sum[mt][1] = 0.0f;

  int stage = 0;
  for (int it = 0; it < n_kv_tiles; ++it) {
    const int tile = tile_hi - it;
    cp_async_wait<kStages - 2>();
    __syncthreads();
    if constexpr (C::kQInRegs) {
      if (it == 0) {
#pragma unroll
        for (int kd = 0; kd < HeadDim / 16; ++kd)
          ldmatrix_x4(q_frag[kd], q_lane ^ uint32_t(kd * 32));
      }
    }
    if constexpr (Fp8) {
      widen_fp8(stage);
      __syncthreads();
    }
    {
      const int next = it + kStages - 1;
      int next_stage = stage + kStages - 1;
      if (next_stage >= kStages) next_stage -= kStages;
      if (next < n_kv_tiles) load_kv(tile_hi - next, next_stage);
      cp_async_commit();
    }
    const uint32_t s_k = Fp8 ? s_wide : s_stages + stage * C::kStageBytes;
    const uint32_t s_v = s_k + (Fp8 ? C::kTileBytes : C::kStageBytes / 2);
    const uint32_t k_lane = s_k + k_lane_off, v_lane = s_v + v_lane_off;
    if (++stage == kStages) stage = 0;

    const int n_start = tile * kBlockN;
    if (!w_any || n_start > w_pos_hi) continue;
    if (window > 0 && n_start + kBlockN - 1 <= w_pos_lo - window) continue;
    const bool need_mask = n_start + kBlockN - 1 > w_pos_lo || (window > 0 && n_start <= w_pos_top - window);

    // ---- S = Q K^T: [kWarpRows, kBlockN] per warp; each K fragment feeds kMT MMAs
    float s[kMT][kNT][4];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int j = 0; j < kNT; ++j) s[mt][j][0] = s[mt][j][1] = s[mt][j][2] = s[mt][j][3] = 0.0f;
#pragma unroll
    for (int kd = 0; kd < HeadDim / 16; ++kd) {
      uint32_t qa[kMT][4];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        if constexpr (C::kQInRegs) {
#pragma unroll
          for (int e = 0; e < 4; ++e) qa[mt][e] = q_frag[kd][e];
        } else {
          ldmatrix_x4(qa[mt], (q_lane ^ uint32_t(kd * 32)) + mt * 16 * C::kRowBytes);
        }
      }
#pragma unroll
      for (int np = 0; np < kBlockN / 16; ++np) {
        uint32_t b[4];
        ldmatrix_x4(b, (k_lane ^ uint32_t(kd * 32)) + np * 16 * C::kRowBytes);
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          mma_bf16(s[mt][2 * np], qa[mt], b[0], b[1]);
          mma_bf16(s[mt][2 * np + 1], qa[mt], b[2], b[3]);
        }
      }
    }

    if (need_mask) {
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int j = 0; j < kNT; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int key = n_start + j * 8 + 2 * t + (e & 1);
            const int pos = first_pos + m0 + row_query(w_row0 + mt * 16 + g + 8 * (e >> 1));
            if (key > pos || (window > 0 && key <= pos - window)) s[mt][j][e] = -INFINITY;
          }
    }

    // ---- online softmax, rows g and g + 8 of each m16 tile
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float mx = row_max[mt][r];
#pragma unroll
        for (int j = 0; j < kNT; ++j) mx = fmaxf(mx, fmaxf(s[mt][j][2 * r], s[mt][j][2 * r + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float max_scaled = mx == -INFINITY ? 0.0f : mx * scale_log2;
        const float correction = exp2_approx(row_max[mt][r] * scale_log2 - max_scaled);
        row_max[mt][r] = mx;
        float sum = 0.0f;
#pragma unroll
        for (int j = 0; j < kNT; ++j) {
          const float x0 = fmaf(s[mt][j][2 * r], scale_log2, -max_scaled);
          const float x1 = fmaf(s[mt][j][2 * r + 1], scale_log2, -max_scaled);
          if (C::kPolyExp && j % 8 == 7) {
            s[mt][j][2 * r] = exp2_poly(x0);
            s[mt][j][2 * r + 1] = exp2_poly(x1);
          } else {
            s[mt][j][2 * r] = exp2_approx(x0);
            s[mt][j][2 * r + 1] = exp2_approx(x1);
          }
          sum += s[mt][j][2 * r] + s[mt][j][2 * r + 1];
        }
        row_sum[mt][r] = row_sum[mt][r] * correction + sum;
#pragma unroll
        for (int d = 0; d < HeadDim / 8; ++d) {
          o[mt][d][2 * r] *= correction;
          o[mt][d][2 * r + 1] *= correction;
        }
      }

    // ---- O += P V; each V fragment feeds kMT MMAs
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk) {
      uint32_t a[kMT][4];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        a[mt][0] = pack_bf16x2(s[mt][2 * kk][0], s[mt][2 * kk][1]);
        a[mt][1] = pack_bf16x2(s[mt][2 * kk][2], s[mt][2 * kk][3]);
        a[mt][2] = pack_bf16x2(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
        a[mt][3] = pack_bf16x2(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
      }
#pragma unroll
      for (int dp = 0; dp < HeadDim / 16; ++dp) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, (v_lane ^ uint32_t(dp * 32)) + kk * 16 * C::kRowBytes);
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          mma_bf16(o[mt][2 * dp], a[mt], b[0], b[1]);
          mma_bf16(o[mt][2 * dp + 1], a[mt], b[2], b[3]);
        }
      }
    }
  }
  cp_async_wait<0>();

  __nv_bfloat16* out = static_cast<__nv_bfloat16*>(p.out);
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float l = row_sum[mt][r];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const float inv = l > 0.0f ? v_scale / l : 0.0f;
      const int row = w_row0 + mt * 16 + g + 8 * r, qi = row_query(row);
      if (row >= rows_used || m0 + qi >= q_len) continue;
      __nv_bfloat16* dst = out + (int64_t(q_begin + m0 + qi) * p.n_head + row_head(row)) * HeadDim + 2 * t;
#pragma unroll
      for (int d = 0; d < HeadDim / 8; ++d)
        *reinterpret_cast<uint32_t*>(dst + d * 8) = pack_bf16x2(o[mt][d][2 * r] * inv, o[mt][d][2 * r + 1] * inv);
    }
}

template <int HeadDim, bool Fp8>
void launch(const PagedPrefillParams& p, cudaStream_t stream) {
  using C = Config<HeadDim, Fp8>;
  // Opting in to > 48 KiB of dynamic shared memory is a function attribute, not a stream
  // operation: done once per instantiation, safe during graph capture.
  static const cudaError_t attribute_status = cudaFuncSetAttribute(
      paged_prefill_kernel<HeadDim, Fp8>, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmemBytes);
  LS_CUDA_CHECK(attribute_status);
  const int n_q_tiles = (p.max_query_len + C::kBlockM - 1) / C::kBlockM;
  if (n_q_tiles > 65535)
    kernel_fail("paged_prefill_attention: max_query_len ", p.max_query_len, " needs ", n_q_tiles,
                " query tiles, more than the grid's 65535");
  const dim3 grid(unsigned(p.n_head), unsigned(p.n_seqs), unsigned(n_q_tiles));
  paged_prefill_kernel<HeadDim, Fp8><<<grid, C::kThreads, C::kSmemBytes, stream>>>(p);
  LS_CUDA_CHECK_LAUNCH("paged_prefill_kernel");
}

template <class C, int HeadDim, bool Fp8>
void launch_variant(const PagedPrefillParams& p, cudaStream_t stream) {
  static const cudaError_t attribute_status = cudaFuncSetAttribute(
      paged_prefill_variant_kernel<C, HeadDim, Fp8>, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmemBytes);
  LS_CUDA_CHECK(attribute_status);
  const int group = p.n_head / p.n_head_kv;
  const int tile_q = C::kPackGqa ? C::kBlockM / group : C::kBlockM;  // caller: group <= kBlockM
  const int n_q_tiles = (p.max_query_len + tile_q - 1) / tile_q;
  if (n_q_tiles > 65535)
    kernel_fail("paged_prefill_attention: max_query_len ", p.max_query_len, " needs ", n_q_tiles,
                " query tiles, more than the grid's 65535");
  const dim3 grid(unsigned(C::kPackGqa ? p.n_head_kv : p.n_head), unsigned(p.n_seqs), unsigned(n_q_tiles));
  paged_prefill_variant_kernel<C, HeadDim, Fp8><<<grid, C::kThreads, C::kSmemBytes, stream>>>(p);
  LS_CUDA_CHECK_LAUNCH("paged_prefill_variant_kernel");
}

// The variant table: (warps, m16 tiles per warp, key tile, stages, one CTA per KV head, poly exp).
template <int HD, bool F8> using CfgW8M1 = VariantConfig<HD, F8, 8, 1, 64, 3, false, false>;
template <int HD, bool F8> using CfgW4M2 = VariantConfig<HD, F8, 4, 2, 64, 2, false, false>;
template <int HD, bool F8> using CfgW4M2S3 = VariantConfig<HD, F8, 4, 2, 64, 3, false, false>;
template <int HD, bool F8> using CfgW8M2 = VariantConfig<HD, F8, 8, 2, 64, 2, false, false>;
template <int HD, bool F8> using CfgW8M1N128 = VariantConfig<HD, F8, 8, 1, 128, 2, false, false>;
template <int HD, bool F8> using CfgW4M2Gqa = VariantConfig<HD, F8, 4, 2, 64, 2, true, false>;
template <int HD, bool F8> using CfgW4M2Exp = VariantConfig<HD, F8, 4, 2, 64, 2, false, true>;

template <int HD, bool F8>
void launch_selected(const PagedPrefillParams& p, cudaStream_t stream) {
  switch (p.variant) {
    case PrefillKernelVariant::Base: launch<HD, F8>(p, stream); return;
    case PrefillKernelVariant::W8M1: launch_variant<CfgW8M1<HD, F8>, HD, F8>(p, stream); return;
    case PrefillKernelVariant::W4M2: launch_variant<CfgW4M2<HD, F8>, HD, F8>(p, stream); return;
    case PrefillKernelVariant::W4M2S3: launch_variant<CfgW4M2S3<HD, F8>, HD, F8>(p, stream); return;
    case PrefillKernelVariant::W8M2: launch_variant<CfgW8M2<HD, F8>, HD, F8>(p, stream); return;
    case PrefillKernelVariant::W8M1N128: launch_variant<CfgW8M1N128<HD, F8>, HD, F8>(p, stream); return;
    case PrefillKernelVariant::W4M2Gqa:
      if (p.n_head / p.n_head_kv <= CfgW4M2Gqa<HD, F8>::kBlockM)
        launch_variant<CfgW4M2Gqa<HD, F8>, HD, F8>(p, stream);
      else  // a group larger than the tile: one head per CTA
        launch_variant<CfgW4M2<HD, F8>, HD, F8>(p, stream);
      return;
    case PrefillKernelVariant::W4M2Exp: launch_variant<CfgW4M2Exp<HD, F8>, HD, F8>(p, stream); return;
    case PrefillKernelVariant::Wgmma:
    case PrefillKernelVariant::WgmmaM256:
      if (prefill_wgmma_supported(p))
        launch_prefill_wgmma(p, p.variant == PrefillKernelVariant::WgmmaM256 ? 256 : 128, stream);
      else  // head_dim 64: the best mma.sync shape
        launch_variant<CfgW8M2<HD, F8>, HD, F8>(p, stream);
      return;
    case PrefillKernelVariant::kCount: break;
  }
  kernel_fail("paged_prefill_attention: unknown variant ", int(p.variant));
}

constexpr const char* kVariantNames[kPrefillKernelVariantCount] = {"base", "w8m1",     "w4m2",    "w4m2s3", "w8m2",
                                                                  "w8m1n128", "w4m2gqa", "w4m2exp", "wgmma", "wgmma256"};

__global__ void __launch_bounds__(256) mma_sync_probe_kernel(int mma_per_warp, float* sink) {
  const uint32_t x = pack_bf16x2(1e-3f * float(threadIdx.x & 7), 1e-3f);
  const uint32_t a[4] = {x, x ^ 1u, x ^ 2u, x ^ 3u};
  float c[8][4] = {};
  for (int i = 0; i < mma_per_warp / 8; ++i) {
#pragma unroll
    for (int j = 0; j < 8; ++j) mma_bf16(c[j], a, x, x ^ 4u);
  }
  float total = 0.0f;
#pragma unroll
  for (int j = 0; j < 8; ++j) total += c[j][0] + c[j][1] + c[j][2] + c[j][3];
  sink[int64_t(blockIdx.x) * blockDim.x + threadIdx.x] = total;
}

bool aligned(const void* ptr, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(ptr) % bytes == 0; }

void validate(const PagedPrefillParams& p) {
  const char* f = "paged_prefill_attention: ";
  if (p.head_dim != 64 && p.head_dim != 128) kernel_fail(f, "head_dim must be 64 or 128, found ", p.head_dim);
  if (p.n_head <= 0) kernel_fail(f, "n_head must be > 0, found ", p.n_head);
  if (p.n_head_kv <= 0 || p.n_head % p.n_head_kv != 0)
    kernel_fail(f, "n_head_kv must be > 0 and divide n_head = ", p.n_head, ", found ", p.n_head_kv);
  if (p.n_head > 65535) kernel_fail(f, "n_head must be <= 65535 (grid x), found ", p.n_head);
  if (p.n_seqs < 0 || p.n_seqs > 65535) kernel_fail(f, "n_seqs must be in [0, 65535], found ", p.n_seqs);
  if (p.n_tokens < 0) kernel_fail(f, "n_tokens must be >= 0, found ", p.n_tokens);
  if (p.max_query_len < 0 || p.max_query_len > p.n_tokens)
    kernel_fail(f, "max_query_len must be in [0, n_tokens = ", p.n_tokens, "], found ", p.max_query_len);
  if (p.n_seqs > 0 && p.max_query_len == 0 && p.n_tokens > 0)
    kernel_fail(f, "max_query_len must be > 0 when there are ", p.n_tokens, " tokens, found 0");
  if (p.block_size < 8 || p.block_size > 256 || (p.block_size & (p.block_size - 1)) != 0)
    kernel_fail(f, "block_size must be a power of two in [8, 256], found ", p.block_size);
  check_kv_block_size(f, p.kv, p.block_size);
  if (p.max_blocks_per_seq <= 0) kernel_fail(f, "max_blocks_per_seq must be > 0, found ", p.max_blocks_per_seq);
  if (!(p.softmax_scale > 0.0f) || !std::isfinite(p.softmax_scale))
    kernel_fail(f, "softmax_scale must be finite and > 0, found ", p.softmax_scale);
  if (p.sliding_window < 0) kernel_fail(f, "sliding_window must be >= 0 (0 = none), found ", p.sliding_window);
  if (int(p.variant) < 0 || int(p.variant) >= kPrefillKernelVariantCount)
    kernel_fail(f, "variant must be in [0, ", kPrefillKernelVariantCount, "), found ", int(p.variant));
  const int64_t row = int64_t(p.n_head) * p.head_dim;
  if (p.q_token_stride < row || p.q_token_stride % 8 != 0)
    kernel_fail(f, "q_token_stride must be >= n_head * head_dim = ", row,
                " and a multiple of 8 (16-byte rows), found ", p.q_token_stride);
  if (p.q == nullptr || !aligned(p.q, 16)) kernel_fail(f, "q must be a 16-byte aligned device pointer, found ", p.q);
  if (p.out == nullptr || !aligned(p.out, 16))
    kernel_fail(f, "out must be a 16-byte aligned device pointer, found ", p.out);
  if (p.kv.k == nullptr || !aligned(p.kv.k, 16))
    kernel_fail(f, "kv.k must be a 16-byte aligned device pointer, found ", p.kv.k);
  if (p.kv.v == nullptr || !aligned(p.kv.v, 16))
    kernel_fail(f, "kv.v must be a 16-byte aligned device pointer, found ", p.kv.v);
  if (p.query_start_loc == nullptr) kernel_fail(f, "query_start_loc must not be null");
  if (p.seq_lens == nullptr) kernel_fail(f, "seq_lens must not be null");
  if (p.block_tables == nullptr) kernel_fail(f, "block_tables must not be null");
  if (p.kv.dtype == KvDtype::Fp8E4M3) {
    if (p.kv.k_scale == nullptr || p.kv.v_scale == nullptr)
      kernel_fail(f, "an FP8 cache needs kv.k_scale and kv.v_scale, found k_scale ", p.kv.k_scale, ", v_scale ",
                  p.kv.v_scale);
    if (p.kv.scale_head_stride != 0 && p.kv.scale_head_stride != 1)
      kernel_fail(f, "kv.scale_head_stride must be 0 (per-tensor) or 1 (per-head), found ",
                  p.kv.scale_head_stride);
  } else if (p.kv.dtype != KvDtype::Bf16) {
    kernel_fail(f, "kv.dtype must be Bf16 or Fp8E4M3, found ", int(p.kv.dtype));
  }
}

}  // namespace

const char* prefill_kernel_variant_name(PrefillKernelVariant v) {
  const int i = int(v);
  return i >= 0 && i < kPrefillKernelVariantCount ? kVariantNames[i] : nullptr;
}

bool parse_prefill_kernel_variant(const char* name, PrefillKernelVariant* out) {
  if (name == nullptr) return false;
  for (int i = 0; i < kPrefillKernelVariantCount; ++i) {
    const char* a = kVariantNames[i];
    const char* b = name;
    while (*a != 0 && *a == *b) ++a, ++b;
    if (*a == 0 && *b == 0) {
      if (out != nullptr) *out = PrefillKernelVariant(i);
      return true;
    }
  }
  return false;
}

int paged_prefill_query_tile(int head_dim, PrefillKernelVariant variant) {
  auto rows = [&](auto config64, auto config128) {
    return head_dim == 64 ? decltype(config64)::kBlockM : decltype(config128)::kBlockM;
  };
  switch (variant) {
    case PrefillKernelVariant::Base: return rows(Config<64, false>{}, Config<128, false>{});
    case PrefillKernelVariant::W8M1: return rows(CfgW8M1<64, false>{}, CfgW8M1<128, false>{});
    case PrefillKernelVariant::W4M2: return rows(CfgW4M2<64, false>{}, CfgW4M2<128, false>{});
    case PrefillKernelVariant::W4M2S3: return rows(CfgW4M2S3<64, false>{}, CfgW4M2S3<128, false>{});
    case PrefillKernelVariant::W8M2: return rows(CfgW8M2<64, false>{}, CfgW8M2<128, false>{});
    case PrefillKernelVariant::W8M1N128: return rows(CfgW8M1N128<64, false>{}, CfgW8M1N128<128, false>{});
    case PrefillKernelVariant::W4M2Gqa: return rows(CfgW4M2Gqa<64, false>{}, CfgW4M2Gqa<128, false>{});
    case PrefillKernelVariant::W4M2Exp: return rows(CfgW4M2Exp<64, false>{}, CfgW4M2Exp<128, false>{});
    case PrefillKernelVariant::Wgmma: return head_dim == 128 ? prefill_wgmma_query_tile(128) : CfgW8M2<64, false>::kBlockM;
    case PrefillKernelVariant::WgmmaM256:
      return head_dim == 128 ? prefill_wgmma_query_tile(256) : CfgW8M2<64, false>::kBlockM;
    case PrefillKernelVariant::kCount: break;
  }
  return 0;
}

void paged_prefill_attention(const PagedPrefillParams& p, cudaStream_t stream) {
  validate(p);
  if (p.n_seqs == 0 || p.max_query_len == 0) return;
  const bool fp8 = p.kv.dtype == KvDtype::Fp8E4M3;
  if (p.head_dim == 64) {
    fp8 ? launch_selected<64, true>(p, stream) : launch_selected<64, false>(p, stream);
  } else {
    fp8 ? launch_selected<128, true>(p, stream) : launch_selected<128, false>(p, stream);
  }
}

void mma_sync_peak_probe(int n_ctas, int mma_per_warp, float* sink, cudaStream_t stream) {
  if (n_ctas <= 0 || mma_per_warp <= 0 || mma_per_warp % 8 != 0 || sink == nullptr)
    kernel_fail("mma_sync_peak_probe: n_ctas > 0, mma_per_warp a positive multiple of 8, sink non-null; found ",
                n_ctas, ", ", mma_per_warp, ", ", static_cast<const void*>(sink));
  mma_sync_probe_kernel<<<n_ctas, 256, 0, stream>>>(mma_per_warp, sink);
  LS_CUDA_CHECK_LAUNCH("mma_sync_probe_kernel");
}

}  // namespace latentserve::cuda
