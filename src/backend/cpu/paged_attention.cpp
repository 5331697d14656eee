// How the kernel is organised (docs/perf-model.md, "Measured on the CPU", has the numbers):
//
// Work items. One item is one query token over a contiguous range of its visible keys, for
// every head. A decode batch has few tokens, so each token's context is cut into pieces
// (split-KV) until there are about kItemsPerThread items per thread; the pieces' partial
// softmax states are merged at the end. Threads take items from a shared counter (largest
// first), so ragged batches and prefill chunks balance too.
//
// Tiles. An item walks its keys kTileKeys at a time (a tile may span KV blocks: it is a list
// of row pointers). Every head of the token is handled inside the tile, so the tile's K and V
// rows ([slot, n_head_kv * head_dim]) are read from memory once, front to back, whatever
// the layout, and stay in cache while the heads take their slices. Quantised caches are
// dequantised a tile at a time into a per-thread buffer.
//
// Two compute shapes, chosen by the group size (query heads per KV head):
//   rows (MHA, small GQA groups): one K row at a time, 8 query heads' dot products with
//     their slices of it reduced together into one vector of 8 scores; f32 rows are
//     software-prefetched a slice per head (K 8 rows ahead, V a tile ahead of its use);
//   gemm (MQA, MLA, large groups): the group's queries, transposed to [head_dim, heads],
//     against a broadcast key element: up to 16 heads x 6 keys of scores in 12 accumulators
//     (a small GEMM with no horizontal sums); softmax vectorised across the heads.
// Both accumulate P·V with the heads sharing each V row load (4 heads x 24 columns in
// registers). Exponentials are 8 lanes at a time (a Cephes-style polynomial).
// On AVX-512 machines (chosen at run time; PagedAttentionParams::allow_avx512 = false keeps
// AVX2) the gemm shape's two small GEMMs use 16-lane vectors: a chunk of 16 heads is one
// vector, 12 keys x 16 heads of scores in 12 accumulators, and P·V in 4 heads x 64 columns.
#include "backend/cpu/paged_attention.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cassert>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/cpu/cpu_features.h"
#include "backend/cpu/paged_attention_amx.h"
#include "backend/cpu/simd_exp.h"

