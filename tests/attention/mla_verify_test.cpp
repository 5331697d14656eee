// The five `verify-mla` checks: each passes on DeepSeek-V3 attention dimensions with random
// weights, and each fails when handed a deliberately broken input (so the checks can fail).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>

#include "attention/mla_verify.h"
#include "model/architectures.h"

namespace latentserve {
namespace {

const std::filesystem::path kDeepseekFixture = std::filesystem::path(LATENTSERVE_FIXTURES_DIR) / "deepseek_v2_f32";

const MlaLayerWeights& v3_weights() {
  static const MlaLayerWeights w =
      random_mla_layer_weights(ModelConfig::from_json(deepseek_v3_config_json(), "DeepSeek-V3 config"), 1234);
  return w;
}

// The V3 attention with 16 heads instead of 128: for the broken-input tests, which copy the weights.
const MlaLayerWeights& v3_weights_16_heads() {
  static const MlaLayerWeights w = [] {
    nlohmann::json j = deepseek_v3_config_json();
    j["num_attention_heads"] = 16;
    j["num_key_value_heads"] = 16;
    return random_mla_layer_weights(ModelConfig::from_json(j, "DeepSeek-V3, 16 heads"), 1234);
  }();
  return w;
}

ThreadPool& pool() {
  static ThreadPool p(2);
  return p;
}

// ---- 1. KV footprint ----

TEST(MlaVerify, KvFootprintMatchesThePublishedDeepseekV3Figures) {
  const KvFootprintResult r = check_kv_footprint(deepseek_v3_mla_shape(), 8192, KvFootprintPublished{});
  EXPECT_TRUE(r.passed) << (r.mismatches.empty() ? "" : r.mismatches[0]);
  ASSERT_EQ(r.rows.size(), 4u);
  EXPECT_EQ(r.rows[0].bytes_per_token, 65536);  // MHA: 128 heads x (128 + 128) x 2 bytes
  EXPECT_EQ(r.rows[1].bytes_per_token, 4096);   // GQA-8
  EXPECT_EQ(r.rows[2].bytes_per_token, 512);    // MQA
  EXPECT_EQ(r.rows[3].bytes_per_token, 1152);   // MLA: (512 + 64) x 2 bytes
  EXPECT_NEAR(r.saving_vs_mha_percent, 98.2421875, 1e-9);
  ASSERT_TRUE(r.saving_vs_gqa8_percent.has_value());
  EXPECT_NEAR(*r.saving_vs_gqa8_percent, 71.875, 1e-9);
  EXPECT_EQ(r.rows[0].cache_bytes_at_context, int64_t(512) << 20);  // 512 MiB (536.9 MB)
  EXPECT_EQ(r.rows[3].cache_bytes_at_context, int64_t(9) << 20);    // 9 MiB
}

TEST(MlaVerify, KvFootprintFailsForDimsThatAreNotV3) {
  MlaShape s = deepseek_v3_mla_shape();
  s.qk_rope_head_dim = 32;  // 544-element latent: not the published 1,152 bytes
  const KvFootprintResult r = check_kv_footprint(s, 8192, KvFootprintPublished{});
  EXPECT_FALSE(r.passed);
  EXPECT_FALSE(r.mismatches.empty());
}

// ---- 2. Low rank ----

TEST(MlaVerify, KeysRebuiltFromTheLatentHaveRankAtMostKvLoraRank) {
  const LowRankResult r = check_low_rank(v3_weights(), 640, 1);
  EXPECT_TRUE(r.passed);
  EXPECT_EQ(r.rows, 640);
  EXPECT_EQ(r.cols, 128 * 128);
  EXPECT_EQ(r.numerical_rank, 512);  // exactly d_c: random latents span all of it
  EXPECT_GT(r.sigma_min_kept / r.sigma_max, 1e-3);      // a wide gap on both sides of the cut
  EXPECT_LT(r.sigma_first_dropped / r.sigma_max, 1e-7);
}

TEST(MlaVerify, LowRankFailsForKeysNotBuiltFromTheLatent) {
  const MlaLayerWeights& w = v3_weights_16_heads();
  ASSERT_TRUE(check_low_rank(w, 640, 1).passed);
  const int64_t L = 640, cols = w.shape.n_head * w.shape.qk_nope_head_dim;
  std::vector<double> k = reconstruct_keys_from_latent(w, L, 1);
  // A per-token component outside the latent's span (0.1% of the scale): full rank.
  std::mt19937_64 rng(7);
  std::normal_distribution<double> noise(0.0, 1e-3);
  for (auto& x : k) x += noise(rng);
  const LowRankResult r = measure_key_rank(k, L, cols, w.shape.kv_lora_rank);
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.numerical_rank, L);
}

// ---- 3. Decoupled RoPE ----

TEST(MlaVerify, RopeScoreSplitsAndDependsOnlyOnRelativePosition) {
  const DecoupledRopeResult r = check_decoupled_rope(v3_weights(), 3);
  EXPECT_TRUE(r.passed);
  EXPECT_LE(r.max_split_deviation, 1e-12);
  EXPECT_LE(r.max_relative_deviation, 1e-12);
}

TEST(MlaVerify, RopeCheckFailsWhenTheKeyIsRotatedAtTheWrongPosition) {
  const MlaLayerWeights& w = v3_weights();
  const RopeRotation right = model_rope_rotation(w);
  // The key rotated at 2s instead of s: scores then depend on t - 2s, not on t - s.
  const RopeRotation wrong = [right](double* x, int64_t pos) { right(x, 2 * pos); };
  const DecoupledRopeResult r = check_decoupled_rope(w, 3, right, wrong);
  EXPECT_FALSE(r.passed);
  EXPECT_GT(r.max_relative_deviation, 1e-3);
}

TEST(MlaVerify, RopeCheckFailsWhenQueryAndKeyUseDifferentPairLayouts) {
  MlaLayerWeights neox;  // only the RoPE fields matter here
  neox.inv_freq = v3_weights().inv_freq;
  neox.rope_attention_factor = v3_weights().rope_attention_factor;
  neox.rope_interleaved = !v3_weights().rope_interleaved;
  const DecoupledRopeResult r = check_decoupled_rope(v3_weights(), 3, model_rope_rotation(v3_weights()),
                                                     model_rope_rotation(neox));
  EXPECT_FALSE(r.passed);
}

// ---- 4. Absorption ----

TEST(MlaVerify, NaiveAndAbsorbedAgreeToF64Rounding) {
  const AbsorptionResult r = check_absorption(v3_weights(), 64, 4);
  EXPECT_TRUE(r.passed);
  EXPECT_EQ(r.n_head, 128);
  EXPECT_LE(r.logits_deviation, 1e-12);
  EXPECT_LE(r.weights_deviation, 1e-12);
  EXPECT_LE(r.output_deviation, 1e-12);
}

TEST(MlaVerify, AbsorptionFailsWithAPerturbedWuvInTheAbsorbedPath) {
  const MlaLayerWeights& good = v3_weights_16_heads();
  MlaLayerWeights broken = good;
  const MlaShape& s = broken.shape;
  // W_UV of head 5, one row, off by one part in a million.
  const int64_t row = 5 * (s.qk_nope_head_dim + s.v_head_dim) + s.qk_nope_head_dim + 3;
  for (int64_t c = 0; c < s.kv_lora_rank; ++c) broken.kv_b_proj[size_t(row * s.kv_lora_rank + c)] *= 1.0 + 1e-6;
  ASSERT_TRUE(check_absorption(good, 64, 4).passed);
  const AbsorptionResult r = check_absorption(good, broken, 64, 4);
  EXPECT_FALSE(r.passed);
  EXPECT_LE(r.logits_deviation, 1e-12);  // W_UV does not enter the scores
  EXPECT_GT(r.output_deviation, 1e-8);
}

TEST(MlaVerify, AbsorptionFailsWithAPerturbedWukInTheAbsorbedPath) {
  const MlaLayerWeights& good = v3_weights_16_heads();
  MlaLayerWeights broken = good;
  broken.kv_b_proj[17] += 1e-7;  // W_UK[0]
  const AbsorptionResult r = check_absorption(good, broken, 64, 4);
  EXPECT_FALSE(r.passed);
  EXPECT_GT(r.logits_deviation, 1e-12);
}

// ---- 5. End-to-end decode loop ----

MlaModelFactory v3_small_backbone() {
  const ModelConfig c = ModelConfig::from_json(small_backbone_config_json(deepseek_v3_config_json()), "small V3");
  return synthetic_mla_model_factory(c, 99, pool());
}

TEST(MlaVerify, DecodeLoopOnV3AttentionGrowsTheCacheByOneLatentRowPerToken) {
  const DecodeLoopResult r = check_decode_loop(v3_small_backbone(), "small V3", pool(), 8, 4);
  EXPECT_TRUE(r.passed);
  ASSERT_EQ(r.paths.size(), 2u);
  for (const auto& p : r.paths) {
    for (const auto& problem : p.problems) ADD_FAILURE() << problem;
    EXPECT_EQ(p.expected_elements_per_token, 576);
    EXPECT_EQ(p.cache_row_elements, 576);
    EXPECT_EQ(p.v_row_elements, 0);
    ASSERT_EQ(p.steps.size(), 5u);
    EXPECT_EQ(p.steps[0].n_tokens, 8);
    for (const auto& st : p.steps)
      for (int64_t e : st.elements_written) EXPECT_EQ(e, st.n_tokens * 576);
    EXPECT_LE(p.max_recompute_deviation, 1e-4);
    EXPECT_EQ(p.generated.size(), 5u);
  }
  EXPECT_EQ(r.paths[0].generated, r.paths[1].generated);
  EXPECT_LE(r.naive_vs_absorbed_deviation, 1e-4);
}

// Wraps a model and damages its cache after each forward: `stale` scales the first token's
// latent after a prefill (later decode steps read a cache that no recompute would produce);
// `extra` writes one more row than the step's tokens (a cache that grows too fast).
class DamagingModel final : public CausalLM {
 public:
  DamagingModel(std::unique_ptr<CausalLM> inner, bool stale, bool extra)
      : inner_(std::move(inner)), stale_(stale), extra_(extra) {}
  const ModelConfig& config() const override { return inner_->config(); }
  AttentionSpec attention_spec() const override { return inner_->attention_spec(); }
  void forward(const ForwardBatch& batch, KvCacheMemory& kv_memory, float* logits) override {
    inner_->forward(batch, kv_memory, logits);
    cpu::CpuKvCache& kv = cpu::as_cpu_kv_cache(kv_memory);
    const int64_t row = kv.k_row_elements();
    if (stale_ && batch.n_tokens() > 1)
      for (int64_t i = 0; i < row; ++i) kv.k(0)[batch.attention.slot_mapping[0] * row + i] *= 2.0f;
    if (extra_) {
      const int64_t last_slot = kv.n_blocks() * kv.block_size_tokens() - 1;
      for (int64_t i = 0; i < row; ++i) kv.k(1)[last_slot * row + i] = 0.0f;
    }
  }

