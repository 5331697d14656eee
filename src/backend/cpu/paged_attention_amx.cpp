#include "backend/cpu/paged_attention_amx.h"

#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "backend/cpu/cpu_features.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512bf16,amx-tile,amx-bf16")
// GCC 12 warns that the "undefined" vectors inside its AVX-512 intrinsics are uninitialised
// (a false positive, GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace latentserve::cpu::amx {

namespace {

// The tile instructions, each with a "memory" clobber: GCC's own tile-load intrinsic has none,
// so stores of the packed operands could otherwise be moved past the loads that read them.
#define LS_TILE_LOAD(t, base, stride_bytes) \
  asm volatile("tileloadd (%0,%1,1), %%tmm" #t ::"r"(base), "r"(int64_t(stride_bytes)) : "memory")
#define LS_TILE_STORE(t, base, stride_bytes) \
  asm volatile("tilestored %%tmm" #t ", (%0,%1,1)" ::"r"(base), "r"(int64_t(stride_bytes)) : "memory")
#define LS_TILE_ZERO(t) asm volatile("tilezero %%tmm" #t ::)
#define LS_TILE_DP(c, a, b) asm volatile("tdpbf16ps %%tmm" #b ", %%tmm" #a ", %%tmm" #c ::)  // c += a · b

struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

inline __m512 bf16_to_f32(__m256i b) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16)); }
inline __m256i to_bf16(__m512 x) { return (__m256i)_mm512_cvtneps_pbh(x); }  // round to nearest even

// x = hi + mid + lo exactly (each residual is exact in f32 and has 16 fewer significant bits).
inline void split3(__m512 x, __m256i& hi, __m256i& mid, __m256i& lo) {
  hi = to_bf16(x);
  const __m512 r1 = _mm512_sub_ps(x, bf16_to_f32(hi));
  mid = to_bf16(r1);
  lo = to_bf16(_mm512_sub_ps(r1, bf16_to_f32(mid)));
}

}  // namespace

bool available() {
  static const bool ok = [] {
    if (const char* e = std::getenv("LATENTSERVE_CPU_AMX"); e && std::string_view(e) == "0") return false;
    if (!cpu_has_avx512() || !__builtin_cpu_supports("avx512bf16")) return false;
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return false;  // OSXSAVE: xgetbv usable
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 22)) || !(d & (1u << 24))) return false;  // AMX-BF16, -TILE
    unsigned lo, hi;
    asm volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & (3u << 17)) != (3u << 17)) return false;  // XTILECFG and XTILEDATA enabled by the OS
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return ok;
}

void configure() {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.rows[t] = 16;
    cfg.colsb[t] = 64;
  }
  asm volatile("ldtilecfg %0" ::"m"(cfg) : "memory");
}

void release() { asm volatile("tilerelease" ::: "memory"); }

void pack_queries(const float* q, int64_t head_stride, int64_t dk, float scale, uint16_t* qb) {
  const int64_t steps = dk / kDepth, term = steps * 16 * 32;
  const __m512 sc = _mm512_set1_ps(scale);
  for (int64_t g = 0; g < kHeads; ++g)
    for (int64_t d = 0; d < dk; d += 16) {
      __m256i t[3];
      split3(_mm512_mul_ps(sc, _mm512_loadu_ps(q + g * head_stride + d)), t[0], t[1], t[2]);
      // dims d .. d + 15 are pairs (rows) r0 .. r0 + 7 of step s; head g's pair is dword g of a row
      const int64_t s = d / kDepth, r0 = (d % kDepth) / 2;
      for (int i = 0; i < 3; ++i) {
        alignas(32) uint32_t pairs[8];
        _mm256_store_si256(reinterpret_cast<__m256i*>(pairs), t[i]);
        for (int k = 0; k < 8; ++k) std::memcpy(qb + i * term + ((s * 16 + r0 + k) * 32 + 2 * g), &pairs[k], 4);
      }
    }
}

void scores(const uint16_t* qb, int64_t dk, const uint16_t* const k[3], const int64_t k_stride[3], float* st) {
  const int64_t steps = dk / kDepth, term = steps * 16 * 32;
  LS_TILE_ZERO(0);
  LS_TILE_ZERO(1);
  LS_TILE_ZERO(2);
  for (int64_t s = 0; s < steps; ++s) {
    LS_TILE_LOAD(3, k[0] + kDepth * s, k_stride[0]);
    LS_TILE_LOAD(4, k[1] + kDepth * s, k_stride[1]);
    LS_TILE_LOAD(5, k[2] + kDepth * s, k_stride[2]);
    const uint16_t* b = qb + s * 16 * 32;
    LS_TILE_LOAD(6, b, 64);  // hi
    LS_TILE_DP(0, 3, 6);
    LS_TILE_DP(1, 4, 6);
    LS_TILE_DP(2, 5, 6);
    LS_TILE_LOAD(7, b + term, 64);  // mid
    LS_TILE_DP(0, 3, 7);
    LS_TILE_DP(1, 4, 7);
    LS_TILE_DP(2, 5, 7);
    LS_TILE_LOAD(6, b + 2 * term, 64);  // lo
    LS_TILE_DP(0, 3, 6);
    LS_TILE_DP(1, 4, 6);
    LS_TILE_DP(2, 5, 6);
  }
  LS_TILE_STORE(0, st, 64);
  LS_TILE_STORE(1, st + 16 * 16, 64);
  LS_TILE_STORE(2, st + 32 * 16, 64);
}

