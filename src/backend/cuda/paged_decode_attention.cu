// Paged decode attention: split-KV over the context, one CTA per (chunk, KV head, sequence)
// (run-time selectable variants: PagedDecodeKernel, docs "Variants"),
// processing all query heads of the group on tensor cores, then a merge kernel.
// Why this shape and what it costs: docs/cuda-decode-attention.md.
#include "backend/cuda/paged_decode_attention.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "backend/cuda/device_math.cuh"
#include "backend/cuda/paged_decode_common.cuh"
#include "backend/cuda/kernel_error.h"

namespace latentserve::cuda {
namespace {

using namespace paged_decode;


// ---- split kernel: one (chunk, KV head, sequence) ----
// grid (n_splits, n_head_kv, n_seqs), WARPS * 32 threads. FLAGS 0, WARPS 4, POLICY kStagesBase:
// the Base kernel.
template <int HD, bool FP8, int MT, int NMG, int WARPS, int POLICY, int FLAGS>
__global__ void __launch_bounds__(WARPS * 32, WARPS == 8 ? 1 : POLICY == kStagesFill3 ? 3 : 2)
    paged_decode_split_kernel(const KernelArgs a) {
  using C = Config<HD, FP8, MT, NMG, WARPS, POLICY>;
  constexpr int kThreadsC = C::kThreads;
  constexpr int kTile = C::kTileKeys;
  constexpr bool kFused = (FLAGS & kFlagFused) != 0;
  constexpr bool kFast = (FLAGS & kFlagFastPrologue) != 0;
  constexpr bool kAluK = FP8 && (FLAGS & kFlagFp8AluK) != 0;
  constexpr bool kAluV = FP8 && (FLAGS & kFlagFp8AluV) != 0;
  constexpr bool kBulk = (FLAGS & kFlagBulkCopy) != 0;
  constexpr bool kLazy = (FLAGS & kFlagLazyRescale) != 0;
  static_assert(!kBulk || kThreadsC == 2 * kTile, "bulk copies: one K or V row of a tile per thread");
  extern __shared__ __align__(128) unsigned char smem[];
  unsigned char* pipe = smem;                                             // [stages][K|V][tile][row stride]
  uint16_t* q_s = reinterpret_cast<uint16_t*>(smem + C::kQOffset);        // [kRows][kQStride] bf16 or f16
  float* ml_s = reinterpret_cast<float*>(smem + C::kMlOffset);            // [kSlices][kRows][2]
  int* table_s = reinterpret_cast<int*>(smem + C::kTableOffset);          // block ids of this chunk

  const int split = blockIdx.x, kvh = blockIdx.y, s = blockIdx.z;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int mg = warp % NMG, slice = warp / NMG;
  const int g = lane >> 2, c4 = lane & 3;  // mma fragment row / column pair

  if constexpr ((FLAGS & kFlagPdlEarly) != 0) griddep_launch_dependents();
  griddep_wait();

  const int group = a.group;
  // partial of group head h: ws index (ws_base + h * n_splits)
  const int64_t ws_base = (int64_t(s) * a.n_head + int64_t(kvh) * group) * a.n_splits + split;
  const int block_size = 1 << a.log2_block_size;
  const uint16_t* q_group = a.q + int64_t(s) * a.q_seq_stride + int64_t(kvh) * group * HD;
  // q of the group's heads -> shared memory; rows >= group are zero. FP8: f16, pre-scaled by
  // softmax_scale (keeps |q| far from f16's 65504), k-permuted (fp8_k_logical / _alu).
  auto store_q = [&](int i, uint4 v) {
    const int row = i / (HD / 8), c8 = i % (HD / 8);
    if constexpr (!FP8) {
      *reinterpret_cast<uint4*>(q_s + row * C::kQStride + c8 * 8) = v;
    } else {
      const uint16_t* e = reinterpret_cast<const uint16_t*>(&v);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float x = __uint_as_float(uint32_t(e[j]) << 16) * a.softmax_scale;
        const __half h = __float2half_rn(x);
        const int p = c8 * 8 + j;
        q_s[row * C::kQStride + (kAluK ? fp8_k_logical_alu(p) : fp8_k_logical(p))] = *reinterpret_cast<const uint16_t*>(&h);
      }
    }
  };
  auto load_q = [&](int i) {
    const int row = i / (HD / 8), c8 = i % (HD / 8);
    uint4 v = make_uint4(0, 0, 0, 0);
    if (row < group) v = *reinterpret_cast<const uint4*>(q_group + int64_t(row) * HD + c8 * 8);
    return v;
  };

  const int seq_len = a.seq_lens[s];
  const SeqChunks chunks = seq_chunks(a, seq_len);
  const int lo = chunks.lo(split), hi = chunks.hi(split, seq_len);
  const int first_block = lo >> a.log2_block_size;
  if constexpr (kFast) {
    // The prologue's loads in flight together: seq_len and q, then (seq_len places the chunk) its
    // block ids. Reading a fixed chunk's ids speculatively, before seq_len arrives, measured the
    // same (H100, 2026-12-05: geomean 1.002 over 36 shapes, docs/cuda-decode-attention.md).
    constexpr int kQIters = (C::kRows * (HD / 8) + kThreadsC - 1) / kThreadsC;
    uint4 qv[kQIters];
#pragma unroll
    for (int it = 0; it < kQIters; ++it) {
      const int i = tid + it * kThreadsC;
      qv[it] = i < C::kRows * (HD / 8) ? load_q(i) : make_uint4(0, 0, 0, 0);
    }
    const bool valid = seq_len > 0 && seq_len <= a.max_valid_len;  // else no block ids are read
    const int n_table = valid && lo < hi ? ((hi - 1) >> a.log2_block_size) - first_block + 1 : 0;  // <= kTableCap
    const int32_t* table = a.block_tables + int64_t(s) * a.max_blocks_per_seq + first_block;
    constexpr int kTableIters = (kTableCap + kThreadsC - 1) / kThreadsC;
    int ids[kTableIters];
#pragma unroll
    for (int it = 0; it < kTableIters; ++it) {
      const int i = tid + it * kThreadsC;
      ids[it] = i < n_table ? table[i] : 0;
    }
#pragma unroll
    for (int it = 0; it < kQIters; ++it) {
      const int i = tid + it * kThreadsC;
      if (i < C::kRows * (HD / 8)) store_q(i, qv[it]);
    }
#pragma unroll
    for (int it = 0; it < kTableIters; ++it) {
      const int i = tid + it * kThreadsC;
      if (i < n_table) table_s[i] = ids[it];
    }
  }

