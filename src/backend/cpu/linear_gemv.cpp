// Decode-path GEMV: y[n_tokens, out] = x[n_tokens, in] · W[out, in]ᵀ + bias.
//
// Memory-bound at batch 1: every weight byte is read once per call, so the kernel's job
// is to keep the loads streaming. A tile of weight rows is read together (several
// independent streams and accumulator chains) and dotted with several activation rows
// per pass; for more tokens than a pass takes the same rows are re-read from L1/L2, not
// from memory. AVX-512: up to 4 tokens, tiles of 4 rows; 5 and more tokens (compute-bound
// at batch 8), tiles of 2 rows x up to 8 tokens, so each weight is widened once for 8
// tokens, and the 16 accumulators are summed by one transposing reduction. AVX2: 4 rows
// x 2 tokens. Weights are widened to f32 in registers (bf16: a 16-bit shift; f16:
// vcvtph2ps) and multiplied in f32: activations are never rounded.
//
// Two things decide whether this runs near the memory roof (docs/cpu-kernels.md):
//  - aligned weight loads: a checkpoint's tensors are often only 8-byte aligned, and
//    64-byte loads that straddle cache lines cost a third of the bandwidth. Each row
//    is therefore cut into a short head block up to the first aligned address, then
//    aligned blocks (the activations are packed with the same block boundaries);
//  - software prefetch of the next row tile: the hardware prefetchers stop at 4 KiB
//    page boundaries, and a 2048-wide bf16 row is exactly one page.
#include "backend/cpu/linear_gemv.h"

#include <immintrin.h>

#include <algorithm>
#include <cassert>
#include <cstring>
#include <vector>

#include "backend/cpu/cpu_features.h"
#include "core/bf16.h"
#include "core/f16.h"

namespace latentserve::cpu {
namespace {

constexpr int64_t kRowBlock = 16;               // rows per unit of work handed to a thread
constexpr int64_t kMinBytesPerChunk = 1 << 16;  // smaller problems are not split across threads

// How a row of `in` weights is cut into blocks of `block` elements: an optional head
// of `head` (< block) elements that ends at the first aligned address, then whole
// blocks, then a partial tail. Every block, head and tail included, occupies `block`
// floats of the packed activations.
struct BlockLayout {
  int64_t in, block, head;
  int64_t packed_length() const { return (head > 0 ? block : 0) + (in - head + block - 1) / block * block; }
};

// head such that W[r, head] is `align_bytes`-aligned for every row r, or 0 when the
// row stride does not keep the rows in the same phase.
int64_t aligned_head(const LinearProblem& p, int64_t block, int64_t align_bytes) {
  const int64_t elem = int64_t(dtype_size_bytes(p.weight_dtype));
  const auto addr = int64_t(reinterpret_cast<uintptr_t>(p.weight));
  if (p.out_features > 1 && (p.weight_row_stride * elem) % align_bytes != 0) return 0;
  if (addr % elem != 0) return 0;
  const int64_t head = (align_bytes - addr % align_bytes) % align_bytes / elem;
  return head < block && head < p.in_features ? head : 0;
}

// The kernels read activations block by block as laid out above, zero-padded. For
// bf16 weights each block is stored evens first, then odds: a bf16 block loaded as
// 32-bit lanes gives the even elements by a left shift of 16 bits and the odd ones by
// masking the high half, with no shuffle.
// x: [n_tokens, in] -> xp: [n_tokens, ldx]
void pack_activations(const float* x, int64_t n_tokens, const BlockLayout& layout, bool even_odd, float* xp,
                      int64_t ldx) {
  const int64_t half = layout.block / 2;
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* src = x + t * layout.in;
    float* dst = xp + t * ldx;
    int64_t k0 = 0;
    for (int64_t packed = 0; k0 < layout.in; packed += layout.block) {
      const int64_t n = std::min(k0 == 0 && layout.head > 0 ? layout.head : layout.block, layout.in - k0);
      if (n == layout.block && !even_odd) {
        std::memcpy(dst + packed, src + k0, size_t(n) * sizeof(float));
      } else if (n == layout.block) {  // 16 at a time: 8 evens to dst[g / 2 ..), 8 odds to dst[half + g / 2 ..)
        for (int64_t g = 0; g < n; g += 16) {
          const __m256 a = _mm256_loadu_ps(src + k0 + g), b = _mm256_loadu_ps(src + k0 + g + 8);
          const __m256 evens = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0x88)), 0xd8));
          const __m256 odds = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0xdd)), 0xd8));
          _mm256_storeu_ps(dst + packed + g / 2, evens);
          _mm256_storeu_ps(dst + packed + half + g / 2, odds);
        }
      } else {  // a head or tail block, zero-padded
        std::fill(dst + packed, dst + packed + layout.block, 0.0f);
        for (int64_t j = 0; j < n; ++j) dst[packed + (even_odd ? (j % 2) * half + j / 2 : j)] = src[k0 + j];
      }
      k0 += n;
    }
  }
}

