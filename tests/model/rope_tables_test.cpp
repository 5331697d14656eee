// compute_rope_tables: against transformers (tests/fixtures/rope_reference.json, written by
// tools/make_fixtures.py) and against independent float64 re-derivations of each formula.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numbers>

#include "core/error.h"
#include "model/rope_config.h"

namespace latentserve {
namespace {

using ::testing::HasSubstr;
using nlohmann::json;

RopeConfig rope_from(const json& object, double theta = 10000.0, int64_t max_pos = 4096) {
  return RopeConfig::from_json(object, theta, "test: rope_scaling", max_pos);
}

// float64 default inverse frequencies: theta^(-2i/dim).
std::vector<double> default_f64(double theta, int64_t dim) {
  std::vector<double> inv(size_t(dim / 2));
  for (int64_t i = 0; i < dim / 2; ++i) inv[size_t(i)] = std::pow(theta, -double(2 * i) / double(dim));
  return inv;
}

void expect_close(const std::vector<float>& got, const std::vector<double>& want, double rel_tol,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(double(got[i]), want[i], rel_tol * std::fabs(want[i])) << what << " inv_freq[" << i << "]";
}

// ---------------------------------------------------------------- float64 re-derivations ----

TEST(RopeTables, DefaultMatchesFloat64) {
  for (double theta : {10000.0, 500000.0, 1000000.0}) {
    for (int64_t head_dim : {16, 24, 64, 128}) {
      const RopeTables t = compute_rope_tables(rope_from(nullptr, theta), head_dim, 4096, 4096);
      EXPECT_EQ(t.rotary_dim, head_dim);
      EXPECT_EQ(t.attention_factor, 1.0f);
      expect_close(t.inv_freq, default_f64(theta, head_dim), 1e-6,
                   "default theta " + std::to_string(theta) + " dim " + std::to_string(head_dim));
      EXPECT_EQ(t.inv_freq[0], 1.0f);
    }
  }
}

TEST(RopeTables, LinearMatchesFloat64) {
  for (double factor : {2.0, 4.0, 1.5}) {
    const RopeTables t = compute_rope_tables(rope_from({{"type", "linear"}, {"factor", factor}}), 128, 4096, 4096);
    std::vector<double> want = default_f64(10000.0, 128);
    for (double& w : want) w /= factor;
    expect_close(t.inv_freq, want, 1e-6, "linear factor " + std::to_string(factor));
  }
}

TEST(RopeTables, PartialRotaryFactorShortensTheTable) {
  const RopeConfig rope = rope_from({{"rope_type", "linear"}, {"factor", 2.0}, {"partial_rotary_factor", 0.5}});
  const RopeTables t = compute_rope_tables(rope, 128, 4096, 4096);
  EXPECT_EQ(t.rotary_dim, 64);
  std::vector<double> want = default_f64(10000.0, 64);  // dim 64: exponents 2i/64
  for (double& w : want) w /= 2.0;
  expect_close(t.inv_freq, want, 1e-6, "partial 0.5");
}

// Llama 3.1: wavelength 2π/f splits pairs into kept (< orig/high), divided by factor
// (> orig/low), and smoothly blended in between.
TEST(RopeTables, Llama3MatchesFloat64) {
  const RopeConfig rope = rope_from({{"rope_type", "llama3"},
                                     {"factor", 8.0},
                                     {"low_freq_factor", 1.0},
                                     {"high_freq_factor", 4.0},
                                     {"original_max_position_embeddings", 8192}},
                                    500000.0, 131072);
  const RopeTables t = compute_rope_tables(rope, 128, 131072, 131072);
  const std::vector<double> base = default_f64(500000.0, 128);
  std::vector<double> want(base.size());
  int kept = 0, divided = 0, blended = 0;
  for (size_t i = 0; i < base.size(); ++i) {
    const double wavelen = 2 * std::numbers::pi / base[i];
    if (wavelen < 8192.0 / 4.0) {
      want[i] = base[i];
      ++kept;
    } else if (wavelen > 8192.0 / 1.0) {
      want[i] = base[i] / 8.0;
      ++divided;
    } else {
      const double smooth = (8192.0 / wavelen - 1.0) / (4.0 - 1.0);
      want[i] = (1 - smooth) * base[i] / 8.0 + smooth * base[i];
      ++blended;
    }
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(divided, 0);
  EXPECT_GT(blended, 0);
  expect_close(t.inv_freq, want, 2e-6, "llama3");
  EXPECT_EQ(t.attention_factor, 1.0f);
}

struct YarnF64 {
  std::vector<double> inv_freq;
  double attention_factor;
};

YarnF64 yarn_f64(double theta, int64_t dim, double factor, int64_t orig, double beta_fast, double beta_slow,
                 bool truncate, double mscale, double mscale_all_dim) {
  auto correction_dim = [&](double rotations) {
    return dim * std::log(orig / (rotations * 2 * std::numbers::pi)) / (2 * std::log(theta));
  };
  double low = correction_dim(beta_fast), high = correction_dim(beta_slow);
  if (truncate) low = std::floor(low), high = std::ceil(high);
  low = std::max(low, 0.0);
  high = std::min(high, double(dim - 1));
  if (low == high) high += 0.001;
  YarnF64 y;
  const std::vector<double> extrapolation = default_f64(theta, dim);
  for (size_t i = 0; i < extrapolation.size(); ++i) {
    const double ramp = std::clamp((double(i) - low) / (high - low), 0.0, 1.0);
    const double keep = 1 - ramp;  // share of the unscaled frequency
    y.inv_freq.push_back(extrapolation[i] / factor * (1 - keep) + extrapolation[i] * keep);
  }
  auto get_mscale = [&](double m) { return factor <= 1 ? 1.0 : 0.1 * m * std::log(factor) + 1.0; };
  y.attention_factor = (mscale != 0 && mscale_all_dim != 0) ? get_mscale(mscale) / get_mscale(mscale_all_dim)
                                                            : get_mscale(1.0);
  return y;
}

TEST(RopeTables, YarnMatchesFloat64) {
  {
    const RopeConfig rope =
        rope_from({{"type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 4096}}, 10000.0, 16384);
    const RopeTables t = compute_rope_tables(rope, 128, 16384, 16384);
    const YarnF64 want = yarn_f64(10000.0, 128, 4.0, 4096, 32, 1, true, 0, 0);
    expect_close(t.inv_freq, want.inv_freq, 2e-6, "yarn factor 4");
    EXPECT_NEAR(t.attention_factor, 0.1 * std::log(4.0) + 1.0, 1e-6);
    EXPECT_NEAR(t.attention_factor, want.attention_factor, 1e-6);
  }
  {
    // DeepSeek-V3 style: beta 32/1, mscale = mscale_all_dim -> attention factor 1.
    const RopeConfig rope = rope_from({{"rope_type", "yarn"},
                                       {"factor", 40.0},
                                       {"beta_fast", 32},
                                       {"beta_slow", 1},
                                       {"mscale", 1.0},
                                       {"mscale_all_dim", 1.0},
                                       {"original_max_position_embeddings", 4096}},
                                      10000.0, 163840);
    const RopeTables t = compute_rope_tables(rope, 64, 163840, 163840);
    const YarnF64 want = yarn_f64(10000.0, 64, 40.0, 4096, 32, 1, true, 1.0, 1.0);
    expect_close(t.inv_freq, want.inv_freq, 2e-6, "yarn factor 40");
    EXPECT_EQ(t.attention_factor, 1.0f);
  }
  {
    // gpt-oss style: no truncation of the correction range; unequal mscales.
    const RopeConfig rope = rope_from({{"rope_type", "yarn"},
                                       {"factor", 32.0},
                                       {"beta_fast", 32.0},
                                       {"beta_slow", 1.0},
                                       {"truncate", false},
                                       {"mscale", 0.707},
                                       {"mscale_all_dim", 1.0},
                                       {"original_max_position_embeddings", 4096}},
                                      150000.0, 131072);
    const RopeTables t = compute_rope_tables(rope, 64, 131072, 131072);
    const YarnF64 want = yarn_f64(150000.0, 64, 32.0, 4096, 32, 1, false, 0.707, 1.0);
    expect_close(t.inv_freq, want.inv_freq, 2e-6, "yarn no truncate");
    EXPECT_NEAR(t.attention_factor, want.attention_factor, 1e-6);
  }
}

TEST(RopeTables, YarnExplicitAttentionFactorWins) {
  const RopeConfig rope = rope_from({{"rope_type", "yarn"},
                                     {"factor", 4.0},
                                     {"attention_factor", 1.5},
                                     {"mscale", 1.0},
                                     {"mscale_all_dim", 0.5}});
  EXPECT_EQ(compute_rope_tables(rope, 64, 4096, 4096).attention_factor, 1.5f);
}

TEST(RopeTables, DynamicNtkGrowsTheBaseOnlyPastMaxPositions) {
  const RopeConfig rope = rope_from({{"rope_type", "dynamic"}, {"factor", 2.0}}, 10000.0, 2048);
  const RopeTables plain = compute_rope_tables(rope_from(nullptr), 64, 2048, 2048);
  for (int64_t seq_len : {1, 100, 2048})
    EXPECT_EQ(compute_rope_tables(rope, 64, 2048, seq_len).inv_freq, plain.inv_freq) << seq_len;
  for (int64_t seq_len : {2049, 3000, 8192}) {
    const double base = 10000.0 * std::pow(2.0 * seq_len / 2048.0 - 1.0, 64.0 / 62.0);
    expect_close(compute_rope_tables(rope, 64, 2048, seq_len).inv_freq, default_f64(base, 64), 2e-6,
                 "dynamic seq_len " + std::to_string(seq_len));
  }
}

TEST(RopeTables, RejectsOddRotaryDimension) {
  EXPECT_THROW(compute_rope_tables(rope_from(nullptr), 15, 4096, 4096), Error);
  EXPECT_THROW(compute_rope_tables(rope_from({{"rope_type", "default"}, {"partial_rotary_factor", 0.3}}), 10, 4096,
                                   4096),
               Error);
}

TEST(RopeConfig, ParsesTypesAndRejectsUnknownOnes) {
  EXPECT_EQ(rope_from(nullptr).type, RopeType::Default);
  EXPECT_EQ(rope_from(json::object()).type, RopeType::Default);
  EXPECT_EQ(rope_from({{"rope_type", "default"}, {"rope_theta", 5.0e5}}).theta, 5.0e5);
  EXPECT_EQ(rope_type_name(rope_from({{"type", "dynamic"}, {"factor", 2}}).type), "dynamic");
  try {
    rope_from({{"rope_type", "longrope"}});
    ADD_FAILURE() << "longrope accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("test: rope_scaling"));
    EXPECT_THAT(e.what(), HasSubstr("'longrope'"));
  }
  EXPECT_THROW(rope_from({{"full_attention", {{"rope_type", "default"}}}, {"sliding_attention", json::object()}}),
               Error);
  EXPECT_THROW(rope_from({{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                          {"high_freq_factor", 1.0}}),
               Error);
}

// ---------------------------------------------------------------- transformers reference ----

// rope_reference.json: {"cases": [{"name", "head_dim", "max_position_embeddings", "seq_len"
// (null = none given), "rope_parameters" (as config.json has them, rope_theta inside),
// "inv_freq": [...], "attention_scaling"}], ...} written by tools/make_fixtures.py.
TEST(RopeTables, MatchesTransformersReference) {
  const std::filesystem::path path = std::filesystem::path(LATENTSERVE_FIXTURES_DIR) / "rope_reference.json";
  if (!std::filesystem::exists(path))
    GTEST_SKIP() << "fixture missing: " << path.string()
                 << " (run `python3 tools/make_fixtures.py OUTDIR` on a machine with torch + transformers and copy "
                    "OUTDIR/rope_reference.json into tests/fixtures/)";
  std::ifstream in(path);
  const json reference = json::parse(in);
  ASSERT_TRUE(reference.contains("cases")) << path;
  ASSERT_FALSE(reference["cases"].empty()) << path;
  for (const json& c : reference["cases"]) {
    const std::string name = c.at("name").get<std::string>();
    SCOPED_TRACE(name);
    const int64_t head_dim = c.at("head_dim").get<int64_t>();
    const int64_t max_pos = c.at("max_position_embeddings").get<int64_t>();
    const int64_t seq_len = c.at("seq_len").is_null() ? max_pos : c.at("seq_len").get<int64_t>();
    const RopeConfig rope = RopeConfig::from_json(c.at("rope_parameters"), 10000.0,
                                                  "rope_reference.json: " + name, max_pos);
    const RopeTables t = compute_rope_tables(rope, head_dim, max_pos, seq_len);
    const std::vector<double> want = c.at("inv_freq").get<std::vector<double>>();
    ASSERT_EQ(t.inv_freq.size(), want.size());
    EXPECT_EQ(t.rotary_dim, int64_t(2 * want.size()));
    // torch's float32 pow (Sleef) is within 1 ulp of exact and ours is correctly rounded, so
    // the tables may differ by an ulp or two; everything after pow is mirrored op for op.
    int64_t worst_ulps = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      const float theirs = float(want[i]);
      const int64_t ulps = std::llabs(int64_t(std::bit_cast<int32_t>(t.inv_freq[i])) -
                                      int64_t(std::bit_cast<int32_t>(theirs)));
      worst_ulps = std::max(worst_ulps, ulps);
      EXPECT_LE(ulps, 2) << "inv_freq[" << i << "]: ours " << t.inv_freq[i] << ", transformers " << theirs;
    }
    RecordProperty(name + "_max_ulps", std::to_string(worst_ulps));
    EXPECT_NEAR(t.attention_factor, c.at("attention_scaling").get<double>(),
                1e-6 * std::fabs(c.at("attention_scaling").get<double>()));
  }
}

}  // namespace
}  // namespace latentserve