namespace latentserve::cpu {

namespace {

constexpr int64_t kTileKeys = 48;       // keys per online-softmax step: a multiple of 8 (rows), 6 and 12 (gemm)
constexpr int64_t kMinSplitKeys = 128;  // split-KV never cuts a token's keys into pieces shorter than this
constexpr int64_t kItemsPerThread = 8;  // split-KV aims at this many items per thread
constexpr int64_t kGemmMinGroup = 6;    // groups of at least this many query heads take the gemm shape
constexpr int64_t kHeadChunk = 16;      // gemm shape: query heads per pass (two vectors of 8)
constexpr int64_t kPrefetchRows = 8;   // rows shape: K rows prefetched this far ahead
constexpr auto kPrefetchHint = _MM_HINT_T0;
static_assert(amx::kTileKeys == kTileKeys && amx::kHeads == kHeadChunk);

inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline float hmax8(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Lane r of the result = the sum of a[r]'s lanes.
inline __m256 reduce_8x8(const __m256* a) {
  const __m256 t0 = _mm256_hadd_ps(a[0], a[1]), t1 = _mm256_hadd_ps(a[2], a[3]);
  const __m256 t2 = _mm256_hadd_ps(a[4], a[5]), t3 = _mm256_hadd_ps(a[6], a[7]);
  const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);  // [s0..s3 low halves | high halves]
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

// Lane r = q · k[r][off, off + dk), r < 8.
inline __m256 dot8(const float* q, const float* const* k, int64_t off, int64_t dk) {
  __m256 a[8];
#pragma GCC unroll 8
  for (int r = 0; r < 8; ++r) a[r] = _mm256_setzero_ps();
  int64_t d = 0;
  for (; d + 8 <= dk; d += 8) {
    const __m256 qv = _mm256_loadu_ps(q + d);
#pragma GCC unroll 8
    for (int r = 0; r < 8; ++r) a[r] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k[r] + off + d), a[r]);
  }
  __m256 s = reduce_8x8(a);
  if (d < dk) {
    alignas(32) float tail[8];
    for (int r = 0; r < 8; ++r) {
      float t = 0.0f;
      for (int64_t i = d; i < dk; ++i) t += q[i] * k[r][off + i];
      tail[r] = t;
    }
    s = _mm256_add_ps(s, _mm256_load_ps(tail));
  }
  return s;
}

// st[r * kHeadChunk + 8 v + lane] = Σ_d qt[d * qt_stride + 8 v + lane] * k[r][off + d], r < RJ, v < NV.
template <int NV, int RJ>
inline void qk_block(const float* qt, int64_t qt_stride, const float* const* k, int64_t off, int64_t dk, float* st) {
  __m256 acc[RJ][NV];
  const float* kr[RJ];
#pragma GCC unroll 8
  for (int r = 0; r < RJ; ++r) {
    kr[r] = k[r] + off;
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm256_setzero_ps();
  }
  for (int64_t d = 0; d < dk; ++d) {
    __m256 qv[NV];
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) qv[v] = _mm256_loadu_ps(qt + d * qt_stride + 8 * v);
#pragma GCC unroll 8
    for (int r = 0; r < RJ; ++r) {
      const __m256 kb = _mm256_broadcast_ss(kr[r] + d);
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm256_fmadd_ps(qv[v], kb, acc[r][v]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < RJ; ++r)
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) _mm256_storeu_ps(st + r * kHeadChunk + 8 * v, acc[r][v]);
}

// acc[g * acc_stride + c + i] += Σ_j p[g * p_head + j * p_key] * v[j][off + c + i], g < RG, i < 8 RV, j < n.
template <int RG, int RV>
inline void pv_block(float* acc, int64_t acc_stride, const float* p, int64_t p_head, int64_t p_key,
                     const float* const* v, int64_t off, int64_t n) {
  __m256 a[RG][RV];
#pragma GCC unroll 4
  for (int g = 0; g < RG; ++g)
#pragma GCC unroll 8
    for (int c = 0; c < RV; ++c) a[g][c] = _mm256_loadu_ps(acc + g * acc_stride + 8 * c);
  for (int64_t j = 0; j < n; ++j) {
    const float* vj = v[j] + off;
    __m256 vv[RV];
#pragma GCC unroll 8
    for (int c = 0; c < RV; ++c) vv[c] = _mm256_loadu_ps(vj + 8 * c);
#pragma GCC unroll 4
    for (int g = 0; g < RG; ++g) {
      const __m256 pb = _mm256_broadcast_ss(p + g * p_head + j * p_key);
#pragma GCC unroll 8
      for (int c = 0; c < RV; ++c) a[g][c] = _mm256_fmadd_ps(pb, vv[c], a[g][c]);
    }
  }
#pragma GCC unroll 4
  for (int g = 0; g < RG; ++g)
#pragma GCC unroll 8
    for (int c = 0; c < RV; ++c) _mm256_storeu_ps(acc + g * acc_stride + 8 * c, a[g][c]);
}

// Columns [c, c + 8 RV) for every head, RG heads at a time (then one at a time).
template <int RG, int RV>
inline void pv_columns(float* acc, int64_t acc_stride, int64_t n_heads, const float* p, int64_t p_head, int64_t p_key,
                       const float* const* v, int64_t off, int64_t n) {
  int64_t g = 0;
  for (; g + RG <= n_heads; g += RG)
    pv_block<RG, RV>(acc + g * acc_stride, acc_stride, p + g * p_head, p_head, p_key, v, off, n);
  for (; g < n_heads; ++g) pv_block<1, RV>(acc + g * acc_stride, acc_stride, p + g * p_head, p_head, p_key, v, off, n);
}

// acc[g, :dv] += Σ_j p[g, j] v[j][off, off + dv) for n_heads heads that share the V rows;
// column blocks outermost, so a block of the tile's V rows stays in L1 while every head uses
// it. Register tiles of up to 12 accumulators: 1 head x 64 columns, 2 x 32 or 4 x 24.
template <int RG, int RV>
void accumulate_pv_tiles(float* acc, int64_t acc_stride, int64_t n_heads, const float* p, int64_t p_head,
                         int64_t p_key, const float* const* v, int64_t off, int64_t n, int64_t dv) {
  int64_t c = 0;
  for (; c + 8 * RV <= dv; c += 8 * RV)
    pv_columns<RG, RV>(acc + c, acc_stride, n_heads, p, p_head, p_key, v, off + c, n);
  for (; c + 8 <= dv; c += 8) pv_columns<RG, 1>(acc + c, acc_stride, n_heads, p, p_head, p_key, v, off + c, n);
  for (; c < dv; ++c)
    for (int64_t g = 0; g < n_heads; ++g) {
      float s = acc[g * acc_stride + c];
      for (int64_t j = 0; j < n; ++j) s += p[g * p_head + j * p_key] * v[j][off + c];
      acc[g * acc_stride + c] = s;
    }
}

void accumulate_pv(float* acc, int64_t acc_stride, int64_t n_heads, const float* p, int64_t p_head, int64_t p_key,
                   const float* const* v, int64_t off, int64_t n, int64_t dv) {
  if (n_heads == 1)
    accumulate_pv_tiles<1, 8>(acc, acc_stride, n_heads, p, p_head, p_key, v, off, n, dv);
  else if (n_heads < 4)
    accumulate_pv_tiles<2, 4>(acc, acc_stride, n_heads, p, p_head, p_key, v, off, n, dv);
  else
    accumulate_pv_tiles<4, 3>(acc, acc_stride, n_heads, p, p_head, p_key, v, off, n, dv);
}

// ---------------------------------------------------------------------------------
// AVX-512 versions of the gemm shape's small GEMMs (qk_block<2, 6>, accumulate_pv), the same
// arithmetic in 16-lane vectors. Not inlined into the AVX2 code: called per block.
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl")
// GCC 12 warns that the "undefined" vectors inside its AVX-512 intrinsics are
// uninitialised (a false positive, GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
namespace avx512 {

constexpr int kQkKeys = 12;  // keys per qk_block (12 accumulators; 8 or 16 measured 5-10% slower); divides kTileKeys
static_assert(kTileKeys % kQkKeys == 0);

// st[r * kHeadChunk + lane] = Σ_d qt[d * qt_stride + lane] * k[r][off + d], r < kQkKeys, lane < 16.
__attribute__((noinline)) void qk_block(const float* qt, int64_t qt_stride, const float* const* k, int64_t off,
                                        int64_t dk, float* st) {
  static_assert(kHeadChunk == 16, "one vector of heads");
  constexpr int RJ = kQkKeys;
  __m512 acc[RJ];
  const float* kr[RJ];
#pragma GCC unroll 12
  for (int r = 0; r < RJ; ++r) {
    kr[r] = k[r] + off;
    acc[r] = _mm512_setzero_ps();
  }
  for (int64_t d = 0; d < dk; ++d) {
    const __m512 qv = _mm512_loadu_ps(qt + d * qt_stride);
#pragma GCC unroll 12
    for (int r = 0; r < RJ; ++r) acc[r] = _mm512_fmadd_ps(qv, _mm512_set1_ps(kr[r][d]), acc[r]);
  }
#pragma GCC unroll 12
  for (int r = 0; r < RJ; ++r) _mm512_storeu_ps(st + r * kHeadChunk, acc[r]);
}

// acc[g * acc_stride + c + i] += Σ_j p[g * p_head + j * p_key] * v[j][off + c + i], g < RG, i < 16 RV, j < n.
template <int RG, int RV>
inline void pv_block(float* acc, int64_t acc_stride, const float* p, int64_t p_head, int64_t p_key,
                     const float* const* v, int64_t off, int64_t n) {
  __m512 a[RG][RV];
#pragma GCC unroll 4
  for (int g = 0; g < RG; ++g)
#pragma GCC unroll 4
    for (int c = 0; c < RV; ++c) a[g][c] = _mm512_loadu_ps(acc + g * acc_stride + 16 * c);
  for (int64_t j = 0; j < n; ++j) {
    const float* vj = v[j] + off;
    __m512 vv[RV];
#pragma GCC unroll 4
    for (int c = 0; c < RV; ++c) vv[c] = _mm512_loadu_ps(vj + 16 * c);
#pragma GCC unroll 4
    for (int g = 0; g < RG; ++g) {
      const __m512 pb = _mm512_set1_ps(p[g * p_head + j * p_key]);
#pragma GCC unroll 4
      for (int c = 0; c < RV; ++c) a[g][c] = _mm512_fmadd_ps(pb, vv[c], a[g][c]);
    }
  }
#pragma GCC unroll 4
  for (int g = 0; g < RG; ++g)
#pragma GCC unroll 4
    for (int c = 0; c < RV; ++c) _mm512_storeu_ps(acc + g * acc_stride + 16 * c, a[g][c]);
}

// Columns [c, c + 16 RV) for every head, RG heads at a time (then one at a time).
template <int RG, int RV>
inline void pv_columns(float* acc, int64_t acc_stride, int64_t n_heads, const float* p, int64_t p_head, int64_t p_key,
                       const float* const* v, int64_t off, int64_t n) {
  int64_t g = 0;
  for (; g + RG <= n_heads; g += RG)
    pv_block<RG, RV>(acc + g * acc_stride, acc_stride, p + g * p_head, p_head, p_key, v, off, n);
  for (; g < n_heads; ++g) pv_block<1, RV>(acc + g * acc_stride, acc_stride, p + g * p_head, p_head, p_key, v, off, n);
}

// As accumulate_pv below: column blocks of 64 outermost (4 heads x 4 vectors in registers),
// then blocks of 16, then single columns.
__attribute__((noinline)) void accumulate_pv(float* acc, int64_t acc_stride, int64_t n_heads, const float* p,
                                             int64_t p_head, int64_t p_key, const float* const* v, int64_t off,
                                             int64_t n, int64_t dv) {
  int64_t c = 0;
  for (; c + 64 <= dv; c += 64) pv_columns<4, 4>(acc + c, acc_stride, n_heads, p, p_head, p_key, v, off + c, n);
  for (; c + 16 <= dv; c += 16) pv_columns<4, 1>(acc + c, acc_stride, n_heads, p, p_head, p_key, v, off + c, n);
  for (; c < dv; ++c)
    for (int64_t g = 0; g < n_heads; ++g) {
      float s = acc[g * acc_stride + c];
      for (int64_t j = 0; j < n; ++j) s += p[g * p_head + j * p_key] * v[j][off + c];
      acc[g * acc_stride + c] = s;
    }
}

}  // namespace avx512
#pragma GCC diagnostic pop
#pragma GCC pop_options

inline void scale_row(float* x, float alpha, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] *= alpha;
}

