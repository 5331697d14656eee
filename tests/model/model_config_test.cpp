// ModelConfig::from_json / load on config.json text as the Hub ships it (values from the
// real Llama-3.1-8B, Mistral-7B-v0.3, Qwen2.5-7B and Qwen3-8B configs), in both the older
// `rope_scaling` form and transformers v5's `rope_parameters` form, plus every error class.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"
#include "model/model_config.h"

namespace latentserve {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using nlohmann::json;

ModelConfig parse(const std::string& text, const std::string& source = "test/config.json") {
  return ModelConfig::from_json(json::parse(text), source);
}

// Runs from_json on `j` and returns the error message ("" if it did not throw).
std::string error_of(const json& j, const std::string& source = "m/config.json") {
  try {
    ModelConfig::from_json(j, source);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// ---------------------------------------------------------------- Hub configs ----

const char* kLlama31_8B = R"json({
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 128000,
  "eos_token_id": 128001,
  "hidden_act": "silu",
  "hidden_size": 4096,
  "initializer_range": 0.02,
  "intermediate_size": 14336,
  "max_position_embeddings": 131072,
  "mlp_bias": false,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 32,
  "num_key_value_heads": 8,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": {
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
    "rope_type": "llama3"
  },
  "rope_theta": 500000.0,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.43.0.dev0",
  "use_cache": true,
  "vocab_size": 128256
})json";

// The same model as transformers v5 saves it: rope_parameters with rope_theta inside,
// "dtype" instead of "torch_dtype", and the Instruct model's eos list.
const char* kLlama31_8B_v5 = R"json({
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false,
  "bos_token_id": 128000,
  "dtype": "bfloat16",
  "eos_token_id": [128001, 128008, 128009],
  "head_dim": 128,
  "hidden_act": "silu",
  "hidden_size": 4096,
  "intermediate_size": 14336,
  "max_position_embeddings": 131072,
  "mlp_bias": false,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 32,
  "num_key_value_heads": 8,
  "rms_norm_eps": 1e-05,
  "rope_parameters": {
    "factor": 8.0,
    "high_freq_factor": 4.0,
    "low_freq_factor": 1.0,
    "original_max_position_embeddings": 8192,
    "rope_theta": 500000.0,
    "rope_type": "llama3"
  },
  "tie_word_embeddings": false,
  "transformers_version": "5.0.0",
  "vocab_size": 128256
})json";

const char* kMistral7B_v03 = R"json({
  "architectures": ["MistralForCausalLM"],
  "attention_dropout": 0.0,
  "bos_token_id": 1,
  "eos_token_id": 2,
  "hidden_act": "silu",
  "hidden_size": 4096,
  "initializer_range": 0.02,
  "intermediate_size": 14336,
  "max_position_embeddings": 32768,
  "model_type": "mistral",
  "num_attention_heads": 32,
  "num_hidden_layers": 32,
  "num_key_value_heads": 8,
  "rms_norm_eps": 1e-05,
  "rope_theta": 1000000.0,
  "sliding_window": null,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.42.0.dev0",
  "use_cache": true,
  "vocab_size": 32768
})json";

const char* kQwen25_7B = R"json({
  "architectures": ["Qwen2ForCausalLM"],
  "attention_dropout": 0.0,
  "bos_token_id": 151643,
  "eos_token_id": 151643,
  "hidden_act": "silu",
  "hidden_size": 3584,
  "initializer_range": 0.02,
  "intermediate_size": 18944,
  "max_position_embeddings": 131072,
  "max_window_layers": 28,
  "model_type": "qwen2",
  "num_attention_heads": 28,
  "num_hidden_layers": 28,
  "num_key_value_heads": 4,
  "rms_norm_eps": 1e-06,
  "rope_theta": 1000000.0,
  "sliding_window": 131072,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.40.1",
  "use_cache": true,
  "use_mrope": false,
  "use_sliding_window": false,
  "vocab_size": 152064
})json";