// y[t0 + t, row + r] = partial[t * n_rows + r] + bias[row + r]
void store_tile(const LinearProblem& p, int64_t row, int n_rows, int64_t t0, int n_tok, const float* partial) {
  for (int t = 0; t < n_tok; ++t)
    for (int r = 0; r < n_rows; ++r)
      p.y[(t0 + t) * p.out_features + row + r] = partial[t * n_rows + r] + (p.bias ? p.bias[row + r] : 0.0f);
}

// ---------------------------------------------------------------------------------
// AVX-512: blocks of 32 weights, tails by masked loads.
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl")
// GCC 12 warns that the "undefined" vectors inside its AVX-512 intrinsics are
// uninitialised (a false positive, GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

struct Avx512 {
  static constexpr int64_t kBlock = 32;
  static constexpr int64_t kAlignBytes = 64;
  // Up to kNarrowTokens tokens: 4 rows per tile (memory-bound, 4 streams). More tokens:
  // 2 rows x up to 8 tokens per pass, so each weight is widened once for 8 tokens;
  // 16 accumulators + 4 widened weights + 2 activation vectors fit the 32 zmm.
  static constexpr int kTileRows = 4;
  static constexpr int kNarrowTokens = 4;
  static constexpr int kWideTileRows = 2;
  static constexpr int kTileTokens = 8;

  static __mmask16 mask16(int64_t n) { return n <= 0 ? 0 : n >= 16 ? 0xffff : __mmask16((1u << n) - 1); }

