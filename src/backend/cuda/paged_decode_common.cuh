#pragma once
// What the paged decode attention kernels share (paged_decode_attention.cu: split-KV chunks;
// paged_decode_streamk.cu: stream-K over the whole step): launch arguments, the shared-memory
// geometry of one configuration, PTX wrappers, the FP8 conversions and the work on one K/V tile
// in shared memory (S = q K^T, mask, online softmax, P V), so every kernel runs the same maths.
// Design: docs/cuda-decode-attention.md. Internal: include only from those two files.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/kernel_error.h"
#include "backend/cuda/kv_cache_layout.h"

namespace latentserve::cuda::paged_decode {

constexpr int kTileKeys = 64;       // the planner's unit: keys per pipeline stage of the 4-warp kernels
constexpr int kThreads = 128;       // Base: 4 warps (the merge kernel too)
constexpr int kWarps = kThreads / 32;
constexpr int kMaxChunkTiles = 16;  // at most 1024 tokens per CTA: keeps ragged batches balanced
constexpr int kMaxChunkTokens = kMaxChunkTiles * kTileKeys;
constexpr int kSms = 132;             // H100/H200 SXM
constexpr int kTargetCtas = 4 * kSms;  // two waves of two CTAs per SM: the planner's default aim
constexpr int kTableCap = kMaxChunkTiles * kTileKeys / 8 + 2;  // block ids one chunk spans (block_size >= 8)
constexpr int kMaxGroup = 64;

// Variant flags (template FLAGS of the split kernel; 0 = the Base kernel).
constexpr int kFlagPdlEarly = 1;      // griddepcontrol.launch_dependents at the start
constexpr int kFlagFastPrologue = 2;  // seq_len, table and q loads in flight together
constexpr int kFlagFused = 4;         // last CTA of a (sequence, KV head) merges; one live chunk writes out directly
constexpr int kFlagFp8AluK = 8;       // FP8 K: integer e4m3 -> f16 (x2^-8) instead of cvt.e4m3x2
constexpr int kFlagFp8AluV = 16;      // FP8 V: likewise
constexpr int kFlagBulkCopy = 32;     // K/V rows by TMA bulk copies (one per row) completing on an mbarrier per stage
constexpr int kFlagLazyRescale = 64;  // attend_tile's kLazy: the running max moves only by > 2^8, else no acc rescale
// Stage-count policies (template POLICY).
constexpr int kStagesBase = 0;   // 3 stages when a stage exceeds 20 KB, else 4 (Base)
constexpr int kStagesFill2 = 1;  // the most stages (<= 6) that still fit two CTAs per SM
constexpr int kStagesFill1 = 2;  // the most stages (<= 8) that fit one CTA per SM
constexpr int kStagesFill3 = 3;  // the most stages (<= 4) that still fit three CTAs per SM (groups <= 16)
constexpr int kSmemPerSm = 228 * 1024, kSmemReservedPerCta = 1024, kSmemPerCtaMax = 227 * 1024;

// ---- shared-memory geometry and warp roles of one kernel ----
// WARPS warps; MT m-tiles (16 query rows each) per warp, NMG groups of warps over m-tiles; the
// warps of one m-group split each key tile into kSlices key slices of kKeysPerWarp keys (16, or
// 32 when only two slices share a 64-key tile). Base (WARPS 4): 64-key tiles; WARPS 8 with one
// m-group: 128-key tiles.
template <int HD, bool FP8, int MT, int NMG, int WARPS = 4, int POLICY = kStagesBase>
struct Config {
  static constexpr int kHeadDim = HD;
  static constexpr int kThreads = WARPS * 32;
  static constexpr int kSlices = WARPS / NMG;
  static constexpr int kKeysPerWarp = 64 / kSlices > 16 ? 64 / kSlices : 16;  // 16 or 32
  static constexpr int kTileKeys = kSlices * kKeysPerWarp;                     // 64 or 128
  static constexpr int kElt = FP8 ? 1 : 2;
  static constexpr int kRowBytes = HD * kElt;
  // +16 bytes per row: consecutive rows start 4 banks apart, so the 8-row ldmatrix phases and
  // the FP8 fragment loads (8 keys x 4 words) hit 32 distinct banks.
  static constexpr int kRowStride = kRowBytes + 16;
  static constexpr int kTileBytes = kTileKeys * kRowStride;  // one of K, V
  static constexpr int kStageBytes = 2 * kTileBytes;
  static constexpr int kChunksPerRow = kRowBytes / 16;        // 16-byte cp.async per row
  static constexpr int kRowsPerPass = kThreads / kChunksPerRow;
  static constexpr int kRowsPerThread = kTileKeys / kRowsPerPass;  // K rows (and as many V rows) per thread
  static_assert(kTileKeys % kRowsPerPass == 0, "tile rows must split evenly over the threads");