// One token's keys [key_begin, key_end); partial >= 0: its unnormalised state goes to the
// partial buffer (slot `partial`) for the merge, else the normalised output to p.out.
struct WorkItem {
  int64_t token, seq, key_begin, key_end, partial;
};

struct Layout {
  int64_t group, group_padded;  // gemm shape: the group padded to a multiple of 8
  bool gemm, v_shares_k;
  bool avx512;  // gemm shape: the AVX-512 small GEMMs
  bool amx;     // gemm shape on bf16 rows: AMX tiles (paged_attention_amx.h)
  // Softmax state slots (max, sum, acc row): rows shape: query head hq at hq, n_head padded to
  // a multiple of 8; gemm shape: query head g of KV head h at h * group_padded + g.
  int64_t n_state;
  int64_t state_of(int64_t hq) const { return gemm ? (hq / group) * group_padded + hq % group : hq; }
};

// Per-thread scratch, reused across items.
struct Scratch {
  std::vector<float> qt;      // gemm: [n_head_kv, head_dim_qk, group_padded] scaled, transposed queries
  std::vector<float> scores;  // rows: [kTileKeys, n_state]; gemm: [kTileKeys, kHeadChunk]
  std::vector<float> max, sum, acc;  // [n_state], [n_state], [n_state, head_dim_v]
  std::vector<float> k_tile, v_tile;  // [kTileKeys, row_elements] dequantised rows (BF16 / FP8 caches)
  const float* k_rows[kTileKeys];
  const float* v_rows[kTileKeys];
  // f32 caches: the next tile's rows, prefetched while this one is computed (next_n = 0: none)
  const float* next_k[kTileKeys];
  const float* next_v[kTileKeys];
  int64_t next_n = 0;
  int64_t k_row_bytes = 0, v_row_bytes = 0;  // bytes to prefetch per row (0: rows are not f32)
  int64_t acc_stride = 0;  // floats between accumulator rows: head_dim_v (AMX: padded)
  // AMX (bf16 rows, not dequantised): the tile's rows, its three 16-key groups (cache rows or
  // staged copies) and the packed queries of token qb_token ([n_head_kv, group / 16] chunks)
  const uint16_t* k_bf16[kTileKeys];
  const uint16_t* v_bf16[kTileKeys];
  const uint16_t* k_group[3];
  int64_t k_group_stride[3];
  std::vector<uint16_t> k_stage, qb, amx_work;
  int64_t qb_token = -1;
};