const char* kQwen3_8B = R"json({
  "architectures": ["Qwen3ForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 151643,
  "eos_token_id": 151645,
  "head_dim": 128,
  "hidden_act": "silu",
  "hidden_size": 4096,
  "initializer_range": 0.02,
  "intermediate_size": 12288,
  "max_position_embeddings": 40960,
  "max_window_layers": 36,
  "model_type": "qwen3",
  "num_attention_heads": 32,
  "num_hidden_layers": 36,
  "num_key_value_heads": 8,
  "rms_norm_eps": 1e-06,
  "rope_scaling": null,
  "rope_theta": 1000000,
  "sliding_window": null,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.51.0",
  "use_cache": true,
  "use_sliding_window": false,
  "vocab_size": 151936
})json";

TEST(ModelConfig, Llama31_8B_RopeScaling) {
  const ModelConfig c = parse(kLlama31_8B);
  EXPECT_EQ(c.model_type, "llama");
  EXPECT_EQ(c.architecture, "LlamaForCausalLM");
  EXPECT_EQ(c.vocab_size, 128256);
  EXPECT_EQ(c.hidden_size, 4096);
  EXPECT_EQ(c.intermediate_size, 14336);
  EXPECT_EQ(c.n_layer, 32);
  EXPECT_EQ(c.n_head, 32);
  EXPECT_EQ(c.n_head_kv, 8);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.max_position_embeddings, 131072);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_FALSE(c.o_proj_bias);
  EXPECT_FALSE(c.mlp_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_FALSE(c.sliding_window.has_value());
  EXPECT_EQ(c.hidden_act, "silu");
  EXPECT_EQ(c.torch_dtype, "bfloat16");
  EXPECT_EQ(c.bos_token_id, 128000);
  EXPECT_THAT(c.eos_token_ids, ElementsAre(128001));
  EXPECT_EQ(c.rope.type, RopeType::Llama3);
  EXPECT_DOUBLE_EQ(c.rope.theta, 500000.0);
  EXPECT_DOUBLE_EQ(c.rope.factor, 8.0);
  EXPECT_DOUBLE_EQ(c.rope.low_freq_factor, 1.0);
  EXPECT_DOUBLE_EQ(c.rope.high_freq_factor, 4.0);
  EXPECT_EQ(c.rope.original_max_position_embeddings, 8192);
  EXPECT_DOUBLE_EQ(c.rope.partial_rotary_factor, 1.0);
  EXPECT_FALSE(c.rope.interleaved);
}

TEST(ModelConfig, Llama31_8B_RopeParametersV5) {
  const ModelConfig a = parse(kLlama31_8B);
  const ModelConfig b = parse(kLlama31_8B_v5);
  EXPECT_EQ(b.head_dim, 128);
  EXPECT_EQ(b.torch_dtype, "bfloat16");
  EXPECT_THAT(b.eos_token_ids, ElementsAre(128001, 128008, 128009));
  EXPECT_EQ(b.rope.type, RopeType::Llama3);
  EXPECT_DOUBLE_EQ(b.rope.theta, 500000.0);  // from inside rope_parameters
  EXPECT_DOUBLE_EQ(b.rope.factor, a.rope.factor);
  EXPECT_DOUBLE_EQ(b.rope.low_freq_factor, a.rope.low_freq_factor);
  EXPECT_DOUBLE_EQ(b.rope.high_freq_factor, a.rope.high_freq_factor);
  EXPECT_EQ(b.rope.original_max_position_embeddings, a.rope.original_max_position_embeddings);
}