  // Weights [k, k + 32) of one row as two f32 vectors in packed-activation order; with
  // n < 32 only n are read and the rest are zero.
  static inline __attribute__((always_inline)) void load(const float* w, int64_t n, __m512& a, __m512& b) {
    if (n >= kBlock) {
      a = _mm512_loadu_ps(w);
      b = _mm512_loadu_ps(w + 16);
    } else {
      a = _mm512_maskz_loadu_ps(mask16(n), w);
      b = _mm512_maskz_loadu_ps(mask16(n - 16), w + 16);
    }
  }
  static inline __attribute__((always_inline)) void load(const bf16* w, int64_t n, __m512& a, __m512& b) {
    const __m512i v = n >= kBlock ? _mm512_loadu_si512(w)
                                  : _mm512_maskz_loadu_epi16(n >= 32 ? ~0u : __mmask32((1u << n) - 1), w);
    a = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));                                  // even elements
    b = _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32(int(0xffff0000u))));  // odd elements
  }
  static inline __attribute__((always_inline)) void load(const f16* w, int64_t n, __m512& a, __m512& b) {
    const __m256i lo = n >= kBlock ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w))
                                   : _mm256_maskz_loadu_epi16(mask16(n), w);
    const __m256i hi = n >= kBlock ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 16))
                                   : _mm256_maskz_loadu_epi16(mask16(n - 16), w + 16);
    a = _mm512_cvtph_ps(lo);
    b = _mm512_cvtph_ps(hi);
  }

  // acc[t][r] += W[r, k : k + n] · x[t, block at xk]; prefetches the same columns of
  // the next row tile. The R rows are widened first, then each token's two activation
  // vectors are loaded once and used for all R rows.
  template <int R, int T, typename W>
  static inline __attribute__((always_inline)) void accumulate(const W* w, int64_t ldw, int64_t k, int64_t n,
                                                               const float* xp, int64_t xk, int64_t ldx,
                                                               __m512 (&acc)[T][R]) {
    __m512 wa[R], wb[R];
    for (int r = 0; r < R; ++r) {
      load(w + r * ldw + k, n, wa[r], wb[r]);
      _mm_prefetch(reinterpret_cast<const char*>(w + (r + R) * ldw + k), _MM_HINT_T0);
    }
    for (int t = 0; t < T; ++t) {
      const __m512 xa = _mm512_load_ps(xp + t * ldx + xk);
      const __m512 xb = _mm512_load_ps(xp + t * ldx + xk + 16);
      for (int r = 0; r < R; ++r) {
        acc[t][r] = _mm512_fmadd_ps(wa[r], xa, acc[t][r]);
        acc[t][r] = _mm512_fmadd_ps(wb[r], xb, acc[t][r]);
      }
    }
  }

  // out[i] = sum of the lanes of v[i], i < 16, in 45 shuffles and adds (16 horizontal
  // reductions would take 128). Each level halves the vectors and the partial sums per
  // accumulator; the last level leaves v[s]'s sum in lane 4 * (s % 4) + s / 4, so the
  // inputs go in transposed (slot 4i + j takes v[4j + i]).
  static inline __attribute__((always_inline)) __m512 reduce16(const __m512 (&v)[16]) {
    __m512 a[8], b[4], c[2];
    for (int i = 0; i < 8; ++i) {  // 256-bit halves: [v.lo, u.lo] + [v.hi, u.hi]
      const __m512 p = v[(2 * i) % 4 * 4 + (2 * i) / 4], q = v[(2 * i + 1) % 4 * 4 + (2 * i + 1) / 4];
      a[i] = _mm512_add_ps(_mm512_shuffle_f32x4(p, q, 0x44), _mm512_shuffle_f32x4(p, q, 0xee));
    }
    for (int i = 0; i < 4; ++i)  // 128-bit quarters
      b[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0x88),
                           _mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0xdd));
    for (int i = 0; i < 2; ++i)  // pairs within quarters
      c[i] = _mm512_add_ps(_mm512_shuffle_ps(b[2 * i], b[2 * i + 1], 0x88),
                           _mm512_shuffle_ps(b[2 * i], b[2 * i + 1], 0xdd));
    return _mm512_add_ps(_mm512_shuffle_ps(c[0], c[1], 0x88), _mm512_shuffle_ps(c[0], c[1], 0xdd));
  }

  // partial[t * R + r] = W[r, :] · x[t, :] for R weight rows and T tokens.
  template <int R, int T, typename W>
  static void dot_tile(const W* w, int64_t ldw, const BlockLayout& layout, const float* xp, int64_t ldx,
                       float* partial) {
    static_assert(R * T <= 16, "one reduce16 per tile");
    __m512 acc[T][R];
    for (int t = 0; t < T; ++t)
      for (int r = 0; r < R; ++r) acc[t][r] = _mm512_setzero_ps();
    int64_t k = 0, xk = 0;
    if (layout.head > 0) {
      accumulate<R, T>(w, ldw, 0, layout.head, xp, 0, ldx, acc);
      k = layout.head;
      xk = kBlock;
    }
    for (; k + kBlock <= layout.in; k += kBlock, xk += kBlock) accumulate<R, T>(w, ldw, k, kBlock, xp, xk, ldx, acc);
    if (k < layout.in) accumulate<R, T>(w, ldw, k, layout.in - k, xp, xk, ldx, acc);
    if constexpr (R * T < 8) {  // few accumulators (batch 1): horizontal sums are cheaper
      for (int t = 0; t < T; ++t)
        for (int r = 0; r < R; ++r) partial[t * R + r] = _mm512_reduce_add_ps(acc[t][r]);
    } else {
      __m512 all[16];
      for (int i = 0; i < 16; ++i) all[i] = i < R * T ? acc[i / R][i % R] : _mm512_setzero_ps();
      alignas(64) float sums[16];
      _mm512_store_ps(sums, reduce16(all));
      for (int i = 0; i < R * T; ++i) partial[i] = sums[i];
    }
  }
};

#pragma GCC diagnostic pop
#pragma GCC pop_options

// ---------------------------------------------------------------------------------
// AVX2 (the x86-64-v3 baseline): blocks of 16 weights, the tail copied to a
// zero-padded block.
struct Avx2 {
  static constexpr int64_t kBlock = 16;
  static constexpr int64_t kAlignBytes = 32;
  static constexpr int kTileRows = 4;
  static constexpr int kNarrowTokens = 2;
  static constexpr int kWideTileRows = 4;
  static constexpr int kTileTokens = 2;