inline void prefetch_row(const float* row, int64_t bytes) {
  const char* c = reinterpret_cast<const char*>(row);
  for (int64_t b = 0; b < bytes; b += 64) _mm_prefetch(c + b, kPrefetchHint);
  _mm_prefetch(c + bytes - 1, kPrefetchHint);
}

// Slice `part` of a row of `bytes`: lines [part * per_part, (part + 1) * per_part), per_part =
// slice_lines(bytes, parts).
inline int64_t slice_lines(int64_t bytes, int64_t parts) {
  const int64_t lines = (bytes + 63) / 64 + 1;  // + 1: the row need not start on a line
  return (lines + parts - 1) / parts;
}
inline void prefetch_slice(const float* row, int64_t bytes, int64_t part, int64_t per_part) {
  const char* c = reinterpret_cast<const char*>(row);
  for (int64_t l = part * per_part; l < (part + 1) * per_part; ++l)
    _mm_prefetch(c + std::min(l * 64, bytes - 1), kPrefetchHint);
}

// f32 rows of keys [first, first + n) of one sequence.
void f32_row_pointers(const KvRows& rows, const int32_t* table, int64_t block_size, int64_t first, int64_t n,
                      const float** out) {
  const float* base = static_cast<const float*>(rows.data);
  for (int64_t j = 0; j < n; ++j) {
    const int64_t pos = first + j;
    out[j] = base + (int64_t(table[pos / block_size]) * block_size + pos % block_size) * rows.row_elements;
  }
}

// Fills s.k_rows / s.v_rows with the rows of keys [first, first + n) (n <= kTileKeys), padded
// to a multiple of 8 with the first row (the padded scores are computed and never used).
void gather_tile(const PagedAttentionParams& p, const Layout& L, const int32_t* table, int64_t first, int64_t n,
                 Scratch& s) {
  const int64_t bs = p.block_size;
  auto gather = [&](const KvRows& rows, std::vector<float>& tile, const float** out) {
    if (rows.dtype == DType::F32) {
      f32_row_pointers(rows, table, bs, first, n, out);
      return;
    }
    const int64_t w = rows.row_elements;
    for (int64_t j = 0; j < n;) {  // a run of rows within one block at a time
      const int64_t pos = first + j, run = std::min(n - j, bs - pos % bs);
      dequantize_rows(rows, int64_t(table[pos / bs]) * bs + pos % bs, run, 0, w, tile.data() + j * w);
      for (int64_t i = 0; i < run; ++i) out[j + i] = tile.data() + (j + i) * w;
      j += run;
    }
  };
  gather(p.k_cache, s.k_tile, s.k_rows);
  if (L.v_shares_k)
    std::copy_n(s.k_rows, n, s.v_rows);
  else
    gather(p.v_cache, s.v_tile, s.v_rows);
  for (int64_t j = n; j < kTileKeys; ++j) s.k_rows[j] = s.k_rows[0];
}

// AMX: the tile's bf16 rows as they are in the cache (row pointers), and each 16-key group of K
// either the cache rows themselves (16 consecutive slots of one block: one strided tile load) or
// a staged copy padded with zero rows.
void gather_tile_amx(const PagedAttentionParams& p, const Layout& L, const int32_t* table, int64_t first, int64_t n,
                     Scratch& s) {
  const int64_t bs = p.block_size, w = p.k_cache.row_elements;
  auto row = [&](const KvRows& rows, int64_t pos) {
    return reinterpret_cast<const uint16_t*>(rows.row(int64_t(table[pos / bs]) * bs + pos % bs));
  };
  for (int64_t j = 0; j < n; ++j) {
    s.k_bf16[j] = row(p.k_cache, first + j);
    s.v_bf16[j] = L.v_shares_k ? s.k_bf16[j] : row(p.v_cache, first + j);
  }
  for (int64_t i = 0; i < 3; ++i) {
    const int64_t j0 = 16 * i;
    if (j0 + 16 <= n && (first + j0) % bs + 16 <= bs) {
      s.k_group[i] = s.k_bf16[j0];
      s.k_group_stride[i] = p.k_cache.row_bytes;
      continue;
    }
    uint16_t* stage = &s.k_stage[size_t(i * 16 * w)];
    for (int64_t r = 0; r < 16; ++r)
      if (j0 + r < n)
        std::memcpy(stage + r * w, s.k_bf16[j0 + r], size_t(w) * 2);
      else
        std::memset(stage + r * w, 0, size_t(w) * 2);
    s.k_group[i] = stage;
    s.k_group_stride[i] = w * 2;
  }
}