  const bool bad_len = seq_len < 0 || seq_len > a.max_valid_len;
  if (bad_len || lo >= hi) {
    if constexpr (!kFused) {
      for (int h = tid; h < group; h += kThreadsC) {
        a.ws_ml[(ws_base + int64_t(h) * a.n_splits) * 2 + 0] = -INFINITY;
        a.ws_ml[(ws_base + int64_t(h) * a.n_splits) * 2 + 1] = 0.f;
      }
    } else if (split == 0 && (bad_len || seq_len == 0)) {
      // no merge runs for this row: zeros for a padded row, NaN for a length the grid or the table
      // does not cover (never a silently truncated context)
      const uint32_t fill = bad_len ? 0x7fc07fc0u : 0u;
      uint16_t* out = a.out + (int64_t(s) * a.n_head + int64_t(kvh) * group) * HD;
      for (int i = tid; i < group * (HD / 8); i += kThreadsC)
        reinterpret_cast<uint4*>(out)[i] = make_uint4(fill, fill, fill, fill);
    }
    return;
  }

  if constexpr (!kFast) {
    // block ids of [lo, hi) -> shared memory (read once per chunk instead of once per row)
    const int n_table = ((hi - 1) >> a.log2_block_size) - first_block + 1;
    const int32_t* table = a.block_tables + int64_t(s) * a.max_blocks_per_seq + first_block;
    for (int i = tid; i < n_table; i += kThreadsC) table_s[i] = table[i];
    for (int i = tid; i < C::kRows * (HD / 8); i += kThreadsC) store_q(i, load_q(i));
  }
  const uint32_t bars = smem_addr(smem) + C::kBarOffset;  // kBulk: [stages] mbarriers
  if constexpr (kBulk) {
    if (tid == 0) {
#pragma unroll
      for (int st = 0; st < C::kStages; ++st) mbar_init(bars + 8 * st, kThreadsC);
      mbar_init_fence();
    }
  }
  __syncthreads();  // table_s (and the barriers) before the first copies

  // ---- producer: tile t's K and V rows -> stage ----
  const int n_tiles = (hi - lo + kTile - 1) / kTile;
  const int copy_chunk = tid % C::kChunksPerRow, copy_row0 = tid / C::kChunksPerRow;
  const uint32_t pipe_addr = smem_addr(pipe);
  // kBulk: thread i copies K row i (i < kTile) or V row i - kTile with one bulk copy and arrives
  // on the stage's barrier (announcing its bytes first); a row past hi is zeroed instead (a
  // masked key's P = 0 must not meet a garbage V).
  auto load_tile_bulk = [&](int tile, int stage) {
    const bool is_v = tid >= kTile;
    const int r = is_v ? tid - kTile : tid, pos = lo + tile * kTile + r;
    const uint32_t bar = bars + 8 * stage;
    const int dst_off = stage * C::kStageBytes + (is_v ? C::kTileBytes : 0) + r * C::kRowStride;
    if (pos < hi) {
      const int64_t off = kv_row_index(a.layout, table_s[(pos >> a.log2_block_size) - first_block],
                                       pos & (block_size - 1), kvh, a.n_head_kv, block_size) * C::kRowBytes;
      mbar_arrive_expect_tx(bar, C::kRowBytes);
      bulk_copy_g2s(pipe_addr + dst_off, (is_v ? a.v : a.k) + off, C::kRowBytes, bar);
    } else {
#pragma unroll
      for (int c = 0; c < C::kChunksPerRow; ++c) *reinterpret_cast<uint4*>(pipe + dst_off + c * 16) = make_uint4(0, 0, 0, 0);
      mbar_arrive(bar);
    }
  };
  auto load_tile = [&](int tile, int stage) {
    if constexpr (kBulk) {
      load_tile_bulk(tile, stage);
      return;
    }
    const int base = lo + tile * kTile;
    const uint32_t dst0 = pipe_addr + stage * C::kStageBytes + copy_chunk * 16;
#pragma unroll
    for (int i = 0; i < C::kRowsPerThread; ++i) {
      const int r = copy_row0 + i * C::kRowsPerPass;
      const int pos = base + r;
      const bool ok = pos < hi;
      int64_t off = 0;
      if (ok)
        off = kv_row_index(a.layout, table_s[(pos >> a.log2_block_size) - first_block], pos & (block_size - 1), kvh,
                           a.n_head_kv, block_size) * C::kRowBytes + copy_chunk * 16;
      const uint32_t dst = dst0 + r * C::kRowStride;
      cp_async_16(dst, a.k + off, ok ? 16 : 0);
      cp_async_16(dst + C::kTileBytes, a.v + off, ok ? 16 : 0);
    }
  };

#pragma unroll
  for (int st = 0; st < C::kStages - 1; ++st) {
    if (st < n_tiles) load_tile(st, st);
    cp_async_commit();
  }

  // S scale in log2 units; FP8 folds k_scale here (q already carries softmax_scale).
  const float kLog2e = 1.4426950408889634f;
  const float score_scale = FP8 ? kLog2e * a.k_scale[kvh * a.scale_head_stride] * (kAluK ? kFp8AluScale : 1.f)
                                : kLog2e * a.softmax_scale;

  float acc[MT][C::kDN][4];
  float m_run[MT][2], l_run[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int n = 0; n < C::kDN; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[mt][n][i] = 0.f;
    m_run[mt][0] = m_run[mt][1] = -INFINITY;
    l_run[mt][0] = l_run[mt][1] = 0.f;
  }