  static inline void load_full(const float* w, __m256& a, __m256& b) {
    a = _mm256_loadu_ps(w);
    b = _mm256_loadu_ps(w + 8);
  }
  static inline void load_full(const bf16* w, __m256& a, __m256& b) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w));
    a = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));                                  // even elements
    b = _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32(int(0xffff0000u))));  // odd elements
  }
  static inline void load_full(const f16* w, __m256& a, __m256& b) {
    a = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w)));
    b = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 8)));
  }
  template <typename W>
  static inline void load(const W* w, int64_t n, __m256& a, __m256& b) {
    if (n >= kBlock) return load_full(w, a, b);
    W tail[kBlock] = {};
    std::memcpy(tail, w, size_t(n) * sizeof(W));
    load_full(tail, a, b);
  }

  static inline float reduce(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }

  template <int R, int T, typename W>
  static inline void accumulate(const W* w, int64_t ldw, int64_t k, int64_t n, const float* xp, int64_t xk,
                                int64_t ldx, __m256 (&acc)[T][R]) {
    for (int r = 0; r < R; ++r) {
      __m256 wa, wb;
      load(w + r * ldw + k, n, wa, wb);
      _mm_prefetch(reinterpret_cast<const char*>(w + (r + R) * ldw + k), _MM_HINT_T0);
      for (int t = 0; t < T; ++t) {
        acc[t][r] = _mm256_fmadd_ps(wa, _mm256_load_ps(xp + t * ldx + xk), acc[t][r]);
        acc[t][r] = _mm256_fmadd_ps(wb, _mm256_load_ps(xp + t * ldx + xk + 8), acc[t][r]);
      }
    }
  }

  template <int R, int T, typename W>
  static void dot_tile(const W* w, int64_t ldw, const BlockLayout& layout, const float* xp, int64_t ldx,
                       float* partial) {
    __m256 acc[T][R];
    for (int t = 0; t < T; ++t)
      for (int r = 0; r < R; ++r) acc[t][r] = _mm256_setzero_ps();
    int64_t k = 0, xk = 0;
    if (layout.head > 0) {
      accumulate<R, T>(w, ldw, 0, layout.head, xp, 0, ldx, acc);
      k = layout.head;
      xk = kBlock;
    }
    for (; k + kBlock <= layout.in; k += kBlock, xk += kBlock) accumulate<R, T>(w, ldw, k, kBlock, xp, xk, ldx, acc);
    if (k < layout.in) accumulate<R, T>(w, ldw, k, layout.in - k, xp, xk, ldx, acc);
    for (int t = 0; t < T; ++t)
      for (int r = 0; r < R; ++r) partial[t * R + r] = reduce(acc[t][r]);
  }
};

// ---------------------------------------------------------------------------------
// The activations as the kernels read them.
struct PackedActivations {
  const float* data;  // [n_tokens, ldx], 64-byte aligned rows
  int64_t ldx;
  BlockLayout layout;
};

// Rows [row, row + R) against every token, kMaxT tokens per pass: kTileTokens, or
// kNarrowTokens for tiles wider than kWideTileRows rows.
template <typename Isa, int R, typename W>
void row_tile(const LinearProblem& p, const W* w, const PackedActivations& x, int64_t row) {
  constexpr int kMaxT = R > Isa::kWideTileRows ? Isa::kNarrowTokens : Isa::kTileTokens;
  const W* w_rows = w + row * p.weight_row_stride;
  const int64_t ldw = p.weight_row_stride;
  float partial[kMaxT * R];
  for (int64_t t0 = 0; t0 < p.n_tokens; t0 += kMaxT) {
    const int n_tok = int(std::min<int64_t>(kMaxT, p.n_tokens - t0));
    const float* x_tok = x.data + t0 * x.ldx;
    auto dot = [&]<int T>() {
      if constexpr (T <= kMaxT) Isa::template dot_tile<R, T>(w_rows, ldw, x.layout, x_tok, x.ldx, partial);
    };
    static_assert(Isa::kTileTokens <= 8);
    switch (n_tok) {
      case 1: dot.template operator()<1>(); break;
      case 2: dot.template operator()<2>(); break;
      case 3: dot.template operator()<3>(); break;
      case 4: dot.template operator()<4>(); break;
      case 5: dot.template operator()<5>(); break;
      case 6: dot.template operator()<6>(); break;
      case 7: dot.template operator()<7>(); break;
      default: dot.template operator()<8>(); break;
    }
    store_tile(p, row, R, t0, n_tok, partial);
  }
}