TEST(ModelConfig, Mistral7B_v03) {
  const ModelConfig c = parse(kMistral7B_v03);
  EXPECT_EQ(c.model_type, "mistral");
  EXPECT_EQ(c.architecture, "MistralForCausalLM");
  EXPECT_EQ(c.vocab_size, 32768);
  EXPECT_EQ(c.n_head, 32);
  EXPECT_EQ(c.n_head_kv, 8);
  EXPECT_EQ(c.head_dim, 128);  // no head_dim field: hidden / n_head
  EXPECT_EQ(c.max_position_embeddings, 32768);
  EXPECT_FALSE(c.sliding_window.has_value());  // null in v0.3
  EXPECT_FALSE(c.attention_bias);
  EXPECT_FALSE(c.o_proj_bias);
  EXPECT_FALSE(c.mlp_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_EQ(c.rope.type, RopeType::Default);
  EXPECT_DOUBLE_EQ(c.rope.theta, 1e6);
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_THAT(c.eos_token_ids, ElementsAre(2));
}

TEST(ModelConfig, MistralSlidingWindowAndHeadDimOverride) {
  // Mistral-7B-v0.1 had a 4096 window; Mistral-Nemo has head_dim 128 != 5120 / 32.
  json j = json::parse(kMistral7B_v03);
  j["sliding_window"] = 4096;
  j["hidden_size"] = 5120;
  j["head_dim"] = 128;
  const ModelConfig c = ModelConfig::from_json(j, "nemo/config.json");
  EXPECT_EQ(c.sliding_window, 4096);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.hidden_size, 5120);
}

TEST(ModelConfig, Qwen25_7B) {
  const ModelConfig c = parse(kQwen25_7B);
  EXPECT_EQ(c.model_type, "qwen2");
  EXPECT_EQ(c.architecture, "Qwen2ForCausalLM");
  EXPECT_EQ(c.vocab_size, 152064);
  EXPECT_EQ(c.hidden_size, 3584);
  EXPECT_EQ(c.n_layer, 28);
  EXPECT_EQ(c.n_head, 28);
  EXPECT_EQ(c.n_head_kv, 4);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_TRUE(c.attention_bias);  // q/k/v bias, always on for qwen2
  EXPECT_FALSE(c.o_proj_bias);
  EXPECT_FALSE(c.mlp_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_FALSE(c.sliding_window.has_value());  // use_sliding_window: false
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.rope.type, RopeType::Default);
  EXPECT_DOUBLE_EQ(c.rope.theta, 1e6);
  EXPECT_THAT(c.eos_token_ids, ElementsAre(151643));
}

TEST(ModelConfig, Qwen2UseSlidingWindowRecordsWindow) {
  json j = json::parse(kQwen25_7B);
  j["use_sliding_window"] = true;
  j["sliding_window"] = 32768;
  EXPECT_EQ(ModelConfig::from_json(j, "q/config.json").sliding_window, 32768);
}

TEST(ModelConfig, Qwen2TiedSmallModel) {
  // Qwen2.5-0.5B ties the LM head to the embeddings and says so.
  json j = json::parse(kQwen25_7B);
  j["tie_word_embeddings"] = true;
  EXPECT_TRUE(ModelConfig::from_json(j, "q/config.json").tie_word_embeddings);
}

TEST(ModelConfig, Qwen3_8B) {
  const ModelConfig c = parse(kQwen3_8B);
  EXPECT_EQ(c.model_type, "qwen3");
  EXPECT_EQ(c.architecture, "Qwen3ForCausalLM");
  EXPECT_EQ(c.vocab_size, 151936);
  EXPECT_EQ(c.hidden_size, 4096);
  EXPECT_EQ(c.intermediate_size, 12288);
  EXPECT_EQ(c.n_layer, 36);
  EXPECT_EQ(c.n_head, 32);
  EXPECT_EQ(c.n_head_kv, 8);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.max_position_embeddings, 40960);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_FALSE(c.o_proj_bias);
  EXPECT_FALSE(c.sliding_window.has_value());
  EXPECT_EQ(c.rope.type, RopeType::Default);
  EXPECT_DOUBLE_EQ(c.rope.theta, 1e6);  // written as the integer 1000000
  EXPECT_EQ(c.bos_token_id, 151643);
  EXPECT_THAT(c.eos_token_ids, ElementsAre(151645));
}

TEST(ModelConfig, Qwen3HeadDimDiffersFromHiddenOverHeadsAndBiasFlag) {
  // Qwen3-0.6B: hidden 1024, 16 heads, head_dim 128 (not 64); tied; a bias variant.
  json j = json::parse(kQwen3_8B);
  j["hidden_size"] = 1024;
  j["num_attention_heads"] = 16;
  j["tie_word_embeddings"] = true;
  j["attention_bias"] = true;
  const ModelConfig c = ModelConfig::from_json(j, "q3/config.json");
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_TRUE(c.attention_bias);
  EXPECT_TRUE(c.o_proj_bias);  // qwen3's flag covers o_proj too
}