  static constexpr int kRows = MT * NMG * 16;  // query rows (group heads, zero-padded)
  static constexpr int kSN = kKeysPerWarp / 8;              // S n-tiles per m-tile
  static constexpr int kPVK = kKeysPerWarp / 16;            // PV k-steps
  static constexpr int kDN = HD / 8;                        // output n-tiles
  static constexpr int kQK = HD / 16;                       // QK^T k-steps
  static constexpr int kQStride = HD + 8;                   // Q smem row, 16-bit elements (+16 B: no bank conflicts)
  static constexpr int kRedStride = HD + 4;                 // f32 partial rows in the epilogue
  static constexpr int kRedBytes = kSlices * kRows * kRedStride * 4;
  static constexpr int kOtherBytes = kRows * kQStride * 2 + kSlices * kRows * 2 * 4 + kTableCap * 4;
  static constexpr int smem_for(int stages) {
    return (stages * kStageBytes > kRedBytes ? stages * kStageBytes : kRedBytes) + kOtherBytes;
  }
  static constexpr int fill_stages(int budget, int cap) {
    int s = 2;
    while (s < cap && smem_for(s + 1) <= budget) ++s;
    return s;
  }
  static constexpr int kStages =
      POLICY == kStagesBase    ? (kStageBytes > 20480 ? 3 : 4)  // ~64 KB of copies in flight per CTA
      : POLICY == kStagesFill2 ? fill_stages(kSmemPerSm / 2 - kSmemReservedPerCta - 64, 6)
      : POLICY == kStagesFill3 ? fill_stages(kSmemPerSm / 3 - kSmemReservedPerCta - 64, 4)
                               : fill_stages(kSmemPerCtaMax - 64, 8);
  static constexpr int kPipeBytes = kStages * kStageBytes;
  static constexpr int kPipeOrRed = kPipeBytes > kRedBytes ? kPipeBytes : kRedBytes;
  static constexpr int kQOffset = kPipeOrRed;
  static constexpr int kMlOffset = kQOffset + kRows * kQStride * 2;
  static constexpr int kTableOffset = kMlOffset + kSlices * kRows * 2 * 4;
  static constexpr int kSmemBytes = kTableOffset + kTableCap * 4;
  // kFlagBulkCopy kernels: one mbarrier per stage after the rest
  static constexpr int kBarOffset = (kSmemBytes + 7) / 8 * 8;
  static constexpr int smem_bytes(int flags) { return (flags & kFlagBulkCopy) != 0 ? kBarOffset + 8 * kStages : kSmemBytes; }
};

struct KernelArgs {
  const uint16_t* q;  // bf16 bits
  int64_t q_seq_stride;
  const unsigned char* k;
  const unsigned char* v;
  const float* k_scale;
  const float* v_scale;
  int scale_head_stride;
  KvLayout layout;
  const int32_t* seq_lens;
  const int32_t* block_tables;
  int max_blocks_per_seq, log2_block_size;
  int n_head, n_head_kv, group;
  float softmax_scale;
  int sliding_window;
  int max_valid_len;  // min(max_seq_len_bound, max_blocks_per_seq * block_size): longer rows are invalid
  int chunk_tokens, n_splits;  // the plan at the bound: n_splits CTAs per (sequence, KV head)
  int length_chunk_min;        // > 0: chunks sized from each sequence's length (SeqChunks), at least this; 0: fixed chunk_tokens
  int chunk_align;             // length-sized chunks round up to this (the variant's key tile)
  int n_seqs;              // the stream-K kernel's prefix over the batch
  unsigned* counters_end;  // fused variants: counter of (s, kvh) at counters_end - (s * n_head_kv + kvh)
  float* ws_acc;  // [n_seqs, n_head, n_splits, head_dim] unnormalised sum p_i v_i (relative to ws_ml's max)
  float* ws_ml;   // [n_seqs, n_head, n_splits, 2] (max in log2 units, sum p_i); max -inf = empty chunk
  uint16_t* out;  // bf16 bits
};

// How one sequence's live keys [live_lo, seq_len) split over the grid's n_splits CTAs: split i
// covers [origin + i * chunk, origin + (i + 1) * chunk) clipped to the live keys, so the live
// splits are [first, last]. Fixed plan (length_chunk_min 0): origin 0, chunk = chunk_tokens, the
// same for every length up to the bound (a sequence half as long as the bound leaves half of its
// CTAs idle). From the length: origin = live_lo and chunk = ceil(live / n_splits) rounded up to
// the tile, at least length_chunk_min, so every CTA of the grid has keys at any length.
struct SeqChunks {
  int live_lo, origin, chunk;
  __device__ __forceinline__ int lo(int split) const { return max(origin + split * chunk, live_lo); }
  __device__ __forceinline__ int hi(int split, int seq_len) const { return min(origin + (split + 1) * chunk, seq_len); }
  __device__ __forceinline__ int first() const { return (live_lo - origin) / chunk; }
  __device__ __forceinline__ int last(int seq_len) const { return (seq_len - 1 - origin) / chunk; }
};
__device__ __forceinline__ SeqChunks seq_chunks(const KernelArgs& a, int seq_len) {
  const int live_lo = a.sliding_window > 0 ? max(0, seq_len - a.sliding_window) : 0;
  if (a.length_chunk_min == 0) return SeqChunks{live_lo, 0, a.chunk_tokens};
  const int per = (seq_len - live_lo + a.n_splits - 1) / a.n_splits;
  const int chunk = max(a.length_chunk_min, (per + a.chunk_align - 1) / a.chunk_align * a.chunk_align);
  return SeqChunks{live_lo, live_lo, chunk};
}

// ---- PTX wrappers ----
__device__ __forceinline__ void griddep_wait() {
  // Programmatic dependent launch: everything above this line overlaps the previous kernel's
  // tail; nothing global is read before it.
  asm volatile("griddepcontrol.wait;" ::: "memory");
}
__device__ __forceinline__ void griddep_launch_dependents() {
  // Lets the next PDL-launched kernel start launching (its griddepcontrol.wait still waits for
  // this whole grid to finish and its memory to be visible).
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// 16-byte global -> shared copy, bypassing L1; src_bytes 0 writes zeros and reads nothing.
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}
// mbarriers (shared memory, 8 bytes each) and TMA bulk copies (sm_90): a stage's barrier
// completes its phase once every thread has arrived and every byte announced with expect_tx
// has landed.
__device__ __forceinline__ void mbar_init(uint32_t bar, int arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(arrivals) : "memory");
}
__device__ __forceinline__ void mbar_init_fence() {  // the inits visible to the async proxy (the copies)
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, int bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n .reg .pred done;\n"
      "MBAR_WAIT:\n"
      " mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      " @!done bra MBAR_WAIT;\n}" ::"r"(bar),
      "r"(parity)
      : "memory");
}
// bytes (a multiple of 16, both addresses 16-byte aligned) global -> shared, completing on bar.
__device__ __forceinline__ void bulk_copy_g2s(uint32_t dst, const void* src, int bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ uint32_t lds_u32(uint32_t addr) {
  uint32_t v;
  asm volatile("ld.shared.b32 %0, [%1];" : "=r"(v) : "r"(addr));
  return v;
}
// C[16x8] += A[16x16] B[16x8], f32 accumulate; bf16 (FP8 = false) or f16 (FP8 = true) inputs.
template <bool F16>
__device__ __forceinline__ void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (F16) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}
// Two e4m3 codes (low byte first) -> f16x2; exact (every e4m3 value is a normal f16).
__device__ __forceinline__ uint32_t e4m3x2_to_f16x2(uint32_t two_codes) {
  uint32_t out;
  asm("{\n .reg .b16 lo;\n cvt.u16.u32 lo, %1;\n cvt.rn.f16x2.e4m3x2 %0, lo;\n}" : "=r"(out) : "r"(two_codes));
  return out;
}
// Integer e4m3 -> f16 (value x 2^-8, exact, subnormals included; the 2^8 is folded into the
// scales): the e4m3 sign goes to bit 15 and its 7 exponent+mantissa bits to bits 13..7 of each
// f16 half (exponent bias 7 -> 15 is the 2^-8). Odd: bytes 1 and 3 of u; even: bytes 0 and 2.
constexpr float kFp8AluScale = 256.f;
// kLazy tiles: how far (log2 units) a tile's max may exceed the reference max before it moves.
constexpr float kLazyRescaleLog2 = 8.f;
__device__ __forceinline__ uint32_t e4m3_odd_bytes_to_f16x2(uint32_t u) {
  return (u & 0x80008000u) | ((u & 0x7F007F00u) >> 1);
}
__device__ __forceinline__ uint32_t e4m3_even_bytes_to_f16x2(uint32_t u) {
  return ((u << 8) & 0x80008000u) | ((u << 7) & 0x3F803F80u);
}
__device__ __forceinline__ float fast_exp2(float x) {  // ex2.approx: exp2(-inf) = 0
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
template <bool F16>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (F16) {
    __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&h);
  } else {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&h);
  }
}