void accumulate_pv(const float* p, int64_t n, const uint16_t* const* v, int64_t dv, float* acc, int64_t acc_stride,
                   uint16_t* scratch) {
  uint16_t* pb = scratch + 2 * 32 * 32;  // [3 terms, 16 heads, 64 keys] after the B tile buffers
  const int64_t key_steps = n > 32 ? 2 : 1;  // 32 keys per TDPBF16PS
  // The weights' three terms, keys along the rows; keys >= n are zero.
  alignas(64) int32_t key_index[16];
  for (int i = 0; i < 16; ++i) key_index[i] = i * int32_t(kHeads);
  const __m512i gather_index = _mm512_load_si512(key_index);
  for (int64_t g = 0; g < kHeads; ++g)
    for (int64_t b = 0; b < 2 * key_steps; ++b) {
      const int64_t live = std::max<int64_t>(0, std::min<int64_t>(16, n - 16 * b));
      const __mmask16 mask = __mmask16((1u << live) - 1);
      const __m512 x = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), mask, gather_index, p + 16 * b * kHeads + g, 4);
      __m256i t[3];
      split3(x, t[0], t[1], t[2]);
      for (int i = 0; i < 3; ++i)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(pb + (i * kHeads + g) * 64 + 16 * b), t[i]);
    }
  // Per 16 columns, V pair-interleaved into two B tiles (keys 0..31, 32..63) in a 2 KiB buffer
  // that stays in L1: bt[r, 2 i + e] = v[2 r + e][c + i]; keys >= n are zero.
  alignas(64) uint16_t interleave[32];
  for (int i = 0; i < 16; ++i) {
    interleave[2 * i] = uint16_t(i);
    interleave[2 * i + 1] = uint16_t(32 + i);
  }
  const __m512i pair_index = _mm512_load_si512(interleave);
  LS_TILE_LOAD(0, pb, 128);  // keys 0..31: hi, mid, lo
  LS_TILE_LOAD(1, pb + kHeads * 64, 128);
  LS_TILE_LOAD(2, pb + 2 * kHeads * 64, 128);
  if (key_steps == 2) {  // keys 32..63
    LS_TILE_LOAD(3, pb + 32, 128);
    LS_TILE_LOAD(4, pb + kHeads * 64 + 32, 128);
    LS_TILE_LOAD(5, pb + 2 * kHeads * 64 + 32, 128);
  }
  uint16_t* bt = scratch;  // [2 buffers, 32 key pairs, 32]: columns c + 16 are laid out while c's tiles run
  const int64_t pairs = 16 * key_steps, acc_bytes = acc_stride * 4;
  auto lay_out = [&](int64_t c, uint16_t* b) {
    for (int64_t r = 0; r < pairs; ++r) {
      __m512i row = _mm512_setzero_si512();
      if (2 * r < n) {
        const __m512i x = _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(v[2 * r] + c)));
        const __m512i y = 2 * r + 1 < n
                              ? _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(v[2 * r + 1] + c)))
                              : _mm512_setzero_si512();
        row = _mm512_permutex2var_epi16(x, pair_index, y);
      }
      _mm512_storeu_si512(b + r * 32, row);
    }
  };
  lay_out(0, bt);
  for (int64_t c = 0, buffer = 0; c < dv; c += 16, buffer ^= 1) {
    uint16_t* b = bt + buffer * 32 * 32;
    if (c + 16 < dv) lay_out(c + 16, bt + (buffer ^ 1) * 32 * 32);
    float* a = acc + c;
    LS_TILE_LOAD(6, a, acc_bytes);
    LS_TILE_LOAD(7, b, 64);
    LS_TILE_DP(6, 0, 7);
    LS_TILE_DP(6, 1, 7);
    LS_TILE_DP(6, 2, 7);
    if (key_steps == 2) {
      LS_TILE_LOAD(7, b + 16 * 32, 64);
      LS_TILE_DP(6, 3, 7);
      LS_TILE_DP(6, 4, 7);
      LS_TILE_DP(6, 5, 7);
    }
    LS_TILE_STORE(6, a, acc_bytes);
  }
}

}  // namespace latentserve::cpu::amx

#pragma GCC diagnostic pop
#pragma GCC pop_options