TEST(ModelConfig, LlamaBiasFlags) {
  json j = json::parse(kLlama31_8B);
  j["attention_bias"] = true;
  j["mlp_bias"] = true;
  const ModelConfig c = ModelConfig::from_json(j, "l/config.json");
  EXPECT_TRUE(c.attention_bias);
  EXPECT_TRUE(c.o_proj_bias);
  EXPECT_TRUE(c.mlp_bias);
}

TEST(ModelConfig, DefaultsWhenFieldsAreAbsentOrNull) {
  const ModelConfig c = parse(R"json({
    "model_type": "llama", "vocab_size": 256, "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": null, "head_dim": null
  })json");
  EXPECT_EQ(c.architecture, "LlamaForCausalLM");  // filled from model_type
  EXPECT_EQ(c.n_head_kv, 4);                       // defaults to n_head
  EXPECT_EQ(c.head_dim, 16);                       // null -> hidden / n_head
  EXPECT_EQ(c.max_position_embeddings, 2048);      // LlamaConfig default
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.hidden_act, "silu");
  EXPECT_EQ(c.bos_token_id, 1);                    // LlamaConfig defaults
  EXPECT_THAT(c.eos_token_ids, ElementsAre(2));
  EXPECT_EQ(c.rope.type, RopeType::Default);
  EXPECT_DOUBLE_EQ(c.rope.theta, 10000.0);
}

// An absent field takes the transformers config class default, which is not always the
// derived value: Qwen3Config.head_dim = 128, Qwen2/3 num_key_value_heads = 32, Mistral 8,
// MistralConfig.sliding_window = 4096. An explicit null derives it instead.
TEST(ModelConfig, PerTypeDefaultsMirrorTransformers) {
  json q3 = json::parse(kQwen3_8B);
  q3.erase("head_dim");
  q3.erase("num_key_value_heads");
  q3.erase("bos_token_id");
  q3.erase("eos_token_id");
  ModelConfig c = ModelConfig::from_json(q3, "q3/config.json");
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.n_head_kv, 32);
  EXPECT_FALSE(c.bos_token_id.has_value());
  EXPECT_TRUE(c.eos_token_ids.empty());
  q3["head_dim"] = nullptr;
  q3["hidden_size"] = 2048;
  q3["num_key_value_heads"] = nullptr;
  c = ModelConfig::from_json(q3, "q3/config.json");
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.n_head_kv, 32);  // null -> num_attention_heads

  json q2 = json::parse(kQwen25_7B);
  q2.erase("sliding_window");
  q2["use_sliding_window"] = true;
  EXPECT_EQ(ModelConfig::from_json(q2, "q2/config.json").sliding_window, 4096);

  json m = json::parse(kMistral7B_v03);
  m.erase("sliding_window");
  m.erase("num_key_value_heads");
  c = ModelConfig::from_json(m, "m/config.json");
  EXPECT_EQ(c.sliding_window, 4096);
  EXPECT_EQ(c.n_head_kv, 8);
}

TEST(ModelConfig, TopLevelPartialRotaryFactorFillsIn) {
  json j = json::parse(kQwen3_8B);
  j["partial_rotary_factor"] = 0.5;
  EXPECT_DOUBLE_EQ(ModelConfig::from_json(j, "m/config.json").rope.partial_rotary_factor, 0.5);
  j["rope_scaling"] = {{"rope_type", "default"}, {"partial_rotary_factor", 0.25}};
  EXPECT_DOUBLE_EQ(ModelConfig::from_json(j, "m/config.json").rope.partial_rotary_factor, 0.25);
}

TEST(ModelConfig, ModelTypeInferredFromArchitectures) {
  json j = json::parse(kQwen3_8B);
  j.erase("model_type");
  EXPECT_EQ(ModelConfig::from_json(j, "x/config.json").model_type, "qwen3");
}