  // A-fragment address of q for m-tile mt, k-step kk (ldmatrix x4: rows 0-7/8-15 x k 0-7/8-15)
  const uint32_t q_addr = smem_addr(q_s) +
                          (((mg * MT) * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * C::kQStride + (lane >> 4) * 8) * 2;
  auto load_qf = [&](uint32_t (&qa)[4], int mt, int kk) {
    ldmatrix_x4(qa, q_addr + (mt * 16 * C::kQStride + kk * 16) * 2);
  };
  // MT == 1: q fragments live in registers for the whole chunk (32 registers at head_dim 128).
  uint32_t q_reg[MT == 1 ? C::kQK : 1][4];
  if constexpr (MT == 1) {
#pragma unroll
    for (int kk = 0; kk < C::kQK; ++kk) load_qf(q_reg[kk], 0, kk);
  }
  auto q_frag = [&](uint32_t (&qa)[4], int mt, int kk) {
    if constexpr (MT == 1) {
#pragma unroll
      for (int i = 0; i < 4; ++i) qa[i] = q_reg[kk][i];
    } else {
      load_qf(qa, mt, kk);
    }
  };

  const int key_off = slice * C::kKeysPerWarp;

  for (int t = 0; t < n_tiles; ++t) {
    if constexpr (kBulk)
      mbar_wait(bars + 8 * (t % C::kStages), uint32_t(t / C::kStages) & 1u);
    else
      cp_async_wait<C::kStages - 2>();
    __syncthreads();  // tile t visible to all warps; every warp is done with tile t-1's stage
    {
      const int nt = t + C::kStages - 1;
      if (nt < n_tiles) load_tile(nt, nt % C::kStages);
      cp_async_commit();
    }
    const uint32_t k_st = pipe_addr + (t % C::kStages) * C::kStageBytes;
    const uint32_t v_st = k_st + C::kTileBytes;

    attend_tile<C, FP8, MT, kAluK, kAluV, kLazy>(k_st, v_st, key_off, lo + t * kTile, hi, score_scale, q_frag, acc, m_run, l_run);
  }

  // ---- epilogue: combine the key slices in shared memory, write this chunk's partial ----
  cp_async_wait<0>();
  __syncthreads();  // the pipeline buffers become the reduction buffer
  float* red = reinterpret_cast<float*>(pipe);  // [kSlices][kRows][kRedStride]
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float l = l_run[mt][r];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const int row = (mg * MT + mt) * 16 + g + 8 * r;
      float* dst = red + (slice * C::kRows + row) * C::kRedStride;
#pragma unroll
      for (int n = 0; n < C::kDN; ++n)
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          dst[acc_dim<FP8>(n, 2 * c4 + i)] = acc[mt][n][2 * r + i];
        }
      if (c4 == 0) {
        ml_s[(slice * C::kRows + row) * 2 + 0] = m_run[mt][r];
        ml_s[(slice * C::kRows + row) * 2 + 1] = l;
      }
    }
  }
  __syncthreads();
  const float out_scale = FP8 ? a.v_scale[kvh * a.scale_head_stride] * (kAluV ? kFp8AluScale : 1.f) : 1.f;
  // fused: live chunks of this row [sp0, sp1]; one live chunk is the whole answer
  int sp0 = 0, sp1 = 0;
  if constexpr (kFused) {
    sp0 = chunks.first();
    sp1 = chunks.last(seq_len);
  }
  const bool direct = kFused && sp0 == sp1;
  for (int i = tid; i < group * (HD / 4); i += kThreadsC) {
    const int row = i / (HD / 4), d4 = i % (HD / 4);
    float m_max = -INFINITY;
#pragma unroll
    for (int sl = 0; sl < C::kSlices; ++sl) m_max = fmaxf(m_max, ml_s[(sl * C::kRows + row) * 2]);
    float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
    float l_sum = 0.f;
#pragma unroll
    for (int sl = 0; sl < C::kSlices; ++sl) {
      const float m = ml_s[(sl * C::kRows + row) * 2];
      if (m == -INFINITY) continue;  // this slice saw no key (m_max is finite: lo < hi)
      const float f = fast_exp2(m - m_max);
      const float4 v = *reinterpret_cast<const float4*>(red + (sl * C::kRows + row) * C::kRedStride + d4 * 4);
      sum.x += f * v.x;
      sum.y += f * v.y;
      sum.z += f * v.z;
      sum.w += f * v.w;
      l_sum += f * ml_s[(sl * C::kRows + row) * 2 + 1];
    }
    sum.x *= out_scale;
    sum.y *= out_scale;
    sum.z *= out_scale;
    sum.w *= out_scale;
    if (direct) {
      const float inv_l = 1.f / l_sum;
      uint16_t* out = a.out + (int64_t(s) * a.n_head + int64_t(kvh) * group + row) * HD + d4 * 4;
      *reinterpret_cast<uint2*>(out) =
          make_uint2(pack2<false>(sum.x * inv_l, sum.y * inv_l), pack2<false>(sum.z * inv_l, sum.w * inv_l));
      continue;
    }
    const int64_t w = ws_base + int64_t(row) * a.n_splits;
    *reinterpret_cast<float4*>(a.ws_acc + w * HD + d4 * 4) = sum;
    if (d4 == 0) {
      a.ws_ml[w * 2 + 0] = m_max;
      a.ws_ml[w * 2 + 1] = l_sum;
    }
  }
  if constexpr (kFused) {
    if (direct) return;
    // The last of the row's live CTAs to finish merges them all (threadfence-reduction pattern):
    // partials written -> fence -> count; the CTA that brings the count to n_live reads them back
    // from L2 and resets the counter for the next launch (so a captured graph replays correctly).
    __shared__ int is_last_s;
    unsigned* counter = a.counters_end - (int64_t(s) * a.n_head_kv + kvh);
    __threadfence();
    __syncthreads();
    if (tid == 0) {
      const unsigned done = atomicAdd(counter, 1u) + 1u;
      is_last_s = done == unsigned(sp1 - sp0 + 1);
    }
    __syncthreads();
    if (!is_last_s) return;
    __threadfence();
    if (tid == 0) *counter = 0u;
    for (int i = tid; i < group * (HD / 4); i += kThreadsC) {
      const int row = i / (HD / 4), d4 = i % (HD / 4);
      const int64_t w0 = (int64_t(s) * a.n_head + int64_t(kvh) * group + row) * a.n_splits;
      const float* ml = a.ws_ml + w0 * 2;
      float m_max = -INFINITY;
#pragma unroll 4
      for (int sp = sp0; sp <= sp1; ++sp) m_max = fmaxf(m_max, __ldcg(ml + sp * 2));
      float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
      float l_sum = 0.f;
#pragma unroll 4
      for (int sp = sp0; sp <= sp1; ++sp) {
        const float2 m_l = __ldcg(reinterpret_cast<const float2*>(ml + sp * 2));
        const float4 v = __ldcg(reinterpret_cast<const float4*>(a.ws_acc + (w0 + sp) * HD + d4 * 4));
        const float f = fast_exp2(m_l.x - m_max);  // every live chunk saw keys: m_l.x finite
        l_sum += f * m_l.y;
        sum.x += f * v.x;
        sum.y += f * v.y;
        sum.z += f * v.z;
        sum.w += f * v.w;
      }
      const float inv_l = 1.f / l_sum;
      uint16_t* out = a.out + (int64_t(s) * a.n_head + int64_t(kvh) * group + row) * HD + d4 * 4;
      *reinterpret_cast<uint2*>(out) =
          make_uint2(pack2<false>(sum.x * inv_l, sum.y * inv_l), pack2<false>(sum.z * inv_l, sum.w * inv_l));
    }
  }
}