// Up to kNarrowTokens tokens the GEMV is memory-bound and reads kTileRows rows at a
// time; with more it is compute-bound and reads kWideTileRows rows, each widened once
// for kTileTokens tokens.
template <typename Isa, typename W>
void gemv_rows(const LinearProblem& p, const PackedActivations& x, int64_t row_begin, int64_t row_end) {
  const W* w = static_cast<const W*>(p.weight);
  int64_t row = row_begin;
  if (p.n_tokens <= Isa::kNarrowTokens) {
    for (; row + Isa::kTileRows <= row_end; row += Isa::kTileRows) row_tile<Isa, Isa::kTileRows>(p, w, x, row);
  } else {
    for (; row + Isa::kWideTileRows <= row_end; row += Isa::kWideTileRows)
      row_tile<Isa, Isa::kWideTileRows>(p, w, x, row);
  }
  for (; row < row_end; ++row) row_tile<Isa, 1>(p, w, x, row);
}

template <typename Isa>
void gemv_rows(const LinearProblem& p, const PackedActivations& x, int64_t row_begin, int64_t row_end) {
  switch (p.weight_dtype) {
    case DType::F32: return gemv_rows<Isa, float>(p, x, row_begin, row_end);
    case DType::BF16: return gemv_rows<Isa, bf16>(p, x, row_begin, row_end);
    case DType::F16: return gemv_rows<Isa, f16>(p, x, row_begin, row_end);
    default: assert(false && "linear() validates the weight dtype");
  }
}

template <typename Isa>
void gemv_isa(const LinearProblem& p, ThreadPool& pool) {
  const BlockLayout layout{p.in_features, Isa::kBlock, aligned_head(p, Isa::kBlock, Isa::kAlignBytes)};
  // An odd number of 64-byte lines per token row: rows 4 KiB apart (in = 1024 with aligned
  // weights) would put a block's activations for all tokens in one L1 set.
  const int64_t ldx = layout.packed_length() + (layout.packed_length() / 16 % 2 == 0 ? 16 : 0);
  thread_local std::vector<float> packed;  // the caller's; the workers get its address
  packed.resize(size_t(p.n_tokens * ldx + 16));
  float* xp = packed.data() + (16 - reinterpret_cast<uintptr_t>(packed.data()) / 4 % 16) % 16;  // 64-byte aligned
  // [n_tokens, in] -> [n_tokens, ldx]
  pack_activations(p.x, p.n_tokens, layout, p.weight_dtype == DType::BF16, xp, ldx);
  const PackedActivations x{xp, ldx, layout};

  const int64_t n_blocks = (p.out_features + kRowBlock - 1) / kRowBlock;
  const int64_t block_bytes = kRowBlock * std::max<int64_t>(1, p.in_features) *
                              int64_t(dtype_size_bytes(p.weight_dtype)) * std::max<int64_t>(1, p.n_tokens);
  const int64_t min_chunk = std::max<int64_t>(1, kMinBytesPerChunk / block_bytes);
  pool.parallel_for(
      0, n_blocks,
      [&](int64_t b0, int64_t b1) {
        gemv_rows<Isa>(p, x, b0 * kRowBlock, std::min(p.out_features, b1 * kRowBlock));
      },
      min_chunk);
}

}  // namespace

void gemv(const LinearProblem& p, ThreadPool& pool, bool allow_avx512) {
  if (allow_avx512 && cpu_has_avx512())
    gemv_isa<Avx512>(p, pool);
  else
    gemv_isa<Avx2>(p, pool);
}

void convert_rows_to_f32(const void* src, DType dtype, int64_t src_row_stride, int64_t n_rows, int64_t n_cols,
                         float* dst) {
  for (int64_t r = 0; r < n_rows; ++r) {
    float* out = dst + r * n_cols;
    int64_t c = 0;
    if (dtype == DType::F32) {
      std::memcpy(out, static_cast<const float*>(src) + r * src_row_stride, size_t(n_cols) * sizeof(float));
    } else if (dtype == DType::BF16) {
      const uint16_t* in = static_cast<const uint16_t*>(src) + r * src_row_stride;
      for (; c + 8 <= n_cols; c += 8) {
        const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + c)));
        _mm256_storeu_ps(out + c, _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)));
      }
      for (; c < n_cols; ++c) out[c] = bf16::from_bits(in[c]).to_f32();
    } else {
      assert(dtype == DType::F16);
      const uint16_t* in = static_cast<const uint16_t*>(src) + r * src_row_stride;
      for (; c + 8 <= n_cols; c += 8)
        _mm256_storeu_ps(out + c, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + c))));
      for (; c < n_cols; ++c) out[c] = f16_bits_to_f32(in[c]);
    }
  }
}

}  // namespace latentserve::cpu