// ---------------------------------------------------------------- RoPE forms ----

TEST(ModelConfig, RopeScalingWithOldTypeKey) {
  json j = json::parse(kMistral7B_v03);
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  const ModelConfig c = ModelConfig::from_json(j, "m/config.json");
  EXPECT_EQ(c.rope.type, RopeType::Linear);
  EXPECT_DOUBLE_EQ(c.rope.factor, 2.0);
  EXPECT_DOUBLE_EQ(c.rope.theta, 1e6);  // top-level rope_theta
}

TEST(ModelConfig, RopeScalingDynamic) {
  json j = json::parse(kLlama31_8B);
  j["rope_scaling"] = {{"rope_type", "dynamic"}, {"factor", 2.0}};
  const ModelConfig c = ModelConfig::from_json(j, "m/config.json");
  EXPECT_EQ(c.rope.type, RopeType::DynamicNtk);
  EXPECT_DOUBLE_EQ(c.rope.factor, 2.0);
}

TEST(ModelConfig, RopeScalingYarnQwenStyle) {
  // Qwen2.5 long-context recipe: factor 4 over 32768 original positions.
  json j = json::parse(kQwen25_7B);
  j["max_position_embeddings"] = 32768;
  j["rope_scaling"] = {{"factor", 4.0}, {"original_max_position_embeddings", 32768}, {"type", "yarn"}};
  const ModelConfig c = ModelConfig::from_json(j, "m/config.json");
  EXPECT_EQ(c.rope.type, RopeType::Yarn);
  EXPECT_DOUBLE_EQ(c.rope.factor, 4.0);
  EXPECT_EQ(c.rope.original_max_position_embeddings, 32768);
  EXPECT_DOUBLE_EQ(c.rope.beta_fast, 32.0);
  EXPECT_DOUBLE_EQ(c.rope.beta_slow, 1.0);
  EXPECT_DOUBLE_EQ(c.rope.mscale, 0.0);
  EXPECT_FALSE(c.rope.attention_factor.has_value());
  EXPECT_TRUE(c.rope.truncate);
}

TEST(ModelConfig, RopeParametersYarnAllKeys) {
  json j = json::parse(kLlama31_8B_v5);
  j["rope_parameters"] = {{"rope_type", "yarn"},       {"rope_theta", 10000.0}, {"factor", 40.0},
                          {"beta_fast", 16},           {"beta_slow", 2},        {"mscale", 0.707},
                          {"mscale_all_dim", 0.707},   {"truncate", false},     {"attention_factor", 1.25},
                          {"original_max_position_embeddings", 4096}, {"partial_rotary_factor", 0.5}};
  const ModelConfig c = ModelConfig::from_json(j, "m/config.json");
  EXPECT_EQ(c.rope.type, RopeType::Yarn);
  EXPECT_DOUBLE_EQ(c.rope.theta, 10000.0);
  EXPECT_DOUBLE_EQ(c.rope.factor, 40.0);
  EXPECT_DOUBLE_EQ(c.rope.beta_fast, 16.0);
  EXPECT_DOUBLE_EQ(c.rope.beta_slow, 2.0);
  EXPECT_DOUBLE_EQ(c.rope.mscale, 0.707);
  EXPECT_DOUBLE_EQ(c.rope.mscale_all_dim, 0.707);
  EXPECT_FALSE(c.rope.truncate);
  EXPECT_EQ(c.rope.attention_factor, 1.25);
  EXPECT_EQ(c.rope.original_max_position_embeddings, 4096);
  EXPECT_DOUBLE_EQ(c.rope.partial_rotary_factor, 0.5);
}

TEST(ModelConfig, RopeParametersDefaultThetaInside) {
  json j = json::parse(kQwen3_8B);
  j.erase("rope_theta");
  j.erase("rope_scaling");
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1000000.0}};
  const ModelConfig c = ModelConfig::from_json(j, "m/config.json");
  EXPECT_EQ(c.rope.type, RopeType::Default);
  EXPECT_DOUBLE_EQ(c.rope.theta, 1e6);
}