// The online-softmax step for a tile of scores st[j * stride + lane] (j < n, n_vec vectors of 8
// heads; state index `state` + lane): updates max and sum, rescales the n_heads valid heads'
// accumulators, and leaves the exponentials in st.
void softmax_tile(float* st, int64_t stride, int64_t n, int64_t n_vec, int64_t state, int64_t n_heads, int64_t dv,
                  Scratch& s) {
  for (int64_t v = 0; v < n_vec; ++v) {
    __m256 tile_max = _mm256_loadu_ps(st + 8 * v);
    for (int64_t j = 1; j < n; ++j) tile_max = _mm256_max_ps(tile_max, _mm256_loadu_ps(st + j * stride + 8 * v));
    const __m256 old_max = _mm256_loadu_ps(&s.max[size_t(state + 8 * v)]);
    const __m256 new_max = _mm256_max_ps(old_max, tile_max);
    const __m256 correction = exp8(_mm256_sub_ps(old_max, new_max));  // ~0 on the first tile
    __m256 tile_sum = _mm256_setzero_ps();
    for (int64_t j = 0; j < n; ++j) {
      float* sj = st + j * stride + 8 * v;
      const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(sj), new_max));
      _mm256_storeu_ps(sj, e);
      tile_sum = _mm256_add_ps(tile_sum, e);
    }
    float* sum = &s.sum[size_t(state + 8 * v)];
    _mm256_storeu_ps(sum, _mm256_fmadd_ps(_mm256_loadu_ps(sum), correction, tile_sum));
    _mm256_storeu_ps(&s.max[size_t(state + 8 * v)], new_max);
    alignas(32) float c[8];
    _mm256_store_ps(c, correction);
    for (int64_t g = 0; g < 8 && 8 * v + g < n_heads; ++g)
      if (c[g] != 1.0f) scale_row(&s.acc[size_t((state + 8 * v + g) * s.acc_stride)], c[g], dv);
  }
}

// MHA / small groups: one K row at a time, all heads: 8 query heads' dot products with their
// slices of the row, reduced together into one vector of 8 scores. Rows are read front to
// back (an MHA f32 row is 4 KiB: walking one head's slice down the rows would hit one L1 set).
// Scores st[j * n_head_padded + hq].
void rows_tile(const PagedAttentionParams& p, const Layout& L, const float* q, int64_t n, Scratch& s) {
  const int64_t dk = p.head_dim_qk, dv = p.head_dim_v, group = L.group, hp = L.n_state;
  const int64_t dk8 = dk - dk % 8;
  const __m256 scale = _mm256_set1_ps(p.softmax_scale);
  float* st = s.scores.data();
  const int64_t k_per = slice_lines(s.k_row_bytes, p.n_head), v_per = slice_lines(s.v_row_bytes, p.n_head);
  for (int64_t j = 0; j < n; ++j) {
    const float* kj = s.k_rows[j];
    const float* pf_v = s.v_row_bytes > 0 ? s.v_rows[j] : nullptr;
    const float* pf_k = nullptr;
    if (s.k_row_bytes > 0) {
      const int64_t ahead = j + kPrefetchRows;
      pf_k = ahead < n ? s.k_rows[ahead] : ahead - n < s.next_n ? s.next_k[ahead - n] : nullptr;
    }
    for (int64_t h0 = 0; h0 < p.n_head; h0 += 8) {
      const int64_t nh = std::min<int64_t>(8, p.n_head - h0);
      __m256 a[8];
      alignas(32) float tail[8] = {};
      for (int64_t i = 0; i < nh; ++i) {
        if (pf_k) prefetch_slice(pf_k, s.k_row_bytes, h0 + i, k_per);
        if (pf_v) prefetch_slice(pf_v, s.v_row_bytes, h0 + i, v_per);
        const float* qi = q + (h0 + i) * dk;
        const float* ki = kj + ((h0 + i) / group) * dk;
        __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
        int64_t d = 0;
        for (; d + 16 <= dk; d += 16) {
          s0 = _mm256_fmadd_ps(_mm256_loadu_ps(qi + d), _mm256_loadu_ps(ki + d), s0);
          s1 = _mm256_fmadd_ps(_mm256_loadu_ps(qi + d + 8), _mm256_loadu_ps(ki + d + 8), s1);
        }
        if (d < dk8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(qi + d), _mm256_loadu_ps(ki + d), s0);
        a[i] = _mm256_add_ps(s0, s1);
        for (d = dk8; d < dk; ++d) tail[i] += qi[d] * ki[d];
      }
      for (int64_t i = nh; i < 8; ++i) a[i] = _mm256_setzero_ps();
      __m256 r = reduce_8x8(a);
      if (dk8 < dk) r = _mm256_add_ps(r, _mm256_load_ps(tail));
      _mm256_storeu_ps(st + j * hp + h0, _mm256_mul_ps(scale, r));
    }
  }
  softmax_tile(st, hp, n, hp / 8, 0, p.n_head, dv, s);
  // acc[hq] += Σ_j p[j, hq] v[j][kv head of hq]: 4 rows at a time, heads along the rows.
  for (int64_t j = 0; j < n; j += 4) {
    const int64_t nj = std::min<int64_t>(4, n - j);
    for (int64_t h = 0; h < p.n_head_kv; ++h)
      accumulate_pv(&s.acc[size_t(h * group * s.acc_stride)], s.acc_stride, group, st + j * hp + h * group, 1, hp, s.v_rows + j, h * dv,
                    nj, dv);
  }
}