// ---- merge kernel: one warp per (sequence, query head) ----
// grid (ceil(n_head / 4), n_seqs), 128 threads; lane owns head_dim / 32 consecutive dims.
template <int HD, bool EARLY>
__global__ void __launch_bounds__(kThreads) paged_decode_merge_kernel(const KernelArgs a) {
  constexpr int kPer = HD / 32;
  const int s = blockIdx.y, lane = threadIdx.x & 31;
  const int qh = blockIdx.x * kWarps + (threadIdx.x >> 5);
  if constexpr (EARLY) griddep_launch_dependents();
  griddep_wait();  // the split kernel's partials
  if (qh >= a.n_head) return;
  uint16_t* out = a.out + (int64_t(s) * a.n_head + qh) * HD + lane * kPer;
  const int seq_len = a.seq_lens[s];

  float acc[kPer];
#pragma unroll
  for (int i = 0; i < kPer; ++i) acc[i] = 0.f;
  float inv_l = 0.f;  // seq_len 0: zeros
  if (seq_len < 0 || seq_len > a.max_valid_len) {
    inv_l = NAN;  // lengths the grid or the table does not cover: NaN, never a silently truncated context
#pragma unroll
    for (int i = 0; i < kPer; ++i) acc[i] = NAN;
  } else if (seq_len > 0) {
    const SeqChunks ch = seq_chunks(a, seq_len);
    const int sp0 = ch.first(), sp1 = ch.last(seq_len);
    const int64_t w0 = (int64_t(s) * a.n_head + qh) * a.n_splits;
    const float* ml = a.ws_ml + w0 * 2;
    float m_max = -INFINITY;
    for (int sp = sp0 + lane; sp <= sp1; sp += 32) m_max = fmaxf(m_max, ml[sp * 2]);
    m_max = warp_max(m_max);
    float l_sum = 0.f;
    for (int sp = sp0; sp <= sp1; ++sp) {
      const float m = ml[sp * 2];
      if (m == -INFINITY) continue;
      const float f = fast_exp2(m - m_max);
      l_sum += f * ml[sp * 2 + 1];
      const float* src = a.ws_acc + (w0 + sp) * HD + lane * kPer;
      if constexpr (kPer == 4) {
        const float4 v = *reinterpret_cast<const float4*>(src);
        acc[0] += f * v.x;
        acc[1] += f * v.y;
        acc[2] += f * v.z;
        acc[3] += f * v.w;
      } else {
        const float2 v = *reinterpret_cast<const float2*>(src);
        acc[0] += f * v.x;
        acc[1] += f * v.y;
      }
    }
    inv_l = 1.f / l_sum;
  }
  uint32_t packed[kPer / 2];
#pragma unroll
  for (int i = 0; i < kPer / 2; ++i) packed[i] = pack2<false>(acc[2 * i] * inv_l, acc[2 * i + 1] * inv_l);
  if constexpr (kPer == 4) {
    *reinterpret_cast<uint2*>(out) = make_uint2(packed[0], packed[1]);
  } else {
    *reinterpret_cast<uint32_t*>(out) = packed[0];
  }
}

// ---- host side ----
int ceil_div(int64_t a, int64_t b) { return int((a + b - 1) / b); }

// Chunk size in tokens: the largest power of two times 64 (<= 1024) that still gives target CTAs,
// but no smaller than min_tokens (a CTA's partial, group * head_dim * 4 bytes written and read
// back by the merge, must stay small next to the K/V bytes it reads; and the kernel's tile).
int plan_chunk_tokens(int n_seqs, int n_head_kv, int min_tokens, int max_seq_len_bound, int target_ctas) {
  int chunk = kMaxChunkTokens;
  while (chunk > min_tokens && int64_t(n_seqs) * n_head_kv * ceil_div(max_seq_len_bound, chunk) < target_ctas)
    chunk /= 2;
  return chunk;
}

// The default CTA aim. Few (sequence, KV head) pairs: one CTA per SM, since a short chunk's
// fixed cost (prologue, partial, merge) outweighs the extra occupancy (H200, bound = next power
// of two, us: MHA batch 1 at 1K 16.0 -> 10.7, at 8K 46.8 -> 44.8; GQA-8 batch 1 at 8K 24.3 ->
// 17.5, batch 4 at 1K 16.1 -> 10.9; MHA batch 8, 256 pairs, would lose 44.8 -> 51.2;
// docs/cuda-decode-attention.md).
int default_target_ctas(int n_seqs, int n_head_kv) { return int64_t(n_seqs) * n_head_kv <= 64 ? kSms : kTargetCtas; }

// Below the partial-traffic floor (min_tokens) only while a short context's grid would not fill
// the SMs once: MQA-32 at batch 1-16 and 1K context runs 17-21 us with 256-token chunks against
// 21-24 us with 512 (fused variant; its partials then cost 1/4 of the K/V bytes instead of 1/8,
// but 4-32 CTAs leave most SMs idle). At 8K the longer merge made 256 slower (43 vs 33 us).
int relax_chunk_for_idle_sms(int chunk, int n_seqs, int n_head_kv, int max_seq_len_bound, int tile) {
  while (max_seq_len_bound <= 2048 && chunk / 2 >= tile && chunk / 2 >= kTileKeys * 4 &&
         int64_t(n_seqs) * n_head_kv * ceil_div(max_seq_len_bound, chunk) < kSms / 2)
    chunk /= 2;
  return chunk;
}

int min_chunk_tiles(int group, KvDtype dtype) {
  // partial round trip / K+V bytes of a chunk of t tiles = 2 * group * hd * 4 / (t * 64 * 2 * hd * elt)
  // = group / (16 * t * elt); <= 1/8 needs t >= group / (2 * elt): MQA-32 bf16 8 tiles (512 tokens),
  // GQA-8 bf16 2, MHA 1, GQA-8 fp8 4.
  const int elt = kv_element_bytes(dtype);
  int t = 1;
  while (t < kMaxChunkTiles && t * 2 * elt < group) t *= 2;
  return t;
}

size_t workspace_bytes_for(int n_seqs, int n_head, int head_dim, int n_splits) {
  return size_t(n_seqs) * n_head * n_splits * (size_t(head_dim) + 2) * sizeof(float);
}
// The fused variants' counters: the last counter_tail_bytes of the workspace.
size_t counter_tail_bytes(int n_seqs, int n_head) { return (size_t(n_seqs) * n_head * 4 + 255) / 256 * 256; }

bool is_aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