TEST(ModelConfig, RopeScalingWinsOverRopeParameters) {
  // transformers v5: rope_parameters = rope_scaling or rope_parameters.
  json j = json::parse(kLlama31_8B);
  j["rope_parameters"] = {{"rope_type", "linear"}, {"factor", 2.0}};
  EXPECT_EQ(ModelConfig::from_json(j, "m/config.json").rope.type, RopeType::Llama3);
}

TEST(ModelConfig, YarnWithoutOriginalUsesMaxPositions) {
  json j = json::parse(kMistral7B_v03);
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 2.0}};
  EXPECT_EQ(ModelConfig::from_json(j, "m/config.json").rope.original_max_position_embeddings, 32768);
}

// ---------------------------------------------------------------- errors ----

TEST(ModelConfigErrors, UnknownModelTypeIsNamedWithTheSupportedList) {
  json j = json::parse(kLlama31_8B);
  j["model_type"] = "gpt_neox";
  EXPECT_THAT(error_of(j), AllOf(HasSubstr("m/config.json"), HasSubstr("'gpt_neox'"),
                                 HasSubstr("llama, mistral, qwen2, qwen3, deepseek_v2, deepseek_v3")));
}

TEST(ModelConfigErrors, UnknownArchitectureIsNamedWithTheSupportedList) {
  json j = json::parse(kLlama31_8B);
  j["architectures"] = {"GPTNeoXForCausalLM"};
  EXPECT_THAT(error_of(j), AllOf(HasSubstr("m/config.json"), HasSubstr("'GPTNeoXForCausalLM'"),
                                 HasSubstr("LlamaForCausalLM, MistralForCausalLM")));
}

TEST(ModelConfigErrors, NoModelTypeNorArchitecture) {
  json j = json::parse(kLlama31_8B);
  j.erase("model_type");
  j.erase("architectures");
  EXPECT_THAT(error_of(j), AllOf(HasSubstr("m/config.json"), HasSubstr("'model_type'"), HasSubstr("missing")));
}