// MQA / MLA / large groups: per KV head and chunk of up to 16 query heads, scores
// [kTileKeys, kHeadChunk] from the transposed queries; softmax across the heads' lanes.
void gemm_tile(const PagedAttentionParams& p, const Layout& L, int64_t n, Scratch& s) {
  const int64_t dk = p.head_dim_qk, dv = p.head_dim_v, gp = L.group_padded;
  for (int64_t h = 0; h < p.n_head_kv; ++h)
    for (int64_t gc = 0; gc < L.group; gc += kHeadChunk) {
      const float* qt = &s.qt[size_t(h * dk * gp + gc)];
      const int64_t nv = std::min<int64_t>(2, (gp - gc) / 8);  // vectors of heads in this chunk
      float* st = s.scores.data();
      const bool prefetch = s.k_row_bytes > 0 && h == 0 && gc == 0;  // the next tile's rows, once
      const bool wide = L.avx512 && nv == 2;                            // 16 heads in one vector
      const int64_t step = wide ? avx512::kQkKeys : nv == 2 ? 6 : 8;   // keys per block; divides kTileKeys
      for (int64_t j = 0; j < n; j += step) {
        if (prefetch)
          for (int64_t i = j; i < std::min(s.next_n, j + step); ++i) {
            prefetch_row(s.next_k[i], s.k_row_bytes);
            if (s.v_row_bytes > 0) prefetch_row(s.next_v[i], s.v_row_bytes);
          }
        if (wide)
          avx512::qk_block(qt, gp, s.k_rows + j, h * dk, dk, st + j * kHeadChunk);
        else if (nv == 2)
          qk_block<2, 6>(qt, gp, s.k_rows + j, h * dk, dk, st + j * kHeadChunk);
        else
          qk_block<1, 8>(qt, gp, s.k_rows + j, h * dk, dk, st + j * kHeadChunk);
      }
      const int64_t state = h * gp + gc, heads = std::min(kHeadChunk, L.group - gc);
      softmax_tile(st, kHeadChunk, n, nv, state, heads, dv, s);
      if (L.avx512)
        avx512::accumulate_pv(&s.acc[size_t(state * s.acc_stride)], s.acc_stride, heads, st, 1, kHeadChunk, s.v_rows, h * dv, n, dv);
      else
        accumulate_pv(&s.acc[size_t(state * s.acc_stride)], s.acc_stride, heads, st, 1, kHeadChunk, s.v_rows, h * dv, n, dv);
    }
}

// The gemm shape on AMX tiles (group a multiple of 16: no padding heads).
void gemm_tile_amx(const PagedAttentionParams& p, const Layout& L, int64_t n, Scratch& s) {
  const int64_t dk = p.head_dim_qk, dv = p.head_dim_v, chunks = L.group / kHeadChunk;
  const int64_t packed = amx::packed_query_elements(dk);
  float* st = s.scores.data();
  for (int64_t h = 0; h < p.n_head_kv; ++h) {
    const uint16_t* k[3];
    for (int64_t i = 0; i < 3; ++i) k[i] = s.k_group[i] + h * dk;
    const uint16_t* v[kTileKeys];
    for (int64_t j = 0; j < n; ++j) v[j] = s.v_bf16[j] + h * dv;
    for (int64_t c = 0; c < chunks; ++c) {
      amx::scores(&s.qb[size_t((h * chunks + c) * packed)], dk, k, s.k_group_stride, st);
      const int64_t state = h * L.group_padded + c * kHeadChunk;
      softmax_tile(st, kHeadChunk, n, 2, state, kHeadChunk, dv, s);
      amx::accumulate_pv(st, n, v, dv, &s.acc[size_t(state * s.acc_stride)], s.acc_stride, s.amx_work.data());
    }
  }
}