 private:
  std::unique_ptr<CausalLM> inner_;
  bool stale_, extra_;
};

MlaModelFactory damaged_fixture(bool stale, bool extra) {
  return [stale, extra](MlaPath path) -> std::unique_ptr<CausalLM> {
    ModelOptions o;
    o.mla_path = path;
    return std::make_unique<DamagingModel>(load_causal_lm(kDeepseekFixture, pool(), o), stale, extra);
  };
}

TEST(MlaVerify, DecodeLoopPassesOnTheDeepseekFixture) {
  const DecodeLoopResult r = check_decode_loop(damaged_fixture(false, false), "fixture", pool(), 8, 4);
  EXPECT_TRUE(r.passed);
  for (const auto& p : r.paths) EXPECT_EQ(p.expected_elements_per_token, 32 + 8);
}

TEST(MlaVerify, DecodeLoopFailsWhenDecodeReadsAStaleCache) {
  const DecodeLoopResult r = check_decode_loop(damaged_fixture(true, false), "fixture, stale row", pool(), 8, 4);
  EXPECT_FALSE(r.passed);
  for (const auto& p : r.paths) {
    EXPECT_TRUE(p.growth_exact);
    EXPECT_GT(p.max_recompute_deviation, 1e-4);
  }
}

TEST(MlaVerify, DecodeLoopFailsWhenTheCacheGrowsByMoreThanTheLatent) {
  const DecodeLoopResult r = check_decode_loop(damaged_fixture(false, true), "fixture, extra row", pool(), 8, 4);
  EXPECT_FALSE(r.passed);
  for (const auto& p : r.paths) EXPECT_FALSE(p.growth_exact);
}

// ---- the suite ----

TEST(MlaVerify, ReportListsFiveChecksAndSerialisesToJson) {
  MlaVerifyReport rep;
  rep.subject = "unit";
  rep.checks.push_back(summarize(check_kv_footprint(deepseek_v3_mla_shape(), 8192, KvFootprintPublished{})));
  rep.checks.push_back(summarize(check_absorption(v3_weights(), 16, 5)));
  EXPECT_TRUE(rep.passed());
  const nlohmann::json j = rep.to_json();
  EXPECT_EQ(j["checks"].size(), 2u);
  EXPECT_EQ(j["checks"][0]["data"]["rows"][3]["bytes_per_token_per_layer"], 1152);
  EXPECT_NE(rep.to_text().find("[pass]"), std::string::npos);
  rep.checks[1].passed = false;
  EXPECT_FALSE(rep.passed());
  EXPECT_NE(rep.to_text().find("[FAIL]"), std::string::npos);
}

TEST(MlaVerify, CheckpointWeightsLoadFromTheFixture) {
  const MlaLayerWeights w = load_mla_layer_weights(kDeepseekFixture, 0);
  EXPECT_EQ(w.shape.n_head, 4);
  EXPECT_EQ(w.shape.kv_lora_rank, 32);
  EXPECT_TRUE(check_low_rank(w, 0, 1).passed);
  EXPECT_TRUE(check_decoupled_rope(w, 1).passed);
  EXPECT_TRUE(check_absorption(w, 64, 1).passed);
}

}  // namespace
}  // namespace latentserve
