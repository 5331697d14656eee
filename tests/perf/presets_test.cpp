// Presets carry published shapes: their parameter counts land on the published totals
// (Hugging Face model cards / papers), which checks every width and count at once.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "model/model_config.h"
#include "core/error.h"
#include "perf/presets.h"

namespace latentserve::perf {
namespace {

struct Published {
  const char* preset;
  double total_params;   // published
  double active_params;  // published (MoE), else 0
  double tolerance;      // relative
};

TEST(Presets, ParameterCountsMatchThePublishedTotals) {
  // Dense totals: safetensors parameter counts on the Hub (Llama-2-7b-hf 6,738,415,616;
  // Llama-2-70b-hf 68,976,648,192; Meta-Llama-3-8B 8,030,261,248; Meta-Llama-3-70B
  // 70,553,706,496; Llama-3.2-1B 1,235,814,400 with tied embeddings).
  // MoE: DeepSeek-V2 236B total / 21B activated, DeepSeek-V3 671B / 37B (main model, MTP
  // excluded), DeepSeek-V2-Lite 15.7B / 2.4B (papers and model cards). Activated counts
  // exclude the input embedding (a lookup); our active_per_token does too.
  const Published published[] = {
      {"llama2-7b", 6738415616, 0, 1e-3},       {"llama2-70b", 68976648192, 0, 1e-3},
      {"llama3-8b", 8030261248, 0, 1e-3},       {"llama3-70b", 70553706496, 0, 1e-3},
      {"llama-3.2-1b", 1235814400, 0, 1e-3},    {"deepseek-v2", 236e9, 21e9, 0.03},
      {"deepseek-v3", 671e9, 37e9, 0.03},       {"deepseek-v2-lite", 15.7e9, 2.4e9, 0.03},
  };
  for (const auto& p : published) {
    const ParamCounts c = count_params(model_preset(p.preset));
    EXPECT_NEAR(double(c.total) / p.total_params, 1.0, p.tolerance) << p.preset << " total " << c.total;
    if (p.active_params > 0) {
      EXPECT_NEAR(double(c.active_per_token) / p.active_params, 1.0, p.tolerance)
          << p.preset << " active " << c.active_per_token;
    }
  }
}

TEST(Presets, SeventyBillionWeightsAre140GB) {
  // 70.55e9 params x 2 B (bf16) = 141.1 GB: the "140 GB" of the analysis.
  EXPECT_NEAR(double(count_params(model_preset("llama3-70b")).total) * 2 / 1e9, 141.1, 0.1);
}

TEST(Presets, MlaShapes) {
  for (const char* name : {"deepseek-v2", "deepseek-v3", "deepseek-v2-lite"}) {
    const ModelShape m = model_preset(name);
    EXPECT_EQ(m.attention.kind, AttentionKind::MLA) << name;
    EXPECT_EQ(m.attention.kv_lora_rank, 512) << name;
    EXPECT_EQ(m.attention.qk_rope_head_dim, 64) << name;
    EXPECT_EQ(m.attention.kv_elements_per_token(), 576) << name;
  }
  EXPECT_EQ(model_preset("deepseek-v2").attention.n_head, 128);
  EXPECT_EQ(model_preset("deepseek-v3").n_layer, 61);
  EXPECT_EQ(model_preset("deepseek-v2-lite").attention.n_head, 16);
}

TEST(Presets, AttentionVariantsOfOneBackbone) {
  const ModelShape base = model_preset("llama3-70b");
  EXPECT_EQ(with_attention(base, "mha").attention.n_head_kv, 64);
  EXPECT_EQ(with_attention(base, "gqa8").attention.n_head_kv, 8);
  EXPECT_EQ(with_attention(base, "mqa").attention.n_head_kv, 1);
  EXPECT_EQ(with_attention(base, "mla").attention.kv_elements_per_token(), 576);
  EXPECT_EQ(with_attention(base, "mha").hidden_size, base.hidden_size);
  EXPECT_EQ(with_attention(base, "gqa8").name, "llama3-70b");  // unchanged
  EXPECT_EQ(with_attention(base, "mqa").name, "llama3-70b/mqa");
  // DeepSeek's MHA-equivalent heads are v_head_dim (128) wide.
  EXPECT_EQ(with_attention(model_preset("deepseek-v2"), "mha").attention.kv_elements_per_token(), 128 * 256);
  for (const char* bad : {"gqa3", "gqa0", "gqa", "mxa"}) {
    try {
      with_attention(base, bad);
      FAIL() << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--attention"), std::string::npos) << e.what();
    }
  }
}

TEST(Presets, MoeExpertsTouchedGrowWithTheBatch) {
  const MoeShape moe = model_preset("deepseek-v2").moe;
  EXPECT_NEAR(expected_experts_touched(moe, 1), 6, 1e-9);  // one token: its top-6
  EXPECT_GT(expected_experts_touched(moe, 32), 6 * 10);
  EXPECT_NEAR(expected_experts_touched(moe, 4096), 160, 1e-6);  // a prefill touches them all
}

TEST(Presets, UnknownPresetNamesTheFlag) {
  try {
    model_preset("gpt-5");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--preset"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("llama3-8b"), std::string::npos);  // lists the choices
  }
}

TEST(Presets, LlamaPresetsBuildAnEngineConfigWithTheSameKvFormula) {
  for (const char* name : {"tiny-bench", "llama3-8b", "llama-3.2-1b"}) {
    const ModelShape m = model_preset(name);
    const ModelConfig c = ModelConfig::from_json(nlohmann::json::parse(preset_config_json(m)), name);
    const AttentionSpec engine = AttentionSpec::standard(c.n_head, c.n_head_kv, c.head_dim, c.head_dim);
    EXPECT_EQ(engine.kv_bytes_per_token(DType::F32, c.n_layer), m.attention.kv_bytes_per_token(DType::F32, m.n_layer));
    EXPECT_EQ(c.hidden_size, m.hidden_size);
  }
  EXPECT_THROW(preset_config_json(model_preset("deepseek-v2")), Error);
}

// `bench decode --attention mla` runs the backbone as a dense DeepSeek-V2: its config must
// give the engine the latent the planner counts (512 + 64 per token and layer).
TEST(Presets, MlaVariantOfALlamaBackboneIsADenseDeepseekConfig) {
  const ModelShape m = with_attention(model_preset("tiny-bench"), "mla");
  const ModelConfig c = ModelConfig::from_json(nlohmann::json::parse(preset_config_json(m)), "tiny-bench mla");
  EXPECT_EQ(c.model_type, "deepseek_v2");
  ASSERT_TRUE(c.mla.has_value());
  EXPECT_EQ(c.mla->kv_lora_rank, 512);
  EXPECT_EQ(c.mla->qk_rope_head_dim, 64);
  EXPECT_TRUE(!c.moe || c.moe->n_routed_experts == 0) << "dense: no MoE";
  EXPECT_EQ(c.n_layer, m.n_layer);
  EXPECT_EQ(c.hidden_size, m.hidden_size);
}

}  // namespace
}  // namespace latentserve::perf