void run_item(const PagedAttentionParams& p, const Layout& L, const WorkItem& item, float* partials, Scratch& s) {
  const int64_t dk = p.head_dim_qk, dv = p.head_dim_v, n_state = L.n_state;
  const float* q = p.q + item.token * p.q_token_stride;  // [n_head, dk]
  const int32_t* table = p.block_tables + item.seq * p.max_blocks_per_seq;
  s.max.assign(size_t(n_state), -std::numeric_limits<float>::infinity());
  s.sum.assign(size_t(n_state), 0.0f);
  s.acc_stride = L.amx ? dv + 16 : dv;  // AMX: accumulator rows loaded as tiles, off 4 KiB strides
  s.acc.assign(size_t(n_state * s.acc_stride), 0.0f);
  // Prefetching for f32 rows (quantised rows are read by the dequantisation, front to back).
  const bool f32 = p.k_cache.dtype == DType::F32 && (L.v_shares_k || p.v_cache.dtype == DType::F32);
  s.k_row_bytes = f32 ? p.k_cache.row_elements * 4 : 0;
  s.v_row_bytes = f32 && !L.v_shares_k ? p.v_cache.row_elements * 4 : 0;
  if (!L.amx) {
    if (p.k_cache.dtype != DType::F32) s.k_tile.resize(size_t(kTileKeys * p.k_cache.row_elements));
    if (!L.v_shares_k && p.v_cache.dtype != DType::F32) s.v_tile.resize(size_t(kTileKeys * p.v_cache.row_elements));
  }
  if (L.amx) {
    s.k_stage.resize(size_t(kTileKeys * p.k_cache.row_elements));
    s.amx_work.resize(size_t(amx::pv_scratch_elements(dv)));
    s.scores.resize(size_t(kTileKeys * kHeadChunk));
    if (s.qb_token != item.token) {  // the split pieces of one token share its packed queries
      const int64_t chunks = L.group / kHeadChunk, packed = amx::packed_query_elements(dk);
      s.qb.resize(size_t(p.n_head_kv * chunks * packed));
      for (int64_t h = 0; h < p.n_head_kv; ++h)
        for (int64_t c = 0; c < chunks; ++c)
          amx::pack_queries(q + (h * L.group + c * kHeadChunk) * dk, dk, dk, p.softmax_scale,
                            &s.qb[size_t((h * chunks + c) * packed)]);
      s.qb_token = item.token;
    }
    amx::configure();
  } else if (L.gemm) {
    // qt[h, d, g] = scale * q[h * group + g, d]; zero for the padding heads
    const int64_t gp = L.group_padded;
    s.qt.assign(size_t(p.n_head_kv * dk * gp), 0.0f);
    for (int64_t h = 0; h < p.n_head_kv; ++h)
      for (int64_t g = 0; g < L.group; ++g) {
        const float* qg = q + (h * L.group + g) * dk;
        float* dst = &s.qt[size_t(h * dk * gp + g)];
        for (int64_t d = 0; d < dk; ++d) dst[d * gp] = p.softmax_scale * qg[d];
      }
    s.scores.resize(size_t(kTileKeys * kHeadChunk));
  } else {
    s.scores.resize(size_t(kTileKeys * L.n_state));
  }
  for (int64_t first = item.key_begin, n = 0; first < item.key_end; first += n) {
    // AMX: the first tile ends on a multiple of 16 keys, so later 16-key groups can be one block's rows
    n = std::min(L.amx ? kTileKeys - first % 16 : kTileKeys, item.key_end - first);
    if (L.amx) {
      gather_tile_amx(p, L, table, first, n, s);
      gemm_tile_amx(p, L, n, s);
      continue;
    }
    gather_tile(p, L, table, first, n, s);
    s.next_n = s.k_row_bytes > 0 ? std::min(kTileKeys, std::max<int64_t>(0, item.key_end - first - n)) : 0;
    if (s.next_n > 0) {
      f32_row_pointers(p.k_cache, table, p.block_size, first + n, s.next_n, s.next_k);
      if (s.v_row_bytes > 0) f32_row_pointers(p.v_cache, table, p.block_size, first + n, s.next_n, s.next_v);
    }
    if (L.gemm)
      gemm_tile(p, L, n, s);
    else
      rows_tile(p, L, q, n, s);
  }
  if (L.amx) amx::release();
  // state of query head hq -> out / partial
  for (int64_t hq = 0; hq < p.n_head; ++hq) {
    const int64_t st = L.state_of(hq);
    const float* acc = &s.acc[size_t(st * s.acc_stride)];
    if (item.partial < 0) {
      float* out = p.out + (item.token * p.n_head + hq) * dv;
      const float inv = 1.0f / s.sum[size_t(st)];
      for (int64_t d = 0; d < dv; ++d) out[d] = acc[d] * inv;
    } else {
      float* dst = partials + (item.partial * p.n_head + hq) * (dv + 2);
      dst[0] = s.max[size_t(st)];
      dst[1] = s.sum[size_t(st)];
      std::memcpy(dst + 2, acc, size_t(dv) * 4);
    }
  }
}

Layout make_layout(const PagedAttentionParams& p) {
  Layout L{};
  L.group = p.n_head / p.n_head_kv;
  L.group_padded = (L.group + 7) / 8 * 8;
  L.gemm = L.group >= kGemmMinGroup;
  L.avx512 = p.allow_avx512 && cpu_has_avx512();
  L.n_state = L.gemm ? p.n_head_kv * L.group_padded : (p.n_head + 7) / 8 * 8;
  L.v_shares_k = p.v_cache.data == p.k_cache.data && p.v_cache.row_bytes == p.k_cache.row_bytes &&
                 p.n_head_kv == 1 && p.head_dim_v <= p.head_dim_qk;
  L.amx = p.allow_amx && L.gemm && L.avx512 && p.k_cache.dtype == DType::BF16 &&
          (L.v_shares_k || p.v_cache.dtype == DType::BF16) && amx::shape_fits(L.group, p.head_dim_qk, p.head_dim_v) &&
          amx::available();
  return L;
}

}  // namespace

