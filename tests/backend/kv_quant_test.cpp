// The quantised KV cache (CpuKvCache with BF16 / FP8 rows): what is written reads back within
// the element format's error (reference::kv_store_error_bound: 2^-4 relative for e4m3 normals,
// 2^-8 for bf16), never NaN from finite input (huge values and ±inf saturate), per-block
// scales grow and re-scale earlier rows without saturating, and the MLA latent row keeps
// k_pe in bf16 when asked.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include "backend/cpu/cpu_kv_cache.h"
#include "backend/reference/kv_quant_reference.h"
#include "core/error.h"
#include "core/fp8.h"

namespace latentserve {
namespace {

using cpu::CpuKvCache;
using cpu::KvCacheOptions;
using cpu::KvRows;
using cpu::KvScaleGranularity;

constexpr KvScaleGranularity kAllScales[] = {KvScaleGranularity::PerTensor, KvScaleGranularity::PerHead,
                                             KvScaleGranularity::PerBlock};

KvCacheOptions fp8(KvScaleGranularity scale) {
  KvCacheOptions o;
  o.dtype = DType::F8_E4M3;
  o.scale = scale;
  return o;
}

// Random rows with a wide dynamic range: normal * 2^u, u uniform in [-lo, hi] per element,
// and a different magnitude per group of `group` elements (as KV heads have).
std::vector<float> wide_rows(std::mt19937& rng, int64_t n_rows, int64_t row, int64_t group, float lo, float hi) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> exponent(-lo, hi);
  std::vector<float> x(static_cast<size_t>(n_rows * row));
  for (int64_t t = 0; t < n_rows; ++t)
    for (int64_t i = 0; i < row; ++i)
      x[size_t(t * row + i)] = normal(rng) * std::exp2(exponent(rng)) * std::exp2(float((i / group) % 3) * 2.0f - 2.0f);
  return x;
}

// Checks every written element against the format's bound; returns the largest relative
// error over elements in e4m3's normal range (|x| >= 2^-6 s), where the bound is u |x|.
struct RoundTrip {
  double max_rel_normal = 0;
  int64_t checked = 0;
};

RoundTrip check_round_trip(const KvRows& rows, const std::vector<float>& x, const std::vector<int64_t>& slots,
                           int64_t row) {
  RoundTrip rt;
  for (size_t t = 0; t < slots.size(); ++t)
    for (int64_t e = 0; e < row; ++e) {
      const double xv = x[t * size_t(row) + size_t(e)];
      const double got = reference::kv_element(rows, slots[t], e);
      float got_f32 = 0;
      cpu::dequantize_row(rows, slots[t], e, 1, &got_f32);
      EXPECT_FALSE(std::isnan(got)) << "slot " << slots[t] << " element " << e << " x " << xv;
      EXPECT_EQ(double(got_f32), got) << "dequantize_row disagrees with the reference decoder";
      const double err = std::fabs(got - xv), bound = reference::kv_store_error_bound(rows, slots[t], e, xv);
      EXPECT_LE(err, bound) << "slot " << slots[t] << " element " << e << " x " << xv << " read " << got;
      if (rows.dtype == DType::F8_E4M3 && e < rows.fp8_elements) {
        const double s = rows.scale((slots[t] / rows.block_size_tokens), e / rows.scale_group_elements);
        if (std::fabs(xv) >= 0x1p-6 * s && std::fabs(xv) <= 448 * s)
          rt.max_rel_normal = std::max(rt.max_rel_normal, err / std::fabs(xv));
      } else if (xv != 0) {
        rt.max_rel_normal = std::max(rt.max_rel_normal, err / std::fabs(xv));
      }
      ++rt.checked;
    }
  return rt;
}

// Writes x (rows of a GQA K and V layout) to shuffled slots in chunks of a few tokens per
// write, in position order within each block, as a sequence filling its blocks would.
TEST(KvQuant, E4M3RoundTripOfRandomDataStaysWithinTheFormatError) {
  for (KvScaleGranularity g : kAllScales) {
    SCOPED_TRACE(std::string(cpu::kv_scale_granularity_name(g)));
    std::mt19937 rng(7);
    const int64_t n_kv = 3, dk = 24, dv = 40, bs = 16, n_blocks = 6, n_tokens = 5 * bs + 7;
    CpuKvCache cache(AttentionSpec::standard(6, n_kv, dk, dv), 2, n_blocks, bs, fp8(g));
    std::vector<int32_t> blocks(static_cast<size_t>(n_blocks));
    std::iota(blocks.begin(), blocks.end(), 0);
    std::shuffle(blocks.begin(), blocks.end(), rng);
    std::vector<int64_t> slots;
    for (int64_t p = 0; p < n_tokens; ++p) slots.push_back(int64_t(blocks[size_t(p / bs)]) * bs + p % bs);
    // magnitudes from 2^-10 to 2^6 times N(0,1), and 64x more from the middle on: per-tensor /
    // per-head saturate (the bound allows for it), per-block re-scales the block that straddles
    std::vector<float> k = wide_rows(rng, n_tokens, n_kv * dk, dk, 10, 6);
    std::vector<float> v = wide_rows(rng, n_tokens, n_kv * dv, dv, 10, 6);
    for (int64_t t = n_tokens / 2; t < n_tokens; ++t) {
      for (int64_t i = 0; i < n_kv * dk; ++i) k[size_t(t * n_kv * dk + i)] *= 64.0f;
      for (int64_t i = 0; i < n_kv * dv; ++i) v[size_t(t * n_kv * dv + i)] *= 64.0f;
    }
    for (int64_t begin = 0; begin < n_tokens;) {
      const int64_t n = std::min<int64_t>(n_tokens - begin, 1 + int64_t(rng() % 5));
      cache.write(1, &k[size_t(begin * n_kv * dk)], n_kv * dk, &v[size_t(begin * n_kv * dv)], n_kv * dv,
                  &slots[size_t(begin)], n);
      begin += n;
    }
    const RoundTrip rk = check_round_trip(cache.k_rows(1), k, slots, n_kv * dk);
    const RoundTrip rv = check_round_trip(cache.v_rows(1), v, slots, n_kv * dv);
    EXPECT_LE(rk.max_rel_normal, reference::kE4M3UnitRoundoff);
    EXPECT_LE(rv.max_rel_normal, reference::kE4M3UnitRoundoff);
    EXPECT_GT(rk.max_rel_normal, reference::kE4M3UnitRoundoff / 4) << "suspiciously exact: is this really fp8?";
    if (g == KvScaleGranularity::PerBlock) {
      EXPECT_EQ(cache.stats().saturated_elements, 0);
      EXPECT_GT(cache.stats().rescaled_block_groups, 0) << "growing magnitudes should re-scale some blocks";
    } else {
      EXPECT_GT(cache.stats().saturated_elements, 0) << "values 64x the first chunk's should saturate a static scale";
    }
  }
}

// dequantize_row's e4m3 decoding (through f16, eight at a time) against core/fp8 for every code,
// at the smallest, a middle and the largest scale.
TEST(KvQuant, EveryE4M3CodeDecodesLikeCoreFp8) {
  std::vector<unsigned char> codes(256);
  std::iota(codes.begin(), codes.end(), 0);
  for (float scale : {std::ldexp(1.0f, cpu::kFp8MinScaleExp), 1.0f, std::ldexp(1.0f, cpu::kFp8MaxScaleExp)}) {
    KvRows rows;
    rows.data = codes.data();
    rows.row_bytes = rows.row_elements = rows.fp8_elements = rows.scale_group_elements = 256;
    rows.block_size_tokens = 16;
    rows.dtype = DType::F8_E4M3;
    rows.scales = &scale;
    for (int64_t begin : {0, 5}) {  // 5: the last codes go through the scalar tail
      std::vector<float> out(256);
      cpu::dequantize_row(rows, 0, begin, 256 - begin, out.data());
      for (int c = int(begin); c < 256; ++c) {
        const float want = fp8_e4m3_to_f32(uint8_t(c)) * scale, got = out[size_t(c - begin)];
        if (std::isnan(want)) {
          EXPECT_TRUE(std::isnan(got)) << "code " << c;
        } else {
          EXPECT_EQ(got, want) << "code " << c << " scale " << scale;
        }
      }
    }
  }
}

TEST(KvQuant, Bf16RoundTripAndSaturation) {
  std::mt19937 rng(3);
  const int64_t row = 2 * 16, bs = 16;
  CpuKvCache cache(AttentionSpec::standard(2, 2, 16, 16), 1, 2, bs, KvCacheOptions{DType::BF16});
  std::vector<float> x = wide_rows(rng, bs, row, 16, 20, 20);
  const float big = std::numeric_limits<float>::max();
  x[0] = big;  // rounds past the largest bf16: saturates instead of becoming inf
  x[1] = -big;
  std::vector<int64_t> slots(static_cast<size_t>(bs));
  std::iota(slots.begin(), slots.end(), 0);
  cache.write(0, x.data(), row, x.data(), row, slots.data(), bs);
  const RoundTrip rt = check_round_trip(cache.k_rows(0), x, slots, row);
  EXPECT_LE(rt.max_rel_normal, reference::kBf16UnitRoundoff);
  EXPECT_TRUE(std::isfinite(reference::kv_element(cache.k_rows(0), 0, 0)));
  EXPECT_LT(reference::kv_element(cache.k_rows(0), 0, 1), -3e38);
}

// Huge finite values, ±inf, f32 subnormals and zeros: every granularity reads back finite
// values (NaN only where NaN was written), saturated values at ±448 s with the right sign.
TEST(KvQuant, HugeValuesSaturateAndNeverGiveNaN) {
  const float big = std::numeric_limits<float>::max(), inf = std::numeric_limits<float>::infinity();
  const std::vector<float> specials = {1e30f, -1e38f, big,  -big,    inf,      -inf,  1e-40f, -1e-45f,
                                       0.0f,  -0.0f,  3.0f, -448.0f, 65504.0f, 1e-3f, 7e37f,  -2.5f};
  for (KvScaleGranularity g : kAllScales) {
    SCOPED_TRACE(std::string(cpu::kv_scale_granularity_name(g)));
    const int64_t row = 16, bs = 16;
    CpuKvCache cache(AttentionSpec::standard(1, 1, 16, 16), 1, 2, bs, fp8(g));
    // first a small calibration row (static scales fix here), then the specials, then NaN
    std::vector<float> calib(static_cast<size_t>(row), 0.5f), nan_row(static_cast<size_t>(row), 1.0f);
    nan_row[3] = std::nanf("");
    const int64_t s0 = 0, s1 = 1, s2 = 2;
    cache.write(0, calib.data(), row, calib.data(), row, &s0, 1);
    cache.write(0, specials.data(), row, specials.data(), row, &s1, 1);
    cache.write(0, nan_row.data(), row, nan_row.data(), row, &s2, 1);
    const KvRows k = cache.k_rows(0);
    const double s = k.scale(0, 0);
    for (int64_t e = 0; e < row; ++e) {
      const double got = reference::kv_element(k, s1, e), x = specials[size_t(e)];
      ASSERT_TRUE(std::isfinite(got)) << "element " << e << " (" << x << ") read " << got;
      EXPECT_LE(std::fabs(got), 448 * s);
      if (std::fabs(x) >= 448 * s) {
        EXPECT_EQ(got, std::copysign(448 * s, x)) << "element " << e;
      }
      EXPECT_LE(std::fabs(got - x), reference::kv_store_error_bound(k, s1, e, x)) << "element " << e;
      EXPECT_TRUE(std::isfinite(reference::kv_element(k, s0, e)));
    }
    for (int64_t e = 0; e < row; ++e)
      EXPECT_EQ(std::isnan(reference::kv_element(k, s2, e)), e == 3) << "NaN stays where it was written";
    if (g == KvScaleGranularity::PerBlock) {  // the block grew to hold FLT_MAX; the calibration row was re-scaled
      EXPECT_EQ(s, std::ldexp(1.0, cpu::kFp8MaxScaleExp));
      EXPECT_GT(cache.stats().rescaled_block_groups, 0);
    } else {  // static: fixed by 0.5 * headroom 4 -> 2 / 448 -> 2^-7
      EXPECT_EQ(s, 0x1p-7);
      EXPECT_GT(cache.stats().saturated_elements, 0);
    }
  }
}

// Per-block: a later token larger than the block's range re-scales the earlier rows (no
// saturation), within u |x| + 2^-9 s; a write at offset 0 of a reused block starts afresh.
TEST(KvQuant, PerBlockRescalesEarlierRowsAndResetsAReusedBlock) {
  std::mt19937 rng(11);
  const int64_t row = 32, bs = 16;
  CpuKvCache cache(AttentionSpec::standard(2, 1, 32, 32), 1, 3, bs, fp8(KvScaleGranularity::PerBlock));
  std::vector<float> x = wide_rows(rng, bs, row, row, 3, 0);
  for (int64_t t = 0; t < bs; ++t)  // magnitudes grow by 2^(t/2): about 8 doublings across the block
    for (int64_t i = 0; i < row; ++i) x[size_t(t * row + i)] *= std::exp2(0.5f * float(t));
  std::vector<int64_t> slots;
  for (int64_t t = 0; t < bs; ++t) {
    slots.push_back(bs + t);                                                               // block 1
    cache.write(0, &x[size_t(t * row)], row, &x[size_t(t * row)], row, &slots.back(), 1);  // decode-like
  }
  EXPECT_GE(cache.stats().rescaled_block_groups, 2 * 4) << "K and V each re-scaled several times";
  EXPECT_EQ(cache.stats().saturated_elements, 0);
  const RoundTrip rt = check_round_trip(cache.k_rows(0), x, slots, row);
  EXPECT_LE(rt.max_rel_normal, reference::kE4M3UnitRoundoff);

  // Block 1 reused: small values from offset 0 get a small scale again (not the old large one).
  std::vector<float> small = wide_rows(rng, 2, row, row, 0, 0);
  for (auto& s : small) s *= 1e-3f;
  const int64_t reuse[2] = {bs, bs + 1};
  cache.write(0, small.data(), row, small.data(), row, reuse, 2);
  const double scale = cache.k_rows(0).scale(1, 0);
  EXPECT_LE(scale, 1e-3 * 8 / 448 * 2) << "the scale of the earlier owner was kept";
  check_round_trip(cache.k_rows(0), small, {bs, bs + 1}, row);
}

// MLA latent rows [c_kv | k_pe]: c_kv in fp8 tiles of 128, k_pe in bf16 (default) or fp8 as
// a scale group of its own.
TEST(KvQuant, MlaLatentRowTilesAndBf16Rope) {
  for (bool rope_bf16 : {true, false})
    for (KvScaleGranularity g : kAllScales) {
      SCOPED_TRACE(std::string(cpu::kv_scale_granularity_name(g)) + (rope_bf16 ? " rope bf16" : " rope fp8"));
      std::mt19937 rng(5);
      const int64_t r = 256, dr = 32, row = r + dr, bs = 64, n_tokens = 100;
      KvCacheOptions o = fp8(g);
      o.mla_rope_bf16 = rope_bf16;
      CpuKvCache cache(AttentionSpec::latent(4, r, 16, dr, 16), 1, 2, bs, o);
      EXPECT_EQ(cache.v_rows(0).data, nullptr);
      const KvRows k = cache.k_rows(0);
      EXPECT_EQ(k.scale_group_elements, 128);
      EXPECT_EQ(k.fp8_elements, rope_bf16 ? r : row);
      EXPECT_EQ(k.row_bytes, rope_bf16 ? r + 2 * dr : row);
      std::vector<float> x = wide_rows(rng, n_tokens, row, 128, 2, 2);
      for (int64_t t = 0; t < n_tokens; ++t)  // k_pe 100x larger than c_kv: a shared scale would hurt
        for (int64_t i = r; i < row; ++i) x[size_t(t * row + i)] *= 100.0f;
      std::vector<int64_t> slots(static_cast<size_t>(n_tokens));
      std::iota(slots.begin(), slots.end(), 0);
      cache.write(0, x.data(), row, nullptr, 0, slots.data(), n_tokens);
      check_round_trip(k, x, slots, row);
      if (!rope_bf16 && g != KvScaleGranularity::PerTensor) {
        EXPECT_GT(k.scale(0, 2), 16 * k.scale(0, 0)) << "k_pe has a scale group of its own";
      }
      if (rope_bf16) {  // k_pe to bf16 precision
        double max_rel = 0;
        for (int64_t t = 0; t < n_tokens; ++t)
          for (int64_t i = r; i < row; ++i) {
            const double xv = x[size_t(t * row + i)];
            max_rel = std::max(max_rel, std::fabs(reference::kv_element(k, t, i) - xv) / std::fabs(xv));
          }
        EXPECT_LE(max_rel, reference::kBf16UnitRoundoff);
      }
    }
}

TEST(KvQuant, CopyBlockCarriesRowsAndScales) {
  std::mt19937 rng(2);
  const int64_t row = 16, bs = 16;
  CpuKvCache cache(AttentionSpec::standard(1, 1, 16, 16), 2, 3, bs, fp8(KvScaleGranularity::PerBlock));
  std::vector<float> x = wide_rows(rng, 5, row, row, 1, 1);
  for (auto& v : x) v *= 37.0f;
  std::vector<int64_t> slots = {0, 1, 2, 3, 4};
  cache.write(1, x.data(), row, x.data(), row, slots.data(), 5);
  cache.copy_block(0, 2);
  const KvRows k = cache.k_rows(1);
  EXPECT_EQ(k.scale(2, 0), k.scale(0, 0));
  for (int64_t t = 0; t < 5; ++t)
    for (int64_t e = 0; e < row; ++e)
      EXPECT_EQ(reference::kv_element(k, 2 * bs + t, e), reference::kv_element(k, t, e));
}

TEST(KvQuant, Pow2ScaleHoldsAmaxWithHeadroomAndIsClamped) {
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> exponent(-60, 60);
  for (int i = 0; i < 1000; ++i) {
    const float amax = std::exp2(exponent(rng));
    for (float headroom : {1.0f, 4.0f}) {
      const float s = cpu::fp8_pow2_scale(amax, headroom);
      int e = 0;
      EXPECT_EQ(std::frexp(s, &e), 0.5f) << "a power of two";
      EXPECT_LE(double(amax) * headroom / s, 448.0);
      EXPECT_GT(double(amax) * headroom / s, 224.0) << "the smallest such power of two";
    }
  }
  EXPECT_EQ(cpu::fp8_pow2_scale(0.0f, 4.0f), 0.0f);
  EXPECT_EQ(cpu::fp8_pow2_scale(std::numeric_limits<float>::max(), 4.0f), std::ldexp(1.0f, cpu::kFp8MaxScaleExp));
  EXPECT_EQ(cpu::fp8_pow2_scale(1e-44f, 1.0f), std::ldexp(1.0f, cpu::kFp8MinScaleExp));
  EXPECT_TRUE(std::isfinite(448.0f * std::ldexp(1.0f, cpu::kFp8MaxScaleExp)));
  EXPECT_TRUE(std::isfinite(1.0f / std::ldexp(1.0f, cpu::kFp8MinScaleExp)));
}

TEST(KvQuant, OptionSpellings) {
  EXPECT_EQ(cpu::parse_kv_cache_dtype("auto"), DType::F32);
  EXPECT_EQ(cpu::parse_kv_cache_dtype("bf16"), DType::BF16);
  EXPECT_EQ(cpu::parse_kv_cache_dtype("fp8_e4m3"), DType::F8_E4M3);
  EXPECT_THROW(cpu::parse_kv_cache_dtype("fp8_e5m2"), Error);
  EXPECT_EQ(cpu::parse_kv_scale_granularity("per-head"), KvScaleGranularity::PerHead);
  EXPECT_THROW(cpu::parse_kv_scale_granularity("per-token"), Error);
  for (KvScaleGranularity g : kAllScales)
    EXPECT_EQ(cpu::parse_kv_scale_granularity(cpu::kv_scale_granularity_name(g)), g);
  KvCacheOptions bad;
  bad.dtype = DType::F16;
  EXPECT_THROW(CpuKvCache(AttentionSpec::standard(1, 1, 8, 8), 1, 1, 16, bad), Error);
  CpuKvCache fp8_cache(AttentionSpec::standard(1, 1, 8, 8), 1, 1, 16, fp8(KvScaleGranularity::PerHead));
  EXPECT_THROW(fp8_cache.k(0), Error) << "raw f32 rows of an fp8 cache";
}

}  // namespace
}  // namespace latentserve
