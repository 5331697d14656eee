// deepseek_v2 / deepseek_v3 config.json parsing: the DeepSeek-V2-Lite, DeepSeek-V2 and
// DeepSeek-V3 configs as the Hub ships them (older `rope_scaling` form with "type"), the same in
// transformers v5's `rope_parameters` form, the softmax scale with the YaRN mscale correction
// against hand-derived values (checked against transformers 5.17's DeepseekV{2,3}Attention.scaling),
// class defaults, and every error class. The bundled DeepSeek fixtures are checked too.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"
#include "model/deepseek_config.h"
#include "model/model_config.h"

namespace latentserve {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using nlohmann::json;

ModelConfig parse(const std::string& text) { return ModelConfig::from_json(json::parse(text), "ds/config.json"); }

std::string error_of(const json& j) {
  try {
    ModelConfig::from_json(j, "ds/config.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// ---------------------------------------------------------------- Hub configs ----

const char* kDeepSeekV2Lite = R"json({
  "architectures": ["DeepseekV2ForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "auto_map": {
    "AutoConfig": "configuration_deepseek.DeepseekV2Config",
    "AutoModel": "modeling_deepseek.DeepseekV2Model",
    "AutoModelForCausalLM": "modeling_deepseek.DeepseekV2ForCausalLM"
  },
  "aux_loss_alpha": 0.001,
  "bos_token_id": 100000,
  "eos_token_id": 100001,
  "first_k_dense_replace": 1,
  "hidden_act": "silu",
  "hidden_size": 2048,
  "initializer_range": 0.02,
  "intermediate_size": 10944,
  "kv_lora_rank": 512,
  "max_position_embeddings": 163840,
  "model_type": "deepseek_v2",
  "moe_intermediate_size": 1408,
  "moe_layer_freq": 1,
  "n_group": 1,
  "n_routed_experts": 64,
  "n_shared_experts": 2,
  "norm_topk_prob": false,
  "num_attention_heads": 16,
  "num_experts_per_tok": 6,
  "num_hidden_layers": 27,
  "num_key_value_heads": 16,
  "pretraining_tp": 1,
  "q_lora_rank": null,
  "qk_nope_head_dim": 128,
  "qk_rope_head_dim": 64,
  "rms_norm_eps": 1e-06,
  "rope_scaling": {
    "beta_fast": 32,
    "beta_slow": 1,
    "factor": 40,
    "mscale": 0.707,
    "mscale_all_dim": 0.707,
    "original_max_position_embeddings": 4096,
    "type": "yarn"
  },
  "rope_theta": 10000,
  "routed_scaling_factor": 1.0,
  "scoring_func": "softmax",
  "seq_aux": true,
  "tie_word_embeddings": false,
  "topk_group": 1,
  "topk_method": "greedy",
  "torch_dtype": "bfloat16",
  "transformers_version": "4.33.1",
  "use_cache": true,
  "v_head_dim": 128,
  "vocab_size": 102400
})json";

const char* kDeepSeekV2 = R"json({
  "architectures": ["DeepseekV2ForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "aux_loss_alpha": 0.001,
  "bos_token_id": 100000,
  "eos_token_id": 100001,
  "first_k_dense_replace": 1,
  "hidden_act": "silu",
  "hidden_size": 5120,
  "initializer_range": 0.02,
  "intermediate_size": 12288,
  "kv_lora_rank": 512,
  "max_position_embeddings": 163840,
  "model_type": "deepseek_v2",
  "moe_intermediate_size": 1536,
  "moe_layer_freq": 1,
  "n_group": 8,
  "n_routed_experts": 160,
  "n_shared_experts": 2,
  "norm_topk_prob": false,
  "num_attention_heads": 128,
  "num_experts_per_tok": 6,
  "num_hidden_layers": 60,
  "num_key_value_heads": 128,
  "pretraining_tp": 1,
  "q_lora_rank": 1536,
  "qk_nope_head_dim": 128,
  "qk_rope_head_dim": 64,
  "rms_norm_eps": 1e-06,
  "rope_scaling": {
    "beta_fast": 32,
    "beta_slow": 1,
    "factor": 40,
    "mscale": 0.707,
    "mscale_all_dim": 0.707,
    "original_max_position_embeddings": 4096,
    "type": "yarn"
  },
  "rope_theta": 10000,
  "routed_scaling_factor": 16.0,
  "scoring_func": "softmax",
  "seq_aux": true,
  "tie_word_embeddings": false,
  "topk_group": 3,
  "topk_method": "group_limited_greedy",
  "torch_dtype": "bfloat16",
  "transformers_version": "4.39.3",
  "use_cache": true,
  "v_head_dim": 128,
  "vocab_size": 102400
})json";

const char* kDeepSeekV3 = R"json({
  "architectures": ["DeepseekV3ForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "auto_map": {
    "AutoConfig": "configuration_deepseek.DeepseekV3Config",
    "AutoModel": "modeling_deepseek.DeepseekV3Model",
    "AutoModelForCausalLM": "modeling_deepseek.DeepseekV3ForCausalLM"
  },
  "aux_loss_alpha": 0.001,
  "bos_token_id": 0,
  "eos_token_id": 1,
  "ep_size": 1,
  "first_k_dense_replace": 3,
  "hidden_act": "silu",
  "hidden_size": 7168,
  "initializer_range": 0.02,
  "intermediate_size": 18432,
  "kv_lora_rank": 512,
  "max_position_embeddings": 163840,
  "model_type": "deepseek_v3",
  "moe_intermediate_size": 2048,
  "moe_layer_freq": 1,
  "n_group": 8,
  "n_routed_experts": 256,
  "n_shared_experts": 1,
  "norm_topk_prob": true,
  "num_attention_heads": 128,
  "num_experts_per_tok": 8,
  "num_hidden_layers": 61,
  "num_key_value_heads": 128,
  "num_nextn_predict_layers": 1,
  "pretraining_tp": 1,
  "q_lora_rank": 1536,
  "qk_nope_head_dim": 128,
  "qk_rope_head_dim": 64,
  "quantization_config": {
    "activation_scheme": "dynamic",
    "fmt": "e4m3",
    "quant_method": "fp8",
    "weight_block_size": [128, 128]
  },
  "rms_norm_eps": 1e-06,
  "rope_scaling": {
    "beta_fast": 32,
    "beta_slow": 1,
    "factor": 40,
    "mscale": 1.0,
    "mscale_all_dim": 1.0,
    "original_max_position_embeddings": 4096,
    "type": "yarn"
  },
  "rope_theta": 10000,
  "routed_scaling_factor": 2.5,
  "scoring_func": "sigmoid",
  "seq_aux": true,
  "tie_word_embeddings": false,
  "topk_group": 4,
  "topk_method": "noaux_tc",
  "torch_dtype": "bfloat16",
  "transformers_version": "4.33.1",
  "use_cache": true,
  "v_head_dim": 128,
  "vocab_size": 129280
})json";