bool paged_attention_uses_amx(const PagedAttentionParams& p) { return make_layout(p).amx; }

void paged_attention(const PagedAttentionParams& p, ThreadPool& pool) {
  assert(p.n_head % p.n_head_kv == 0);
  assert(p.k_cache.dtype == DType::F32 || p.k_cache.block_size_tokens == p.block_size);
  assert(p.v_cache.dtype == DType::F32 || p.v_cache.block_size_tokens == p.block_size);
  const Layout L = make_layout(p);
  const int64_t n_tokens = p.query_start_loc[p.n_seqs];
  if (n_tokens == 0) return;

  // Each token's visible keys [begin, end), and how many pieces they are cut into.
  struct TokenKeys {
    int64_t seq, begin, end;
  };
  std::vector<TokenKeys> keys(static_cast<size_t>(n_tokens));
  int64_t total_keys = 0;
  for (int64_t s = 0; s < p.n_seqs; ++s) {
    const int64_t begin = p.query_start_loc[s], end = p.query_start_loc[s + 1];
    const int64_t first_pos = p.seq_lens[s] - (end - begin);  // earlier tokens are cached context
    assert(first_pos >= 0);
    for (int64_t t = begin; t < end; ++t) {
      const int64_t pos = first_pos + (t - begin);  // causal: keys up to pos
      const int64_t key_begin = p.sliding_window > 0 ? std::max<int64_t>(0, pos - p.sliding_window + 1) : 0;
      keys[size_t(t)] = {s, key_begin, pos + 1};
      total_keys += pos + 1 - key_begin;
    }
  }
  const int64_t n_threads = pool.n_threads();
  const int64_t split_keys = std::max(kMinSplitKeys, total_keys / (kItemsPerThread * n_threads));
  std::vector<WorkItem> items;
  std::vector<int64_t> token_partials(static_cast<size_t>(n_tokens) + 1, 0);  // first partial slot of each token
  int64_t n_partials = 0;
  for (int64_t t = 0; t < n_tokens; ++t) {
    const auto [seq, begin, end] = keys[size_t(t)];
    const int64_t len = end - begin;
    const int64_t pieces = n_threads > 1 ? std::max<int64_t>(1, (len + split_keys / 2) / split_keys) : 1;
    token_partials[size_t(t)] = n_partials;
    for (int64_t i = 0; i < pieces; ++i)
      items.push_back({t, seq, begin + len * i / pieces, begin + len * (i + 1) / pieces, pieces > 1 ? n_partials + i : -1});
    if (pieces > 1) n_partials += pieces;
  }
  token_partials[size_t(n_tokens)] = n_partials;
  std::stable_sort(items.begin(), items.end(), [](const WorkItem& a, const WorkItem& b) {
    return a.key_end - a.key_begin > b.key_end - b.key_begin;  // largest first
  });

  const int64_t dv = p.head_dim_v;
  std::vector<float> partials(static_cast<size_t>(n_partials * p.n_head * (dv + 2)));  // [partial, n_head, 2 + dv]
  std::atomic<int64_t> next{0};
  pool.parallel_for(0, std::min<int64_t>(n_threads, int64_t(items.size())), [&](int64_t, int64_t) {
    Scratch scratch;
    for (int64_t i = next.fetch_add(1); i < int64_t(items.size()); i = next.fetch_add(1))
      run_item(p, L, items[size_t(i)], partials.data(), scratch);
  });
  if (n_partials == 0) return;

  // Merge the pieces of each split token: out = Σ_i e^{m_i - M} acc_i / Σ_i e^{m_i - M} l_i.
  pool.parallel_for(0, n_tokens * p.n_head, [&](int64_t begin, int64_t end) {
    for (int64_t th = begin; th < end; ++th) {
      const int64_t t = th / p.n_head, hq = th % p.n_head;
      const int64_t first = token_partials[size_t(t)], last = token_partials[size_t(t) + 1];
      if (first == last) continue;  // written directly
      float m = -std::numeric_limits<float>::infinity();
      for (int64_t i = first; i < last; ++i) m = std::max(m, partials[size_t((i * p.n_head + hq) * (dv + 2))]);
      float* out = p.out + th * dv;
      std::fill(out, out + dv, 0.0f);
      float l = 0.0f;
      for (int64_t i = first; i < last; ++i) {
        const float* part = &partials[size_t((i * p.n_head + hq) * (dv + 2))];
        const float w = std::exp(part[0] - m);
        l += w * part[1];
        for (int64_t d = 0; d < dv; ++d) out[d] += w * part[2 + d];
      }
      const float inv = 1.0f / l;
      for (int64_t d = 0; d < dv; ++d) out[d] *= inv;
    }
  });
}

void write_kv(const WriteKvParams& p) {
  for (int64_t t = 0; t < p.n_tokens; ++t) {
    const int64_t slot = p.slot_mapping[t];
    if (slot < 0) continue;
    std::memcpy(p.k_cache + slot * p.k_row_elements, p.k + t * p.k_token_stride, size_t(p.k_row_elements) * 4);
    std::memcpy(p.v_cache + slot * p.v_row_elements, p.v + t * p.v_token_stride, size_t(p.v_row_elements) * 4);
  }
}

}  // namespace latentserve::cpu