// FP8 K fragments are read as one 32-bit word per (key, 4 dims); the QK^T k index is permuted
// inside each 16-dim step so that word feeds b0 (logical k 2c, 2c+1) and b1 (2c+8, 2c+9).
// q is stored in shared memory under the same permutation: logical index of physical dim p.
__device__ __forceinline__ int fp8_k_logical(int p) {
  const int c = (p & 15) >> 2, j = p & 3;
  return (p & ~15) + (j < 2 ? 2 * c + j : 2 * c + 8 + (j - 2));
}
// The inverse: the dim of q (and of the cache row) that mma k position x must hold, for a kernel
// that gathers q's A fragments straight from global memory.
__device__ __forceinline__ int fp8_k_source(int x) {
  return (x & ~15) + 4 * ((x & 7) >> 1) + (x & 1) + ((x >> 3) & 1) * 2;
}
// The integer K conversion feeds b0 from bytes 0, 2 and b1 from bytes 1, 3 of the word.
__device__ __forceinline__ int fp8_k_logical_alu(int p) {
  const int c = (p & 15) >> 2, j = p & 3;
  return (p & ~15) + 2 * c + (j & 1) * 8 + (j >> 1);
}

// Output dimension of accumulator n-tile n, logical column col (FP8 permutes V's dims, see below).
template <bool FP8>
__device__ __forceinline__ int acc_dim(int n, int col) {
  return FP8 ? (n >> 2) * 32 + 4 * col + (n & 3) : n * 8 + col;
}