// The softmax scales, by hand (the values transformers 5.17 computes for these configs,
// DeepseekV{2,3}Attention.scaling, are the same doubles):
//   qk_head_dim = qk_nope + qk_rope = 128 + 64 = 192;  192^-0.5 = 1 / 13.856406460551018
//                                                               = 0.07216878364870322
//   ln(40) = 3.6888794541139363
//   V3: mscale_all_dim 1.0:   m = 0.1 * 1.0 * 3.68887945 + 1 = 1.3688879454113936
//       m^2 = 1.8738542070926265;  0.07216878364870322 * m * m = 0.1352337788608801
//   V2, V2-Lite: mscale_all_dim 0.707:  m = 0.1 * 0.707 * 3.68887945 + 1 = 1.2608037774058554
//       m^2 = 1.5896261651208736;  0.07216878364870322 * m * m = 0.1147213867929261
// (`mscale` itself only enters the RoPE attention_factor mscale(40, mscale) / mscale(40,
// mscale_all_dim), which is exactly 1 for all three.)
constexpr double kPlainScale192 = 0.07216878364870322;
constexpr double kV3Scale = 0.1352337788608801;
constexpr double kV2Scale = 0.1147213867929261;

void expect_yarn_40(const ModelConfig& c, double mscale) {
  EXPECT_EQ(c.rope.type, RopeType::Yarn);
  EXPECT_DOUBLE_EQ(c.rope.theta, 10000.0);
  EXPECT_DOUBLE_EQ(c.rope.factor, 40.0);
  EXPECT_EQ(c.rope.original_max_position_embeddings, 4096);
  EXPECT_DOUBLE_EQ(c.rope.beta_fast, 32.0);
  EXPECT_DOUBLE_EQ(c.rope.beta_slow, 1.0);
  EXPECT_DOUBLE_EQ(c.rope.mscale, mscale);
  EXPECT_DOUBLE_EQ(c.rope.mscale_all_dim, mscale);
  EXPECT_FALSE(c.rope.attention_factor.has_value());
  EXPECT_DOUBLE_EQ(c.rope.partial_rotary_factor, 1.0);
}