template <int HD, bool FP8, int MT, int NMG, int WARPS, int POLICY, int FLAGS>
KernelShape split_kernel(const KernelArgs* args, dim3 grid, cudaStream_t stream) {
  using C = Config<HD, FP8, MT, NMG, WARPS, POLICY>;
  static_assert(C::kSmemBytes <= kSmemPerCtaMax - 64, "shared memory per CTA");
  static_assert(WARPS != 4 || C::kSmemBytes <= kSmemPerSm / 2 - kSmemReservedPerCta - 64 || POLICY == kStagesBase,
                "the Fill2 policy keeps two CTAs per SM");
  static_assert(POLICY != kStagesFill3 || (MT == 1 && NMG == 1 && C::kSmemBytes <= kSmemPerSm / 3 - kSmemReservedPerCta),
                "the Fill3 policy keeps three CTAs per SM (one m-tile: <= 170 registers)");
  if (args != nullptr) {
    static bool configured = false;
    auto kernel = paged_decode_split_kernel<HD, FP8, MT, NMG, WARPS, POLICY, FLAGS>;
    set_smem_once(kernel, C::smem_bytes(FLAGS), configured);
    launch_pdl(kernel, grid, C::kThreads, C::smem_bytes(FLAGS), stream, *args, "paged_decode_split_kernel");
  }
  return KernelShape{C::kThreads, C::kTileKeys, C::kStages, C::smem_bytes(FLAGS)};
}

// group -> warp roles: 4 warps: <= 16 one m-tile, <= 32 two m-tiles, <= 64 two m-groups of two;
// 8 warps: <= 16 one m-tile over 8 key slices (128-key tiles), <= 32 two m-groups, <= 64 four.
template <int HD, bool FP8, int WARPS, int POLICY, int FLAGS>
KernelShape split_for_group(int group, const KernelArgs* args, dim3 grid, cudaStream_t stream) {
  if constexpr (WARPS == 4) {
    // three CTAs per SM need one m-tile's registers: larger groups run the Base stage count
    constexpr int kLargePolicy = POLICY == kStagesFill3 ? kStagesBase : POLICY;
    if (group <= 16) return split_kernel<HD, FP8, 1, 1, 4, POLICY, FLAGS>(args, grid, stream);
    if (group <= 32) return split_kernel<HD, FP8, 2, 1, 4, kLargePolicy, FLAGS>(args, grid, stream);
    return split_kernel<HD, FP8, 2, 2, 4, kLargePolicy, FLAGS>(args, grid, stream);
  } else {
    if (group <= 16) return split_kernel<HD, FP8, 1, 1, 8, POLICY, FLAGS>(args, grid, stream);
    if (group <= 32) return split_kernel<HD, FP8, 1, 2, 8, POLICY, FLAGS>(args, grid, stream);
    return split_kernel<HD, FP8, 1, 4, 8, POLICY, FLAGS>(args, grid, stream);
  }
}

template <int HD, bool FP8>
KernelShape split_for_kernel(PagedDecodeKernel kernel, int group, const KernelArgs* args, dim3 grid,
                             cudaStream_t stream) {
  constexpr int kP = kFlagPdlEarly | kFlagFastPrologue;
  constexpr int kF = kP | kFlagFused;
  // the FP8 conversion flags only exist for FP8 (bf16 runs the plain fused kernels)
  constexpr int kMixed = FP8 ? kF | kFlagFp8AluV : kF;
  constexpr int kAlu = FP8 ? kF | kFlagFp8AluK | kFlagFp8AluV : kF;
  switch (kernel) {
    case PagedDecodeKernel::Base: return split_for_group<HD, FP8, 4, kStagesBase, 0>(group, args, grid, stream);
    case PagedDecodeKernel::Pdl: return split_for_group<HD, FP8, 4, kStagesBase, kFlagPdlEarly>(group, args, grid, stream);
    case PagedDecodeKernel::Prologue: return split_for_group<HD, FP8, 4, kStagesBase, kP>(group, args, grid, stream);
    case PagedDecodeKernel::Fused: return split_for_group<HD, FP8, 4, kStagesBase, kF>(group, args, grid, stream);
    case PagedDecodeKernel::FusedW8: return split_for_group<HD, FP8, 8, kStagesFill1, kF>(group, args, grid, stream);
    case PagedDecodeKernel::FusedStages: return split_for_group<HD, FP8, 4, kStagesFill2, kF>(group, args, grid, stream);
    case PagedDecodeKernel::FusedFp8Mixed: return split_for_group<HD, FP8, 4, kStagesBase, kMixed>(group, args, grid, stream);
    case PagedDecodeKernel::FusedFp8Alu: return split_for_group<HD, FP8, 4, kStagesBase, kAlu>(group, args, grid, stream);
    case PagedDecodeKernel::FusedStagesFp8Mixed:
      return split_for_group<HD, FP8, 4, kStagesFill2, kMixed>(group, args, grid, stream);
    case PagedDecodeKernel::FusedFill3: return split_for_group<HD, FP8, 4, kStagesFill3, kF>(group, args, grid, stream);
    case PagedDecodeKernel::FusedBulk:
      return split_for_group<HD, FP8, 4, kStagesBase, kF | kFlagBulkCopy>(group, args, grid, stream);
    case PagedDecodeKernel::FusedLazy:
      return split_for_group<HD, FP8, 4, kStagesBase, kF | kFlagLazyRescale>(group, args, grid, stream);
    case PagedDecodeKernel::FusedFill3Lazy:
      return split_for_group<HD, FP8, 4, kStagesFill3, kF | kFlagLazyRescale>(group, args, grid, stream);
    case PagedDecodeKernel::StreamK:  // launched by streamk_kernel; here only where it falls back
    case PagedDecodeKernel::kCount: break;
  }
  kernel_fail("paged_decode_attention: tuning.kernel is not a compiled variant, found ", int(kernel));
}

KernelShape split_shape_or_launch(PagedDecodeKernel kernel, int head_dim, bool fp8, int group, const KernelArgs* args,
                                  dim3 grid, cudaStream_t stream) {
  if (head_dim == 128)
    return fp8 ? split_for_kernel<128, true>(kernel, group, args, grid, stream)
               : split_for_kernel<128, false>(kernel, group, args, grid, stream);
  return fp8 ? split_for_kernel<64, true>(kernel, group, args, grid, stream)
             : split_for_kernel<64, false>(kernel, group, args, grid, stream);
}

bool kernel_in_range(PagedDecodeKernel k) { return int(k) >= 0 && int(k) < int(PagedDecodeKernel::kCount); }
bool pdl_early(PagedDecodeKernel k) { return k != PagedDecodeKernel::Base; }

// The tile (keys per stage) of a kernel at a group size, without instantiating anything.
int tile_keys_of(PagedDecodeKernel kernel, int group) {
  return kernel == PagedDecodeKernel::FusedW8 && group <= 16 ? 128 : 64;
}

