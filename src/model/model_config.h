#pragma once
// ModelConfig: what config.json says, normalised across architectures.
// A field that config.json leaves out takes the default of the transformers (v5) config class
// of that model_type (e.g. Qwen3 head_dim 128, Mistral sliding_window 4096); one written as
// null is derived (head_dim = hidden_size / n_head, n_head_kv = n_head, no sliding window).
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/rope_config.h"

namespace latentserve {

struct ModelConfig {
  std::string architecture;  // "LlamaForCausalLM", ...
  std::string model_type;    // "llama", "mistral", "qwen2", "qwen3"
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t n_layer = 0;             // num_hidden_layers
  int64_t n_head = 0;              // num_attention_heads
  int64_t n_head_kv = 0;           // num_key_value_heads (null -> n_head)
  int64_t head_dim = 0;            // head_dim override, else hidden_size / n_head
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  bool tie_word_embeddings = false;
  bool attention_bias = false;     // q/k/v projections carry a bias (qwen2; llama's attention_bias)
  bool o_proj_bias = false;        // llama's attention_bias also covers o_proj
  bool mlp_bias = false;           // llama's mlp_bias
  bool qk_norm = false;            // per-head RMSNorm on q and k before RoPE (qwen3)
  std::optional<int64_t> sliding_window;  // recorded; the CPU path rejects configs that need it
  std::string hidden_act = "silu";
  std::string torch_dtype;         // "dtype" (v5) or "torch_dtype": "bfloat16", ... (informational)
  std::optional<int64_t> bos_token_id;
  std::vector<int64_t> eos_token_ids;
  RopeConfig rope;                 // from rope_scaling, else rope_parameters

  // Parses config.json; errors name the file and the field. load() takes the model directory
  // (or the config.json path itself).
  static ModelConfig from_json(const nlohmann::json& json, const std::string& source_name);
  static ModelConfig load(const std::filesystem::path& model_dir);
};

}  // namespace latentserve