TEST(DeepseekConfig, V2Lite) {
  const ModelConfig c = parse(kDeepSeekV2Lite);
  EXPECT_EQ(c.model_type, "deepseek_v2");
  EXPECT_EQ(c.architecture, "DeepseekV2ForCausalLM");
  EXPECT_EQ(c.vocab_size, 102400);
  EXPECT_EQ(c.hidden_size, 2048);
  EXPECT_EQ(c.intermediate_size, 10944);
  EXPECT_EQ(c.n_layer, 27);
  EXPECT_EQ(c.n_head, 16);
  EXPECT_EQ(c.n_head_kv, 16);
  EXPECT_EQ(c.head_dim, 192);
  EXPECT_EQ(c.max_position_embeddings, 163840);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_FALSE(c.o_proj_bias);
  EXPECT_FALSE(c.mlp_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_FALSE(c.sliding_window.has_value());
  EXPECT_EQ(c.hidden_act, "silu");
  EXPECT_EQ(c.torch_dtype, "bfloat16");
  EXPECT_EQ(c.bos_token_id, 100000);
  EXPECT_THAT(c.eos_token_ids, ElementsAre(100001));

  ASSERT_TRUE(c.mla.has_value());
  EXPECT_EQ(c.mla->q_lora_rank, 0);  // null: plain q_proj
  EXPECT_EQ(c.mla->kv_lora_rank, 512);
  EXPECT_EQ(c.mla->qk_nope_head_dim, 128);
  EXPECT_EQ(c.mla->qk_rope_head_dim, 64);
  EXPECT_EQ(c.mla->v_head_dim, 128);

  ASSERT_TRUE(c.moe.has_value());
  EXPECT_EQ(c.moe->n_routed_experts, 64);
  EXPECT_EQ(c.moe->n_shared_experts, 2);
  EXPECT_EQ(c.moe->num_experts_per_tok, 6);
  EXPECT_EQ(c.moe->moe_intermediate_size, 1408);
  EXPECT_EQ(c.moe->first_k_dense_replace, 1);
  EXPECT_EQ(c.moe->moe_layer_freq, 1);
  EXPECT_EQ(c.moe->scoring_func, MoeScoring::Softmax);
  EXPECT_EQ(c.moe->topk_method, MoeTopk::Greedy);
  EXPECT_EQ(c.moe->n_group, 1);
  EXPECT_EQ(c.moe->topk_group, 1);
  EXPECT_FALSE(c.moe->norm_topk_prob);
  EXPECT_DOUBLE_EQ(c.moe->routed_scaling_factor, 1.0);
  EXPECT_FALSE(c.moe->is_moe_layer(0));
  EXPECT_TRUE(c.moe->is_moe_layer(1));
  EXPECT_TRUE(c.moe->is_moe_layer(26));

  expect_yarn_40(c, 0.707);
  EXPECT_TRUE(c.rope.interleaved);  // v2 always rotates (2i, 2i+1) pairs as complex numbers
  EXPECT_DOUBLE_EQ(c.softmax_scale, kV2Scale);
}

TEST(DeepseekConfig, V2) {
  const ModelConfig c = parse(kDeepSeekV2);
  EXPECT_EQ(c.model_type, "deepseek_v2");
  EXPECT_EQ(c.vocab_size, 102400);
  EXPECT_EQ(c.hidden_size, 5120);
  EXPECT_EQ(c.intermediate_size, 12288);
  EXPECT_EQ(c.n_layer, 60);
  EXPECT_EQ(c.n_head, 128);
  EXPECT_EQ(c.n_head_kv, 128);
  EXPECT_EQ(c.head_dim, 192);
  EXPECT_EQ(c.max_position_embeddings, 163840);
  EXPECT_EQ(c.bos_token_id, 100000);
  EXPECT_THAT(c.eos_token_ids, ElementsAre(100001));

  ASSERT_TRUE(c.mla.has_value());
  EXPECT_EQ(c.mla->q_lora_rank, 1536);
  EXPECT_EQ(c.mla->kv_lora_rank, 512);
  EXPECT_EQ(c.mla->qk_nope_head_dim, 128);
  EXPECT_EQ(c.mla->qk_rope_head_dim, 64);
  EXPECT_EQ(c.mla->v_head_dim, 128);

  ASSERT_TRUE(c.moe.has_value());
  EXPECT_EQ(c.moe->n_routed_experts, 160);
  EXPECT_EQ(c.moe->n_shared_experts, 2);
  EXPECT_EQ(c.moe->num_experts_per_tok, 6);
  EXPECT_EQ(c.moe->moe_intermediate_size, 1536);
  EXPECT_EQ(c.moe->first_k_dense_replace, 1);
  EXPECT_EQ(c.moe->scoring_func, MoeScoring::Softmax);
  EXPECT_EQ(c.moe->topk_method, MoeTopk::GroupLimitedGreedy);
  EXPECT_EQ(c.moe->n_group, 8);
  EXPECT_EQ(c.moe->topk_group, 3);
  EXPECT_FALSE(c.moe->norm_topk_prob);
  EXPECT_DOUBLE_EQ(c.moe->routed_scaling_factor, 16.0);

  expect_yarn_40(c, 0.707);
  EXPECT_TRUE(c.rope.interleaved);
  EXPECT_DOUBLE_EQ(c.softmax_scale, kV2Scale);
}

TEST(DeepseekConfig, V3) {
  const ModelConfig c = parse(kDeepSeekV3);
  EXPECT_EQ(c.model_type, "deepseek_v3");
  EXPECT_EQ(c.architecture, "DeepseekV3ForCausalLM");
  EXPECT_EQ(c.vocab_size, 129280);
  EXPECT_EQ(c.hidden_size, 7168);
  EXPECT_EQ(c.intermediate_size, 18432);
  EXPECT_EQ(c.n_layer, 61);  // the MTP layer (model.layers.61.*) is not counted: the model skips it
  EXPECT_EQ(c.n_head, 128);
  EXPECT_EQ(c.n_head_kv, 128);
  EXPECT_EQ(c.head_dim, 192);
  EXPECT_EQ(c.max_position_embeddings, 163840);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_FALSE(c.mlp_bias);
  EXPECT_EQ(c.torch_dtype, "bfloat16");
  EXPECT_EQ(c.bos_token_id, 0);
  EXPECT_THAT(c.eos_token_ids, ElementsAre(1));

  ASSERT_TRUE(c.mla.has_value());
  EXPECT_EQ(c.mla->q_lora_rank, 1536);
  EXPECT_EQ(c.mla->kv_lora_rank, 512);
  EXPECT_EQ(c.mla->qk_nope_head_dim, 128);
  EXPECT_EQ(c.mla->qk_rope_head_dim, 64);
  EXPECT_EQ(c.mla->v_head_dim, 128);

  ASSERT_TRUE(c.moe.has_value());
  EXPECT_EQ(c.moe->n_routed_experts, 256);
  EXPECT_EQ(c.moe->n_shared_experts, 1);
  EXPECT_EQ(c.moe->num_experts_per_tok, 8);
  EXPECT_EQ(c.moe->moe_intermediate_size, 2048);
  EXPECT_EQ(c.moe->first_k_dense_replace, 3);
  EXPECT_EQ(c.moe->moe_layer_freq, 1);
  EXPECT_EQ(c.moe->scoring_func, MoeScoring::Sigmoid);
  EXPECT_EQ(c.moe->topk_method, MoeTopk::NoauxTc);
  EXPECT_EQ(c.moe->n_group, 8);
  EXPECT_EQ(c.moe->topk_group, 4);
  EXPECT_TRUE(c.moe->norm_topk_prob);
  EXPECT_DOUBLE_EQ(c.moe->routed_scaling_factor, 2.5);
  EXPECT_FALSE(c.moe->is_moe_layer(0));
  EXPECT_FALSE(c.moe->is_moe_layer(2));
  EXPECT_TRUE(c.moe->is_moe_layer(3));
  EXPECT_TRUE(c.moe->is_moe_layer(60));

  expect_yarn_40(c, 1.0);
  EXPECT_TRUE(c.rope.interleaved);  // rope_interleave absent: DeepseekV3Config default True
  EXPECT_DOUBLE_EQ(c.softmax_scale, kV3Scale);
}

// The rope tables cover qk_rope_head_dim (transformers sets config.head_dim = qk_rope_head_dim),
// and their attention_factor (cos/sin scale) is 1 for the published configs: mscale == mscale_all_dim.
TEST(DeepseekConfig, RopeTablesUseTheRopeHeadDim) {
  for (const char* text : {kDeepSeekV2Lite, kDeepSeekV2, kDeepSeekV3}) {
    const ModelConfig c = parse(text);
    const RopeTables t = compute_rope_tables(c.rope, c.mla->qk_rope_head_dim, c.max_position_embeddings,
                                             c.max_position_embeddings);
    EXPECT_EQ(t.rotary_dim, 64);
    EXPECT_EQ(t.inv_freq.size(), 32u);
    EXPECT_FLOAT_EQ(t.attention_factor, 1.0f);
  }
}

// transformers v5's form: rope_parameters with rope_theta and rope_type inside, and the derived
// "head_dim" (= qk_rope_head_dim) / "qk_head_dim" keys save_pretrained writes.
TEST(DeepseekConfig, RopeParametersFormMatchesRopeScalingForm) {
  for (const char* text : {kDeepSeekV2Lite, kDeepSeekV2, kDeepSeekV3}) {
    const json hub = json::parse(text);
    json v5 = hub;
    v5.erase("rope_scaling");
    v5.erase("rope_theta");
    v5["rope_parameters"] = {{"rope_type", "yarn"},      {"rope_theta", 10000.0},
                             {"factor", 40.0},           {"beta_fast", 32.0},
                             {"beta_slow", 1.0},         {"mscale", hub["rope_scaling"]["mscale"]},
                             {"mscale_all_dim", hub["rope_scaling"]["mscale_all_dim"]},
                             {"original_max_position_embeddings", 4096}};
    v5["head_dim"] = 64;
    v5["qk_head_dim"] = 192;
    const ModelConfig a = ModelConfig::from_json(hub, "hub");
    const ModelConfig b = ModelConfig::from_json(v5, "v5");
    SCOPED_TRACE(a.model_type);
    EXPECT_EQ(b.head_dim, 192);
    EXPECT_EQ(b.rope.type, a.rope.type);
    EXPECT_DOUBLE_EQ(b.rope.theta, a.rope.theta);
    EXPECT_DOUBLE_EQ(b.rope.factor, a.rope.factor);
    EXPECT_DOUBLE_EQ(b.rope.mscale, a.rope.mscale);
    EXPECT_DOUBLE_EQ(b.rope.mscale_all_dim, a.rope.mscale_all_dim);
    EXPECT_EQ(b.rope.original_max_position_embeddings, a.rope.original_max_position_embeddings);
    EXPECT_EQ(b.rope.interleaved, a.rope.interleaved);
    EXPECT_DOUBLE_EQ(b.softmax_scale, a.softmax_scale);
    EXPECT_EQ(b.mla->kv_lora_rank, a.mla->kv_lora_rank);
    EXPECT_EQ(b.moe->topk_method, a.moe->topk_method);
  }
}

// Which RoPE settings change the softmax scale (values checked against transformers 5.17's
// DeepseekV{2,3}Attention.scaling and DeepseekV{2,3}RotaryEmbedding.attention_scaling).
TEST(DeepseekConfig, SoftmaxScaleRules) {
  const auto with_rope = [](const char* text, const json& rope) {
    json j = json::parse(text);
    j["rope_scaling"] = rope;
    return ModelConfig::from_json(j, "ds/config.json");
  };
  for (const char* text : {kDeepSeekV2, kDeepSeekV3}) {
    // Only mscale_all_dim enters the scale: `mscale` alone leaves it at 192^-0.5 and goes to the
    // RoPE attention_factor instead (0.1 ln 40 + 1 = 1.3688879454113936 on cos and sin).
    const ModelConfig m = with_rope(
        text, {{"type", "yarn"}, {"factor", 40}, {"mscale", 1.0}, {"original_max_position_embeddings", 4096}});
    EXPECT_DOUBLE_EQ(m.softmax_scale, kPlainScale192);
    EXPECT_NEAR(compute_rope_tables(m.rope, 64, m.max_position_embeddings, 1).attention_factor, 1.3688879454113936,
                1e-7);
    // mscale 1.0 with mscale_all_dim 0.707: scale as V2 (0.1147213867929261); RoPE factor
    // 1.3688879454113936 / 1.2608037774058554 = 1.0857263992561355.
    const ModelConfig r = with_rope(text, {{"type", "yarn"},
                                           {"factor", 40},
                                           {"mscale", 1.0},
                                           {"mscale_all_dim", 0.707},
                                           {"original_max_position_embeddings", 4096}});
    EXPECT_DOUBLE_EQ(r.softmax_scale, kV2Scale);
    EXPECT_NEAR(compute_rope_tables(r.rope, 64, r.max_position_embeddings, 1).attention_factor, 1.0857263992561355,
                1e-7);
    // Any non-default type with mscale_all_dim counts, linear included:
    // 192^-0.5 * (0.1 ln 4 + 1)^2 = 0.07216878364870322 * 1.138629436111989^2 = 0.09356516759751214.
    EXPECT_DOUBLE_EQ(with_rope(text, {{"type", "linear"}, {"factor", 4.0}, {"mscale_all_dim", 1.0}}).softmax_scale,
                     0.09356516759751214);
    // factor <= 1: mscale 1.
    EXPECT_DOUBLE_EQ(with_rope(text, {{"type", "yarn"},
                                      {"factor", 1.0},
                                      {"mscale_all_dim", 1.0},
                                      {"original_max_position_embeddings", 4096}})
                         .softmax_scale,
                     kPlainScale192);
    // No RoPE scaling at all.
    EXPECT_DOUBLE_EQ(with_rope(text, nullptr).softmax_scale, kPlainScale192);
    // A default-type object carrying mscale_all_dim is ignored.
    EXPECT_DOUBLE_EQ(with_rope(text, {{"type", "default"}, {"mscale_all_dim", 1.0}}).softmax_scale, kPlainScale192);
  }
  // Direct: qk 24 (the fixtures' 16 + 8), yarn factor 4, mscale_all_dim 0.8:
  // 24^-0.5 * (0.08 ln 4 + 1)^2.
  const double m = 0.1 * 0.8 * std::log(4.0) + 1.0;
  EXPECT_DOUBLE_EQ(deepseek_softmax_scale(24, RopeType::Yarn, 4.0, 0.8), std::pow(24.0, -0.5) * m * m);
  EXPECT_DOUBLE_EQ(deepseek_softmax_scale(24, RopeType::Default, 4.0, 0.8), std::pow(24.0, -0.5));
}

TEST(DeepseekConfig, LlamaFamilySoftmaxScaleIsHeadDimToTheMinusHalf) {
  const ModelConfig c = parse(R"({"model_type": "llama", "vocab_size": 10, "hidden_size": 64,
      "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 4, "head_dim": 24})");
  EXPECT_DOUBLE_EQ(c.softmax_scale, 1.0 / std::sqrt(24.0));
  EXPECT_FALSE(c.mla.has_value());
  EXPECT_FALSE(c.moe.has_value());
}

TEST(DeepseekConfig, RopeLayout) {
  json v3 = json::parse(kDeepSeekV3);
  v3["rope_interleave"] = false;
  EXPECT_FALSE(ModelConfig::from_json(v3, "x").rope.interleaved);  // rotate_half layout
  json v2 = json::parse(kDeepSeekV2);
  v2["rope_interleave"] = false;  // not a DeepseekV2Config field: v2 always uses complex pairs
  EXPECT_TRUE(ModelConfig::from_json(v2, "x").rope.interleaved);
}

// Fields left out take DeepseekV2Config / DeepseekV3Config's defaults (transformers 5.17).
TEST(DeepseekConfig, ClassDefaults) {
  const char* base = R"({"vocab_size": 256, "hidden_size": 64, "intermediate_size": 96,
      "num_hidden_layers": 4, "num_attention_heads": 4, "kv_lora_rank": 32, "num_experts_per_tok": 2})";
  json v2 = json::parse(base);
  v2["model_type"] = "deepseek_v2";
  const ModelConfig a = ModelConfig::from_json(v2, "v2");
  EXPECT_EQ(a.max_position_embeddings, 2048);
  EXPECT_EQ(a.bos_token_id, 1);
  EXPECT_THAT(a.eos_token_ids, ElementsAre(2));
  EXPECT_EQ(a.mla->q_lora_rank, 1536);
  EXPECT_EQ(a.mla->qk_nope_head_dim, 128);
  EXPECT_EQ(a.mla->qk_rope_head_dim, 64);
  EXPECT_EQ(a.mla->v_head_dim, 128);
  EXPECT_EQ(a.head_dim, 192);
  EXPECT_EQ(a.n_head_kv, 4);
  EXPECT_EQ(a.moe->n_routed_experts, 64);
  EXPECT_EQ(a.moe->n_shared_experts, 2);
  EXPECT_EQ(a.moe->moe_intermediate_size, 1407);
  EXPECT_EQ(a.moe->first_k_dense_replace, 0);
  EXPECT_EQ(a.moe->moe_layer_freq, 1);
  EXPECT_EQ(a.moe->scoring_func, MoeScoring::Softmax);
  EXPECT_EQ(a.moe->topk_method, MoeTopk::Greedy);
  EXPECT_EQ(a.moe->n_group, 1);  // None in transformers
  EXPECT_EQ(a.moe->topk_group, 1);
  EXPECT_FALSE(a.moe->norm_topk_prob);
  EXPECT_DOUBLE_EQ(a.moe->routed_scaling_factor, 1.0);
  EXPECT_TRUE(a.moe->is_moe_layer(0));
  EXPECT_EQ(a.rope.type, RopeType::Default);
  EXPECT_TRUE(a.rope.interleaved);
  EXPECT_DOUBLE_EQ(a.softmax_scale, kPlainScale192);

  json v3 = json::parse(base);
  v3["model_type"] = "deepseek_v3";
  v3.erase("num_experts_per_tok");
  const ModelConfig b = ModelConfig::from_json(v3, "v3");
  EXPECT_EQ(b.max_position_embeddings, 4096);
  EXPECT_EQ(b.bos_token_id, 0);
  EXPECT_THAT(b.eos_token_ids, ElementsAre(1));
  EXPECT_EQ(b.mla->q_lora_rank, 1536);
  EXPECT_EQ(b.moe->n_routed_experts, 256);
  EXPECT_EQ(b.moe->n_shared_experts, 1);
  EXPECT_EQ(b.moe->num_experts_per_tok, 8);
  EXPECT_EQ(b.moe->moe_intermediate_size, 2048);
  EXPECT_EQ(b.moe->first_k_dense_replace, 3);
  EXPECT_EQ(b.moe->scoring_func, MoeScoring::Sigmoid);
  EXPECT_EQ(b.moe->topk_method, MoeTopk::NoauxTc);
  EXPECT_EQ(b.moe->n_group, 8);
  EXPECT_EQ(b.moe->topk_group, 4);
  EXPECT_TRUE(b.moe->norm_topk_prob);
  EXPECT_DOUBLE_EQ(b.moe->routed_scaling_factor, 2.5);
  EXPECT_TRUE(b.rope.interleaved);
}

