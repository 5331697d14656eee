#pragma once
// The gemm shape of paged_attention (MQA, MLA's latent row, groups of 16 query heads) on bf16
// cache rows with Intel AMX tiles: TDPBF16PS adds a [16 x 32] bf16 by [32 x 16] bf16 product
// into a [16 x 16] f32 tile, ~16 times the f32 FMA rate of an AVX-512 core.
//
// Accuracy. The K and V rows are bf16 already (what the cache holds), so only the query and
// the softmax weights need rounding to feed the tiles. Each is split into three bf16 terms,
// x = hi + mid + lo (hi = bf16(x), mid = bf16(x - hi), lo = bf16(x - hi - mid): 24 significant
// bits, as many as f32), and every product is three TDPBF16PS: the scores and P·V come out as
// accurate as the f32 kernel's on the dequantised rows (tests/backend/paged_attention_test.cpp
// runs both against the same f32 tolerance). Softmax, its running max and sum, and the
// accumulators stay f32. The hardware flushes bf16 denormals (|x| < 2^-126) to zero: terms that
// small are below f32's resolution of any score or weight they are part of.
//
// Tiles. Scores for 48 keys x 16 heads: keys are the tile rows (A, [16 keys, 32 dims] straight
// from the cache rows when 16 keys are consecutive slots of one block, else from a staged copy),
// the query the B tile ([16 dim pairs, 16 heads, 2], packed once per item). P·V per 16 columns:
// A = the weights [16 heads, 32 keys], B = the V rows pair-interleaved ([16 key pairs, 16 columns,
// 2]), re-laid per 16 columns into a buffer that stays in L1; the accumulator tile is loaded
// from and stored to the f32 accumulators, whose row stride is padded off multiples of 4 KiB.
#include <cstdint>

namespace latentserve::cpu::amx {

inline constexpr int64_t kTileKeys = 48;   // keys per online-softmax step (as paged_attention.cpp)
inline constexpr int64_t kHeads = 16;      // query heads per pass
inline constexpr int64_t kDepth = 32;      // bf16 elements per tile row (64 bytes)

// AMX-TILE and AMX-BF16 in CPUID, the tile state enabled by the OS and granted to this process
// (Linux: arch_prctl(ARCH_REQ_XCOMP_PERM)); false when the environment sets
// LATENTSERVE_CPU_AMX=0. Checked once.
bool available();

// Whether the gemm shape can run on AMX for these dimensions (heads a multiple of 16 per KV
// head, head_dim_qk a multiple of 32, head_dim_v a multiple of 16).
inline bool shape_fits(int64_t group, int64_t head_dim_qk, int64_t head_dim_v) {
  return group % kHeads == 0 && head_dim_qk % kDepth == 0 && head_dim_v % 16 == 0;
}

// Loads the kernels' tile configuration on the calling thread / gives the tile state back.
void configure();
void release();

// Elements of pack_queries' output for one chunk of 16 heads.
inline int64_t packed_query_elements(int64_t dk) { return 3 * dk * kHeads; }

// qb[((t * (dk / 32) + s) * 16 + r) * 32 + 2 g + e] = term t of scale * q[g * head_stride + 32 s + 2 r + e],
// g < 16: the three B tiles of each 32-dim step.
void pack_queries(const float* q, int64_t head_stride, int64_t dk, float scale, uint16_t* qb);

// st[j * 16 + g] = Σ_d q[g, d] k_j[d] for j < 48 (q as packed; rows of keys 16 i .. 16 i + 15 at
// k[i] + row * k_stride[i] bytes, bf16, the KV head's offset applied).
void scores(const uint16_t* qb, int64_t dk, const uint16_t* const k[3], const int64_t k_stride[3], float* st);

// Scratch elements accumulate_pv needs for head_dim_v = dv.
inline int64_t pv_scratch_elements(int64_t) { return 2 * 32 * 32 + 3 * kHeads * 64; }

// acc[g * acc_stride + c] += Σ_{j < n} p[j * 16 + g] v[j][c] for g < 16, c < dv (n <= 48; v[j]
// bf16, the KV head's offset applied); acc_stride in floats.
void accumulate_pv(const float* p, int64_t n, const uint16_t* const* v, int64_t dv, float* acc, int64_t acc_stride,
                   uint16_t* scratch);

}  // namespace latentserve::cpu::amx