// One K/V tile in shared memory (k_st, v_st: stage addresses) for this warp's key slice
// [key_off, key_off + kKeysPerWarp) of the tile whose first key is context position tile_base:
// S = q K^T (q_frag(qa, mt, kk) supplies q's A fragments), keys at positions >= hi masked, the
// online softmax (m_run, l_run in log2 units; l_run per thread, summed over the quad at the end)
// and acc += P V. [MT*16 query rows, kKeysPerWarp keys] per warp.
// kLazy: a row's reference max moves only when the tile's max exceeds it by more than
// kLazyRescaleLog2 (so p <= 2^8, far inside bf16 / f16 range), and a warp whose rows all kept
// theirs skips the acc rescale (64 FMULs per thread per m-tile at head_dim 128). The result is
// the same softmax: acc, l and the max stay consistent; only p's scale before rounding differs.
template <class C, bool FP8, int MT, bool kAluK, bool kAluV, bool kLazy, class QFrag>
__device__ __forceinline__ void attend_tile(uint32_t k_st, uint32_t v_st, int key_off, int tile_base, int hi,
                                            float score_scale, const QFrag& q_frag, float (&acc)[MT][C::kDN][4],
                                            float (&m_run)[MT][2], float (&l_run)[MT][2]) {
  constexpr int HD = C::kHeadDim;
  const int lane = threadIdx.x & 31;
  const int g = lane >> 2, c4 = lane & 3;  // mma fragment row / column pair
  // ---- S = q K^T over this warp's key slice: [MT*16 rows, kKeysPerWarp keys] ----
  float sfr[MT][C::kSN][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int n = 0; n < C::kSN; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) sfr[mt][n][i] = 0.f;

#pragma unroll
  for (int kk = 0; kk < C::kQK; ++kk) {
    uint32_t qa[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) q_frag(qa[mt], mt, kk);
    if constexpr (!FP8) {
#pragma unroll
      for (int np = 0; np < C::kSN / 2; ++np) {
        // matrices: keys 0-7 x dims 0-7 / 8-15, keys 8-15 x dims 0-7 / 8-15 -> b0,b1 of two n-tiles
        const int key = key_off + np * 16 + (lane & 7) + (lane >> 4) * 8;
        const int dim = kk * 16 + ((lane >> 3) & 1) * 8;
        uint32_t kb[4];
        ldmatrix_x4(kb, k_st + key * C::kRowStride + dim * 2);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma_16816<false>(sfr[mt][2 * np], qa[mt], kb[0], kb[1]);
          mma_16816<false>(sfr[mt][2 * np + 1], qa[mt], kb[2], kb[3]);
        }
      }
    } else {
#pragma unroll
      for (int n = 0; n < C::kSN; ++n) {
        const uint32_t w = lds_u32(k_st + (key_off + n * 8 + g) * C::kRowStride + kk * 16 + 4 * c4);
        uint32_t b0, b1;
        if constexpr (kAluK) {
          b0 = e4m3_even_bytes_to_f16x2(w);
          b1 = e4m3_odd_bytes_to_f16x2(w);
        } else {
          b0 = e4m3x2_to_f16x2(w & 0xffffu);
          b1 = e4m3x2_to_f16x2(w >> 16);
        }
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) mma_16816<true>(sfr[mt][n], qa[mt], b0, b1);
      }
    }
  }

  // ---- online softmax over the slice (rows g and g+8 of each m-tile) ----
  const bool partial_tile = tile_base + C::kTileKeys > hi;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int n = 0; n < C::kSN; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        float x = sfr[mt][n][i] * score_scale;
        if (partial_tile && tile_base + key_off + n * 8 + 2 * c4 + (i & 1) >= hi) x = -INFINITY;
        sfr[mt][n][i] = x;
      }
    float alpha[2];
    bool moved = false;  // kLazy: did either of this thread's rows move its reference max?
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = -INFINITY;
#pragma unroll
      for (int n = 0; n < C::kSN; ++n) mx = fmaxf(mx, fmaxf(sfr[mt][n][2 * r], sfr[mt][n][2 * r + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_old = m_run[mt][r];
      // lazy: -inf + threshold is -inf, so the first tile with a live key always sets the max
      const bool move = kLazy ? mx > m_old + kLazyRescaleLog2 : true;
      const float m_new = move ? fmaxf(m_old, mx) : m_old;
      const float m_use = m_new == -INFINITY ? 0.f : m_new;  // no keys yet: avoid (-inf) - (-inf)
      alpha[r] = move ? fast_exp2(m_old - m_use) : 1.f;
      moved = moved || move;
      m_run[mt][r] = m_new;
      float sum = 0.f;
#pragma unroll
      for (int n = 0; n < C::kSN; ++n) {
        const float p0 = fast_exp2(sfr[mt][n][2 * r] - m_use), p1 = fast_exp2(sfr[mt][n][2 * r + 1] - m_use);
        sfr[mt][n][2 * r] = p0;
        sfr[mt][n][2 * r + 1] = p1;
        sum += p0 + p1;
      }
      l_run[mt][r] = l_run[mt][r] * alpha[r] + sum;  // per-thread partial; the quad sums it at the end
    }
    if (!kLazy || __any_sync(0xffffffffu, moved)) {  // warp-uniform branch
#pragma unroll
      for (int n = 0; n < C::kDN; ++n) {
        acc[mt][n][0] *= alpha[0];
        acc[mt][n][1] *= alpha[0];
        acc[mt][n][2] *= alpha[1];
        acc[mt][n][3] *= alpha[1];
      }
    }
  }

  // ---- acc += P V: P from the S fragments (C layout of S == A layout of P) ----
#pragma unroll
  for (int j = 0; j < C::kPVK; ++j) {
    uint32_t pa[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      pa[mt][0] = pack2<FP8>(sfr[mt][2 * j][0], sfr[mt][2 * j][1]);
      pa[mt][1] = pack2<FP8>(sfr[mt][2 * j][2], sfr[mt][2 * j][3]);
      pa[mt][2] = pack2<FP8>(sfr[mt][2 * j + 1][0], sfr[mt][2 * j + 1][1]);
      pa[mt][3] = pack2<FP8>(sfr[mt][2 * j + 1][2], sfr[mt][2 * j + 1][3]);
    }
    const int key0 = key_off + j * 16;
    if constexpr (!FP8) {
#pragma unroll
      for (int dp = 0; dp < C::kDN / 2; ++dp) {
        // .trans matrices: keys 0-7 / 8-15 x dims 0-7, then x dims 8-15 -> b0,b1 of two n-tiles
        const int key = key0 + (lane & 7) + ((lane >> 3) & 1) * 8;
        const int dim = dp * 16 + (lane >> 4) * 8;
        uint32_t vb[4];
        ldmatrix_x4_trans(vb, v_st + key * C::kRowStride + dim * 2);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma_16816<false>(acc[mt][2 * dp], pa[mt], vb[0], vb[1]);
          mma_16816<false>(acc[mt][2 * dp + 1], pa[mt], vb[2], vb[3]);
        }
      }
    } else {
      // 32 dims at a time: word (key, dims 32dg + 4g .. +3) feeds byte t to n-tile 4dg + t, whose
      // logical column g is physical dim 32dg + 4g + t (undone in the epilogue).
#pragma unroll
      for (int dg = 0; dg < HD / 32; ++dg) {
        const uint32_t col = v_st + dg * 32 + 4 * g;
        const uint32_t w0 = lds_u32(col + (key0 + 2 * c4) * C::kRowStride);
        const uint32_t w1 = lds_u32(col + (key0 + 2 * c4 + 1) * C::kRowStride);
        const uint32_t w2 = lds_u32(col + (key0 + 2 * c4 + 8) * C::kRowStride);
        const uint32_t w3 = lds_u32(col + (key0 + 2 * c4 + 9) * C::kRowStride);
        if constexpr (kAluV) {
          // u01 = bytes t, t+1 of w0 then of w1 (t = 0, 2): even bytes -> n-tile t, odd -> t + 1
          const uint32_t u_lo = __byte_perm(w0, w1, 0x5410), u_hi = __byte_perm(w0, w1, 0x7632);
          const uint32_t v_lo = __byte_perm(w2, w3, 0x5410), v_hi = __byte_perm(w2, w3, 0x7632);
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            mma_16816<true>(acc[mt][4 * dg + 0], pa[mt], e4m3_even_bytes_to_f16x2(u_lo), e4m3_even_bytes_to_f16x2(v_lo));
            mma_16816<true>(acc[mt][4 * dg + 1], pa[mt], e4m3_odd_bytes_to_f16x2(u_lo), e4m3_odd_bytes_to_f16x2(v_lo));
            mma_16816<true>(acc[mt][4 * dg + 2], pa[mt], e4m3_even_bytes_to_f16x2(u_hi), e4m3_even_bytes_to_f16x2(v_hi));
            mma_16816<true>(acc[mt][4 * dg + 3], pa[mt], e4m3_odd_bytes_to_f16x2(u_hi), e4m3_odd_bytes_to_f16x2(v_hi));
          }
        } else {
#pragma unroll
          for (int t4 = 0; t4 < 4; ++t4) {
            const uint32_t sel = uint32_t(t4) | (uint32_t(t4 + 4) << 4);
            const uint32_t b0 = e4m3x2_to_f16x2(__byte_perm(w0, w1, sel));
            const uint32_t b1 = e4m3x2_to_f16x2(__byte_perm(w2, w3, sel));
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) mma_16816<true>(acc[mt][4 * dg + t4], pa[mt], b0, b1);
          }
        }
      }
    }
  }
}