TEST(DeepseekConfig, ArchitectureAndKimiK2) {
  json j = json::parse(kDeepSeekV3);
  j.erase("model_type");
  EXPECT_EQ(ModelConfig::from_json(j, "x").model_type, "deepseek_v3");
  json v2 = json::parse(kDeepSeekV2Lite);
  v2.erase("model_type");
  EXPECT_EQ(ModelConfig::from_json(v2, "x").model_type, "deepseek_v2");
  // Kimi-K2 style: model_type "kimi_k2", the V3 architecture, one expert group.
  json k = json::parse(kDeepSeekV3);
  k["model_type"] = "kimi_k2";
  k["num_attention_heads"] = 64;
  k["num_key_value_heads"] = 64;
  k["n_routed_experts"] = 384;
  k["n_group"] = 1;
  k["topk_group"] = 1;
  k["first_k_dense_replace"] = 1;
  k["routed_scaling_factor"] = 2.827;
  const ModelConfig c = ModelConfig::from_json(k, "x");
  EXPECT_EQ(c.model_type, "deepseek_v3");
  EXPECT_EQ(c.n_head_kv, 64);
  EXPECT_EQ(c.moe->n_group, 1);
  EXPECT_DOUBLE_EQ(c.moe->routed_scaling_factor, 2.827);
}