void validate_tuning(const PagedDecodeTuning& t, int group) {
  const char* k = "paged_decode_attention: ";
  if (!kernel_in_range(t.kernel)) kernel_fail(k, "tuning.kernel is not a compiled variant, found ", int(t.kernel));
  if (t.target_ctas < 0 || t.target_ctas > (1 << 24))
    kernel_fail(k, "tuning.target_ctas must be in [0, 2^24], found ", t.target_ctas);
  if (t.kernel == PagedDecodeKernel::StreamK && t.chunk_tokens != 0)
    kernel_fail(k, "tuning.chunk_tokens must be 0 for streamk (its ranges follow from the lengths), found ",
                t.chunk_tokens);
  const int tile = tile_keys_of(t.kernel, group);
  if (t.chunks_from_lengths && t.chunk_tokens != 0)
    kernel_fail(k, "tuning.chunk_tokens must be 0 with chunks_from_lengths (they are sized from each length), found ",
                t.chunk_tokens);
  if (t.chunk_tokens < 0 || t.chunk_tokens > kMaxChunkTokens || t.chunk_tokens % tile != 0)
    kernel_fail(k, "tuning.chunk_tokens must be 0 or a multiple of ", tile, " (the ", paged_decode_kernel_name(t.kernel),
                " tile at group ", group, ") <= ", kMaxChunkTokens, ", found ", t.chunk_tokens);
}
void validate(const PagedDecodeParams& p) {
  const char* k = "paged_decode_attention: ";
  if (p.n_seqs < 0) kernel_fail(k, "n_seqs must be >= 0, found ", p.n_seqs);
  if (p.n_seqs > 65535) kernel_fail(k, "n_seqs must be <= 65535 (grid z), found ", p.n_seqs);
  if (p.head_dim != 64 && p.head_dim != 128) kernel_fail(k, "head_dim must be 64 or 128, found ", p.head_dim);
  if (p.n_head < 1 || p.n_head_kv < 1)
    kernel_fail(k, "n_head and n_head_kv must be >= 1, found n_head ", p.n_head, ", n_head_kv ", p.n_head_kv);
  if (p.n_head % p.n_head_kv != 0)
    kernel_fail(k, "n_head must be a multiple of n_head_kv, found n_head ", p.n_head, ", n_head_kv ", p.n_head_kv);
  if (p.n_head / p.n_head_kv > kMaxGroup)
    kernel_fail(k, "n_head / n_head_kv must be <= ", kMaxGroup, ", found ", p.n_head / p.n_head_kv);
  if (p.block_size < 8 || p.block_size > 256 || (p.block_size & (p.block_size - 1)) != 0)
    kernel_fail(k, "block_size must be a power of two in [8, 256], found ", p.block_size);
  check_kv_block_size(k, p.kv, p.block_size);
  if (p.max_seq_len_bound < 1) kernel_fail(k, "max_seq_len_bound must be >= 1, found ", p.max_seq_len_bound);
  if (p.max_blocks_per_seq < 1) kernel_fail(k, "max_blocks_per_seq must be >= 1, found ", p.max_blocks_per_seq);
  if (p.q_seq_stride < int64_t(p.n_head) * p.head_dim || p.q_seq_stride % 8 != 0)
    kernel_fail(k, "q_seq_stride must be >= n_head * head_dim = ", int64_t(p.n_head) * p.head_dim,
                " and a multiple of 8, found ", p.q_seq_stride);
  if (!(p.softmax_scale > 0.f) || !std::isfinite(p.softmax_scale))
    kernel_fail(k, "softmax_scale must be finite and > 0, found ", p.softmax_scale);
  if (p.sliding_window < 0) kernel_fail(k, "sliding_window must be >= 0, found ", p.sliding_window);
  if (p.kv.dtype != KvDtype::Bf16 && p.kv.dtype != KvDtype::Fp8E4M3)
    kernel_fail(k, "kv.dtype must be Bf16 or Fp8E4M3, found ", int(p.kv.dtype));
  struct Ptr {
    const void* ptr;
    const char* name;
    bool aligned16;
  };
  const Ptr ptrs[] = {{p.q, "q", true},           {p.out, "out", true},           {p.kv.k, "kv.k", true},
                      {p.kv.v, "kv.v", true},     {p.seq_lens, "seq_lens", false}, {p.block_tables, "block_tables", false},
                      {p.workspace, "workspace", true}};
  for (const Ptr& x : ptrs) {
    if (x.ptr == nullptr) kernel_fail(k, x.name, " must not be null");
    if (x.aligned16 && !is_aligned16(x.ptr)) kernel_fail(k, x.name, " must be 16-byte aligned, found ", x.ptr);
  }
  if (p.kv.dtype == KvDtype::Fp8E4M3) {
    if (p.kv.k_scale == nullptr || p.kv.v_scale == nullptr)
      kernel_fail(k, "an FP8 cache needs kv.k_scale and kv.v_scale (device pointers), found ", p.kv.k_scale, ", ",
                  p.kv.v_scale);
    if (p.kv.scale_head_stride < 0)
      kernel_fail(k, "kv.scale_head_stride must be >= 0, found ", p.kv.scale_head_stride);
  }
  validate_tuning(p.tuning, p.n_head / p.n_head_kv);
}

// StreamK runs for groups <= 16 and batches <= 256; other steps fall back to Fused's default plan.
bool streamk_runs(const PagedDecodeTuning& t, int group, int n_seqs) {
  return t.kernel == PagedDecodeKernel::StreamK && group <= kStreamKMaxGroup && n_seqs <= kStreamKMaxSeqs;
}
PagedDecodeTuning streamk_fallback() {
  PagedDecodeTuning t;
  t.kernel = PagedDecodeKernel::Fused;
  return t;
}
// CTAs of a stream-K launch: target_ctas (default two per SM), never more than the bound's tiles.
int streamk_ctas(int n_seqs, int n_head_kv, int max_seq_len_bound, int target_ctas) {
  const int64_t tiles = int64_t(n_seqs) * n_head_kv * ceil_div(max_seq_len_bound, kTileKeys);
  return int(std::min<int64_t>(target_ctas > 0 ? target_ctas : 2 * kSms, tiles));
}
// Partials: [n_pairs + n_ctas slots][4 warps][group][head_dim] acc, then [..][2] (max, sum).
size_t streamk_partial_floats(int64_t rows, int head_dim) { return size_t(rows) * (size_t(head_dim) + 2); }
int64_t streamk_partial_rows(int n_seqs, int n_head_kv, int group, int n_ctas) {
  return (int64_t(n_seqs) * n_head_kv + n_ctas) * kStreamKWarps * group;
}

}  // namespace