TEST(ModelConfigErrors, MissingRequiredFields) {
  for (const char* field :
       {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads"}) {
    json j = json::parse(kQwen3_8B);
    j.erase(field);
    EXPECT_THAT(error_of(j), AllOf(HasSubstr("m/config.json"), HasSubstr(std::string("'") + field + "'"),
                                   HasSubstr("missing")))
        << field;
  }
}

TEST(ModelConfigErrors, WrongTypes) {
  struct Case {
    const char* field;
    json value;
    const char* expected;
  };
  const Case cases[] = {
      {"hidden_size", "4096", "must be an integer"},
      {"num_key_value_heads", 8.5, "must be an integer"},
      {"head_dim", true, "must be an integer"},
      {"rms_norm_eps", "1e-6", "must be a number"},
      {"rope_theta", json::array({1}), "must be a number"},
      {"tie_word_embeddings", "false", "must be true or false"},
      {"attention_bias", 0, "must be true or false"},
      {"model_type", 3, "must be a string"},
      {"architectures", "Qwen3ForCausalLM", "must be a list"},
      {"eos_token_id", "</s>", "must be an integer"},
  };
  for (const Case& c : cases) {
    json j = json::parse(kQwen3_8B);
    j[c.field] = c.value;
    EXPECT_THAT(error_of(j), AllOf(HasSubstr("m/config.json"), HasSubstr(std::string("'") + c.field + "'"),
                                   HasSubstr(c.expected)))
        << c.field;
  }
}

TEST(ModelConfigErrors, WrongTypeInsideEosList) {
  json j = json::parse(kQwen3_8B);
  j["eos_token_id"] = {151645, "x"};
  EXPECT_THAT(error_of(j), AllOf(HasSubstr("m/config.json"), HasSubstr("'eos_token_id[1]'")));
}

TEST(ModelConfigErrors, WrongTypeInsideRopeObjectNamesThePath) {
  json j = json::parse(kLlama31_8B);
  j["rope_scaling"]["factor"] = "8";
  EXPECT_THAT(error_of(j), AllOf(HasSubstr("m/config.json: rope_scaling"), HasSubstr("'factor'"),
                                 HasSubstr("must be a number")));
  json k = json::parse(kLlama31_8B_v5);
  k["rope_parameters"] = "llama3";
  EXPECT_THAT(error_of(k), AllOf(HasSubstr("m/config.json: rope_parameters"), HasSubstr("object")));
}

TEST(ModelConfigErrors, MissingRopeFieldNamesIt) {
  json j = json::parse(kLlama31_8B);
  j["rope_scaling"].erase("low_freq_factor");
  EXPECT_THAT(error_of(j), AllOf(HasSubstr("m/config.json: rope_scaling"), HasSubstr("'low_freq_factor'"),
                                 HasSubstr("missing")));
  json k = json::parse(kMistral7B_v03);
  k["rope_scaling"] = {{"type", "linear"}};
  EXPECT_THAT(error_of(k), AllOf(HasSubstr("rope_scaling"), HasSubstr("'factor'"), HasSubstr("missing")));
}

TEST(ModelConfigErrors, UnsupportedRopeTypeIsNamed) {
  json j = json::parse(kLlama31_8B);
  j["rope_scaling"] = {{"rope_type", "longrope"}, {"short_factor", {1.0}}, {"long_factor", {1.0}}};
  EXPECT_THAT(error_of(j), AllOf(HasSubstr("m/config.json: rope_scaling"), HasSubstr("'longrope'"),
                                 HasSubstr("default, linear, dynamic, yarn, llama3")));
  json k = json::parse(kLlama31_8B_v5);
  k["rope_parameters"]["rope_type"] = "mrope";
  EXPECT_THAT(error_of(k), AllOf(HasSubstr("rope_parameters"), HasSubstr("'mrope'")));
}

TEST(ModelConfigErrors, InconsistentHeadCounts) {
  json j = json::parse(kQwen3_8B);
  j["num_key_value_heads"] = 5;
  EXPECT_THAT(error_of(j), AllOf(HasSubstr("num_attention_heads"), HasSubstr("num_key_value_heads")));
  json k = json::parse(kMistral7B_v03);
  k["num_attention_heads"] = 24;  // 4096 / 24 is not an integer and there is no head_dim
  k["num_key_value_heads"] = 8;
  EXPECT_THAT(error_of(k), HasSubstr("head_dim"));
  json z = json::parse(kMistral7B_v03);
  z["hidden_size"] = 0;
  EXPECT_THAT(error_of(z), AllOf(HasSubstr("'hidden_size'"), HasSubstr("> 0")));
}

TEST(ModelConfigErrors, TopLevelNotAnObject) {
  EXPECT_THAT(error_of(json::array()), AllOf(HasSubstr("m/config.json"), HasSubstr("object")));
}

// ---------------------------------------------------------------- load ----

class ModelConfigLoad : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("latentserve_model_config_" + std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void write(const std::string& text) { std::ofstream(dir_ / "config.json") << text; }
  std::filesystem::path dir_;
};

TEST_F(ModelConfigLoad, ReadsConfigJsonFromTheDirectory) {
  write(kQwen3_8B);
  const ModelConfig c = ModelConfig::load(dir_);
  EXPECT_EQ(c.model_type, "qwen3");
  EXPECT_EQ(ModelConfig::load(dir_ / "config.json").head_dim, 128);  // the file itself also works
}

TEST_F(ModelConfigLoad, ErrorsNameTheFile) {
  const std::string path = (dir_ / "config.json").string();
  try {
    ModelConfig::load(dir_);
    ADD_FAILURE() << "no error for a missing config.json";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr(path));
  }
  write("{\"model_type\": \"llama\",");
  try {
    ModelConfig::load(dir_);
    ADD_FAILURE() << "no error for truncated JSON";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr(path), HasSubstr("invalid JSON")));
  }
  write(R"({"model_type": "llama", "vocab_size": 10})");
  try {
    ModelConfig::load(dir_);
    ADD_FAILURE() << "no error for a missing field";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr(path), HasSubstr("'hidden_size'")));
  }
}

}  // namespace
}  // namespace latentserve