TEST(DeepseekConfig, MoeLayerRule) {
  MoeConfig m;
  m.n_routed_experts = 8;
  m.first_k_dense_replace = 1;
  m.moe_layer_freq = 2;
  EXPECT_FALSE(m.is_moe_layer(0));
  EXPECT_FALSE(m.is_moe_layer(1));
  EXPECT_TRUE(m.is_moe_layer(2));
  EXPECT_FALSE(m.is_moe_layer(3));
  m.n_routed_experts = 0;
  EXPECT_FALSE(m.is_moe_layer(2));
  // null n_routed_experts: no MoE at all (every layer dense).
  json j = json::parse(kDeepSeekV2Lite);
  j["n_routed_experts"] = nullptr;
  EXPECT_FALSE(ModelConfig::from_json(j, "x").moe.has_value());
}

// ---------------------------------------------------------------- errors ----

struct ErrorCase {
  const char* name;
  const char* config;
  json patch;  // merged into the config; a null value erases the key
  std::vector<std::string> expected;
};

TEST(DeepseekConfigErrors, EachClassNamesTheField) {
  const ErrorCase cases[] = {
      {"kv_lora_rank missing", kDeepSeekV3, {{"kv_lora_rank", nullptr}}, {"'kv_lora_rank'", "missing"}},
      {"kv_lora_rank zero", kDeepSeekV2, {{"kv_lora_rank", 0}}, {"'kv_lora_rank'", "> 0"}},
      {"qk_rope_head_dim odd", kDeepSeekV3, {{"qk_rope_head_dim", 63}}, {"'qk_rope_head_dim'", "even", "63"}},
      {"qk_nope_head_dim zero", kDeepSeekV3, {{"qk_nope_head_dim", 0}}, {"'qk_nope_head_dim'"}},
      {"q_lora_rank zero", kDeepSeekV3, {{"q_lora_rank", 0}}, {"'q_lora_rank'"}},
      {"experts per token > experts", kDeepSeekV2Lite, {{"num_experts_per_tok", 65}},
       {"'num_experts_per_tok'", "65", "n_routed_experts", "64"}},
      {"experts per token missing (v2 default None)", kDeepSeekV2Lite, {{"num_experts_per_tok", nullptr}},
       {"'num_experts_per_tok'", "missing"}},
      {"topk_group > n_group", kDeepSeekV3, {{"topk_group", 9}}, {"'topk_group'", "9", "n_group", "8"}},
      {"experts not divisible by groups", kDeepSeekV2, {{"n_group", 7}, {"topk_group", 3}},
       {"'n_routed_experts'", "160", "n_group", "7"}},
      {"unknown scoring_func", kDeepSeekV3, {{"scoring_func", "tanh"}},
       {"scoring_func", "'tanh'", "softmax, sigmoid"}},
      {"unknown topk_method", kDeepSeekV2, {{"topk_method", "random"}},
       {"topk_method", "'random'", "greedy, group_limited_greedy, noaux_tc"}},
      {"v3 with softmax", kDeepSeekV3, {{"scoring_func", "softmax"}}, {"scoring_func", "deepseek_v3"}},
      {"v3 with greedy", kDeepSeekV3, {{"topk_method", "greedy"}}, {"topk_method", "deepseek_v3"}},
      {"v2 with sigmoid", kDeepSeekV2, {{"scoring_func", "sigmoid"}}, {"scoring_func", "deepseek_v2"}},
      {"v2 with noaux_tc", kDeepSeekV2, {{"topk_method", "noaux_tc"}}, {"noaux_tc", "deepseek_v2"}},
      {"v2 with norm_topk_prob", kDeepSeekV2, {{"norm_topk_prob", true}}, {"'norm_topk_prob'", "deepseek_v2"}},
      {"noaux_tc with one expert per group", kDeepSeekV3, {{"n_group", 256}, {"topk_group", 4}},
       {"'n_group'", "two best"}},
      {"k beyond the kept groups", kDeepSeekV2, {{"topk_group", 1}, {"num_experts_per_tok", 21}},
       {"'num_experts_per_tok'", "topk_group"}},
      {"kv heads differ", kDeepSeekV3, {{"num_key_value_heads", 8}}, {"'num_key_value_heads'", "8", "128"}},
      {"wrong type", kDeepSeekV3, {{"kv_lora_rank", "512"}}, {"'kv_lora_rank'", "must be an integer"}},
      {"wrong type", kDeepSeekV3, {{"rope_interleave", 1}}, {"'rope_interleave'", "true or false"}},
      {"wrong type", kDeepSeekV3, {{"scoring_func", 1}}, {"'scoring_func'", "must be a string"}},
  };
  for (const ErrorCase& c : cases) {
    json j = json::parse(c.config);
    for (const auto& [key, value] : c.patch.items()) {
      if (value.is_null()) {
        j.erase(key);
      } else {
        j[key] = value;
      }
    }
    const std::string message = error_of(j);
    EXPECT_THAT(message, HasSubstr("ds/config.json")) << c.name;
    for (const std::string& want : c.expected) EXPECT_THAT(message, HasSubstr(want)) << c.name;
  }
}