const char* paged_decode_kernel_name(PagedDecodeKernel kernel) {
  switch (kernel) {
    case PagedDecodeKernel::Base: return "base";
    case PagedDecodeKernel::Pdl: return "pdl";
    case PagedDecodeKernel::Prologue: return "prologue";
    case PagedDecodeKernel::Fused: return "fused";
    case PagedDecodeKernel::FusedW8: return "fused_w8";
    case PagedDecodeKernel::FusedStages: return "fused_stages";
    case PagedDecodeKernel::FusedFp8Mixed: return "fused_fp8mixed";
    case PagedDecodeKernel::FusedFp8Alu: return "fused_fp8alu";
    case PagedDecodeKernel::FusedStagesFp8Mixed: return "fused_stages_fp8mixed";
    case PagedDecodeKernel::StreamK: return "streamk";
    case PagedDecodeKernel::FusedFill3: return "fused_fill3";
    case PagedDecodeKernel::FusedBulk: return "fused_bulk";
    case PagedDecodeKernel::FusedLazy: return "fused_lazy";
    case PagedDecodeKernel::FusedFill3Lazy: return "fused_fill3_lazy";
    case PagedDecodeKernel::kCount: break;
  }
  return "unknown";
}

bool paged_decode_kernel_is_fused(PagedDecodeKernel kernel) {
  return kernel_in_range(kernel) && kernel != PagedDecodeKernel::Base && kernel != PagedDecodeKernel::Pdl &&
         kernel != PagedDecodeKernel::Prologue;
}

bool paged_decode_kernel_fp8_only(PagedDecodeKernel kernel) {
  return kernel == PagedDecodeKernel::FusedFp8Mixed || kernel == PagedDecodeKernel::FusedFp8Alu ||
         kernel == PagedDecodeKernel::FusedStagesFp8Mixed;
}

int64_t decode_context_bucket(int64_t max_len, int steps_per_octave) {
  if (steps_per_octave < 1 || steps_per_octave > kDecodeContextBucketsMaxSteps)
    kernel_fail("decode_context_bucket: steps_per_octave must be in [1, ", kDecodeContextBucketsMaxSteps, "], found ",
                steps_per_octave);
  const int64_t len = std::max<int64_t>(max_len, 512);
  int64_t unit = 1;  // the bucket is m * unit, m in [steps, 2 * steps)
  while (2 * steps_per_octave * unit < len) unit *= 2;
  return (len + unit - 1) / unit * unit;
}

PagedDecodePlan paged_decode_plan(int n_seqs, int n_head, int n_head_kv, int head_dim, KvDtype dtype,
                                  int max_seq_len_bound, const PagedDecodeTuning& tuning) {
  PagedDecodePlan plan;
  if (n_seqs < 1 || n_head_kv < 1 || max_seq_len_bound < 1 || !kernel_in_range(tuning.kernel)) return plan;
  const int group = n_head / n_head_kv;
  if (tuning.kernel == PagedDecodeKernel::StreamK) {
    if (!streamk_runs(tuning, group, n_seqs))
      return paged_decode_plan(n_seqs, n_head, n_head_kv, head_dim, dtype, max_seq_len_bound, streamk_fallback());
    plan.n_ctas = streamk_ctas(n_seqs, n_head_kv, max_seq_len_bound, tuning.target_ctas);
    const int64_t tiles = int64_t(n_seqs) * n_head_kv * ceil_div(max_seq_len_bound, kTileKeys);
    plan.chunk_tokens = ceil_div(tiles, plan.n_ctas) * kTileKeys;
    plan.fused = plan.stream_k = true;
    plan.workspace_bytes =
        streamk_partial_floats(streamk_partial_rows(n_seqs, n_head_kv, group, plan.n_ctas), head_dim) * sizeof(float) +
        size_t(n_seqs) * n_head_kv * 4;
    if (head_dim == 64 || head_dim == 128) {
      const KernelShape shape = streamk_kernel(head_dim, dtype == KvDtype::Fp8E4M3, nullptr, 0, nullptr);
      plan.threads = shape.threads;
      plan.tile_keys = shape.tile_keys;
      plan.stages = shape.stages;
      plan.smem_bytes = shape.smem_bytes;
    }
    return plan;
  }
  const int tile = tile_keys_of(tuning.kernel, group);
  const int floor_tokens = std::max(min_chunk_tiles(group, dtype) * kTileKeys, tile);
  plan.chunk_tokens =
      tuning.chunk_tokens > 0
          ? tuning.chunk_tokens
          : relax_chunk_for_idle_sms(
                plan_chunk_tokens(n_seqs, n_head_kv, floor_tokens, max_seq_len_bound,
                                  tuning.target_ctas > 0 ? tuning.target_ctas
                                                         : default_target_ctas(n_seqs, n_head_kv)),
                n_seqs, n_head_kv, max_seq_len_bound, tile);
  plan.n_splits = ceil_div(max_seq_len_bound, plan.chunk_tokens);
  // From the length: never above the planned chunk (lengths <= bound), never below its floor.
  if (tuning.chunks_from_lengths)
    plan.length_chunk_min = std::min(plan.chunk_tokens, floor_tokens);
  plan.n_ctas = plan.n_splits * n_head_kv * n_seqs;
  plan.fused = paged_decode_kernel_is_fused(tuning.kernel);
  plan.workspace_bytes = workspace_bytes_for(n_seqs, n_head, head_dim, plan.n_splits) +
                         (plan.fused ? size_t(n_seqs) * n_head_kv * 4 : 0);
  if (head_dim == 64 || head_dim == 128) {
    const KernelShape shape = split_shape_or_launch(tuning.kernel, head_dim, dtype == KvDtype::Fp8E4M3, group, nullptr,
                                                    dim3(), nullptr);
    plan.threads = shape.threads;
    plan.tile_keys = shape.tile_keys;
    plan.stages = shape.stages;
    plan.smem_bytes = shape.smem_bytes;
  }
  return plan;
}