// ---- host side ----
template <typename Kernel>
void set_smem_once(Kernel kernel, int bytes, bool& done) {
  // Once per instantiation and process (single-GPU engine; a second device would need its own call).
  if (done) return;
  LS_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  done = true;
}

template <typename Kernel>
void launch_pdl(Kernel kernel, dim3 grid, int threads, int smem_bytes, cudaStream_t stream, const KernelArgs& args,
                const char* name) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = dim3(threads);
  config.dynamicSmemBytes = size_t(smem_bytes);
  config.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attr;
  config.numAttrs = 1;
  LS_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, args));
  LS_CUDA_CHECK_LAUNCH(name);
}

// What one compiled split kernel is (for the plan) and, given args, its launch.
struct KernelShape {
  int threads = 0, tile_keys = 0, stages = 0, smem_bytes = 0;
};

// The stream-K kernel (paged_decode_streamk.cu): groups <= kStreamKMaxGroup, batches <=
// kStreamKMaxSeqs; its partials are [n_pairs + n_ctas][4 warps][group][head_dim] (+ (max, sum)).
constexpr int kStreamKMaxGroup = 16;
constexpr int kStreamKMaxSeqs = 256;
constexpr int kStreamKWarps = 4;
// args == nullptr: the shape only. Otherwise launches n_ctas CTAs (1-D grid).
KernelShape streamk_kernel(int head_dim, bool fp8, const KernelArgs* args, int n_ctas, cudaStream_t stream);

}  // namespace latentserve::cuda::paged_decode