// ---------------------------------------------------------------- fixtures ----

// Every tests/fixtures/deepseek_*: config.json (transformers v5 form) and config_rope_scaling.json
// (the same config in the older rope_scaling form) parse to the same ModelConfig, and its
// softmax scale and RoPE tables are the ones transformers used (reference.json "mla_reference").
TEST(DeepseekConfig, BundledFixtures) {
  const std::filesystem::path root(LATENTSERVE_FIXTURES_DIR);
  int n_fixtures = 0;
  if (std::filesystem::exists(root)) {
    for (const auto& entry : std::filesystem::directory_iterator(root)) {
      const std::string name = entry.path().filename().string();
      if (!entry.is_directory() || name.rfind("deepseek_", 0) != 0) continue;
      SCOPED_TRACE(name);
      ++n_fixtures;
      const ModelConfig a = ModelConfig::load(entry.path() / "config.json");
      const ModelConfig b = ModelConfig::load(entry.path() / "config_rope_scaling.json");
      EXPECT_EQ(a.model_type, b.model_type);
      EXPECT_EQ(a.head_dim, b.head_dim);
      EXPECT_EQ(a.rope.type, b.rope.type);
      EXPECT_DOUBLE_EQ(a.rope.theta, b.rope.theta);
      EXPECT_DOUBLE_EQ(a.rope.factor, b.rope.factor);
      EXPECT_DOUBLE_EQ(a.rope.mscale, b.rope.mscale);
      EXPECT_DOUBLE_EQ(a.rope.mscale_all_dim, b.rope.mscale_all_dim);
      EXPECT_EQ(a.rope.original_max_position_embeddings, b.rope.original_max_position_embeddings);
      EXPECT_EQ(a.rope.interleaved, b.rope.interleaved);
      EXPECT_DOUBLE_EQ(a.softmax_scale, b.softmax_scale);
      ASSERT_TRUE(a.mla && b.mla && a.moe && b.moe);
      EXPECT_EQ(a.mla->q_lora_rank, b.mla->q_lora_rank);
      EXPECT_EQ(a.moe->topk_method, b.moe->topk_method);

      std::ifstream in(entry.path() / "reference.json");
      const json reference = json::parse(in);
      if (!reference.contains("mla_reference")) continue;
      const json& r = reference["mla_reference"];
      // transformers' float `self.scaling`; ours is computed the same way in double.
      EXPECT_DOUBLE_EQ(a.softmax_scale, r.at("softmax_scale").get<double>());
      const RopeTables t =
          compute_rope_tables(a.rope, a.mla->qk_rope_head_dim, a.max_position_embeddings, a.max_position_embeddings);
      const auto want = r.at("inv_freq").get<std::vector<double>>();
      ASSERT_EQ(t.inv_freq.size(), want.size());
      for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(t.inv_freq[i], want[i], 2e-7 * want[i]) << i;
      EXPECT_NEAR(t.attention_factor, r.at("rope_attention_scaling").get<double>(), 1e-6);
      EXPECT_EQ(a.rope.interleaved, r.at("rope_interleaved").get<bool>());
    }
  }
  if (n_fixtures == 0) GTEST_SKIP() << "no deepseek_* fixtures under " << root.string();
}

}  // namespace
}  // namespace latentserve