size_t paged_decode_workspace_bytes(int n_seqs, int n_head, int head_dim, int max_seq_len_bound,
                                    const PagedDecodeTuning& tuning) {
  if (n_seqs < 1 || n_head < 1 || max_seq_len_bound < 1) return 16;
  if (tuning.kernel == PagedDecodeKernel::StreamK) {
    // Its fallback's bound, or its own: slots x group <= n_seqs * n_head + n_ctas * 16, n_ctas
    // <= min(target, n_seqs * n_head * tiles) (n_head_kv <= n_head); both monotone.
    const int64_t tiles = int64_t(n_seqs) * n_head * ceil_div(max_seq_len_bound, kTileKeys);
    const int64_t ctas = std::min<int64_t>(tuning.target_ctas > 0 ? tuning.target_ctas : 2 * kSms, tiles);
    const int64_t rows = (int64_t(n_seqs) * n_head + ctas * kStreamKMaxGroup) * kStreamKWarps;
    return std::max(paged_decode_workspace_bytes(n_seqs, n_head, head_dim, max_seq_len_bound, streamk_fallback()),
                    streamk_partial_floats(rows, head_dim) * sizeof(float) + counter_tail_bytes(n_seqs, n_head));
  }
  // A bound on n_seqs * n_splits over every plan with n_seqs' <= n_seqs, bound' <= bound and any
  // n_head_kv, dtype (so it is monotone: a workspace sized for the largest batch and bound serves
  // every smaller step). plan_chunk_tokens either keeps the largest chunk (n * ceil(tiles / 16)
  // rows) or halved it because half as many splits gave < target CTAs (< 2 * target rows); and
  // n_splits <= tiles. A fixed chunk: n * ceil(bound / chunk).
  const int64_t tiles = ceil_div(max_seq_len_bound, kTileKeys);
  // relax_chunk_for_idle_sms halves only while the grid has < kSms / 2 CTAs, so < kSms rows.
  const int64_t target = std::max<int64_t>(tuning.target_ctas > 0 ? tuning.target_ctas : kTargetCtas, kSms);
  const int64_t rows =
      tuning.chunk_tokens > 0
          ? int64_t(n_seqs) * ceil_div(max_seq_len_bound, tuning.chunk_tokens)
          : std::max<int64_t>(n_seqs * int64_t(ceil_div(tiles, kMaxChunkTiles)), std::min<int64_t>(2 * target, n_seqs * tiles));
  return size_t(rows) * n_head * (size_t(head_dim) + 2) * sizeof(float) + counter_tail_bytes(n_seqs, n_head);
}

void paged_decode_workspace_init(void* workspace, size_t workspace_bytes, int n_seqs, int n_head, cudaStream_t stream) {
  if (workspace == nullptr || n_seqs < 1 || n_head < 1) return;
  const size_t end = workspace_bytes & ~size_t(3);
  const size_t tail = std::min(end, counter_tail_bytes(n_seqs, n_head));
  LS_CUDA_CHECK(cudaMemsetAsync(static_cast<char*>(workspace) + (end - tail), 0, tail, stream));
}

void paged_decode_attention(const PagedDecodeParams& p, cudaStream_t stream) {
  validate(p);
  if (p.n_seqs == 0) return;
  const PagedDecodePlan plan = paged_decode_plan(p.n_seqs, p.n_head, p.n_head_kv, p.head_dim, p.kv.dtype,
                                                 p.max_seq_len_bound, p.tuning);
  if (p.workspace_bytes < plan.workspace_bytes)
    kernel_fail("paged_decode_attention: workspace_bytes must be >= ", plan.workspace_bytes,
                " (paged_decode_workspace_bytes(", p.n_seqs, ", ", p.n_head, ", ", p.head_dim, ", ",
                p.max_seq_len_bound, ") = ",
                paged_decode_workspace_bytes(p.n_seqs, p.n_head, p.head_dim, p.max_seq_len_bound, p.tuning),
                "), found ", p.workspace_bytes);

  KernelArgs a{};
  a.q = static_cast<const uint16_t*>(p.q);
  a.q_seq_stride = p.q_seq_stride;
  a.k = static_cast<const unsigned char*>(p.kv.k);
  a.v = static_cast<const unsigned char*>(p.kv.v);
  a.k_scale = p.kv.k_scale;
  a.v_scale = p.kv.v_scale;
  a.scale_head_stride = p.kv.scale_head_stride;
  a.layout = p.kv.layout;
  a.seq_lens = p.seq_lens;
  a.block_tables = p.block_tables;
  a.max_blocks_per_seq = p.max_blocks_per_seq;
  int log2_bs = 0;
  while ((1 << log2_bs) < p.block_size) ++log2_bs;
  a.log2_block_size = log2_bs;
  a.n_head = p.n_head;
  a.n_head_kv = p.n_head_kv;
  a.group = p.n_head / p.n_head_kv;
  a.softmax_scale = p.softmax_scale;
  a.sliding_window = p.sliding_window;
  a.max_valid_len = int(std::min<int64_t>(p.max_seq_len_bound, int64_t(p.max_blocks_per_seq) * p.block_size));
  a.chunk_tokens = plan.chunk_tokens;
  a.n_splits = plan.n_splits;
  a.length_chunk_min = plan.length_chunk_min;
  a.ws_acc = static_cast<float*>(p.workspace);
  a.ws_ml = a.ws_acc + size_t(p.n_seqs) * p.n_head * plan.n_splits * p.head_dim;  // 16-byte aligned: head_dim % 4 == 0
  // counters: fixed places counted down from the end of the workspace (the same for every step)
  a.counters_end = reinterpret_cast<unsigned*>(static_cast<char*>(p.workspace) + (p.workspace_bytes & ~size_t(3))) - 1;
  a.out = static_cast<uint16_t*>(p.out);
  a.n_seqs = p.n_seqs;
  if (plan.stream_k) {
    a.ws_ml = a.ws_acc + streamk_partial_rows(p.n_seqs, p.n_head_kv, a.group, plan.n_ctas) * p.head_dim;
    streamk_kernel(p.head_dim, p.kv.dtype == KvDtype::Fp8E4M3, &a, plan.n_ctas, stream);
    return;
  }
  const PagedDecodeKernel kernel = p.tuning.kernel == PagedDecodeKernel::StreamK ? streamk_fallback().kernel : p.tuning.kernel;
  a.chunk_align = tile_keys_of(kernel, a.group);

  // ws_acc: [n_seqs, n_head, n_splits, head_dim] f32; ws_ml: [n_seqs, n_head, n_splits, 2] f32
  const dim3 split_grid(plan.n_splits, p.n_head_kv, p.n_seqs);
  split_shape_or_launch(kernel, p.head_dim, p.kv.dtype == KvDtype::Fp8E4M3, a.group, &a, split_grid, stream);
  if (plan.fused) return;
  const dim3 merge_grid(ceil_div(p.n_head, kWarps), p.n_seqs);
  const bool early = pdl_early(kernel);
  if (p.head_dim == 128) {
    early ? launch_pdl(paged_decode_merge_kernel<128, true>, merge_grid, kThreads, 0, stream, a, "paged_decode_merge_kernel")
          : launch_pdl(paged_decode_merge_kernel<128, false>, merge_grid, kThreads, 0, stream, a, "paged_decode_merge_kernel");
  } else {
    early ? launch_pdl(paged_decode_merge_kernel<64, true>, merge_grid, kThreads, 0, stream, a, "paged_decode_merge_kernel")
          : launch_pdl(paged_decode_merge_kernel<64, false>, merge_grid, kThreads, 0, stream, a, "paged_decode_merge_kernel");
  }
}

}  // namespace latentserve::cuda
