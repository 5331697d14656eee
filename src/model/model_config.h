#pragma once
// ModelConfig: what config.json says, normalised across architectures.
// A field that config.json leaves out takes the default of the transformers (v5) config class
// of that model_type (e.g. Qwen3 head_dim 128, Mistral sliding_window 4096); one written as
// null is derived (head_dim = hidden_size / n_head, n_head_kv = n_head, no sliding window).
// DeepSeek-V2 / V3 (MLA + MoE) add `mla` and `moe`; their parsing and the rules transformers
// 5.17 applies to them are in deepseek_config.cpp.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/rope_config.h"

namespace latentserve {

// Multi-head latent attention (deepseek_v2, deepseek_v3). Per head the query/key is
// [qk_nope_head_dim | qk_rope_head_dim] and the value v_head_dim; the cache holds
// kv_lora_rank + qk_rope_head_dim elements per token per layer.
struct MlaConfig {
  int64_t q_lora_rank = 0;  // 0 = null: plain q_proj; else q_a_proj -> q_a_layernorm -> q_b_proj
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;  // the RoPE'd part; rope tables are built over this width
  int64_t v_head_dim = 0;
};

// How router logits become expert scores: softmax over all experts (deepseek_v2) or an
// independent sigmoid per expert (deepseek_v3).
enum class MoeScoring { Softmax, Sigmoid };
// Greedy: top-k of the scores. GroupLimitedGreedy (v2): keep the topk_group groups with the
// largest per-group max score, top-k inside them. NoauxTc (v3): choice score = score +
// e_score_correction_bias; keep the topk_group groups with the largest sum of their two best
// choice scores, top-k inside them; weights are the *uncorrected* scores of the chosen experts.
enum class MoeTopk { Greedy, GroupLimitedGreedy, NoauxTc };

struct MoeConfig {
  int64_t n_routed_experts = 0;
  int64_t n_shared_experts = 0;       // one shared MLP of width moe_intermediate_size * n_shared_experts
  int64_t num_experts_per_tok = 0;    // top-k
  int64_t moe_intermediate_size = 0;
  int64_t first_k_dense_replace = 0;  // layers [0, k) use the dense MLP of width intermediate_size
  int64_t moe_layer_freq = 1;
  MoeScoring scoring_func = MoeScoring::Softmax;
  MoeTopk topk_method = MoeTopk::Greedy;
  int64_t n_group = 1;
  int64_t topk_group = 1;
  bool norm_topk_prob = false;        // divide the k weights by their sum (+1e-20) before scaling
  double routed_scaling_factor = 1.0; // multiplies the k routing weights (after normalisation)
  // n_routed_experts > 0 && layer >= first_k_dense_replace && layer % moe_layer_freq == 0
  // (the DeepSeek rule; transformers 5.17 tests only layer >= first_k_dense_replace, which is
  // the same for every published config: all have moe_layer_freq 1).
  bool is_moe_layer(int64_t layer) const;
};

struct ModelConfig {
  std::string architecture;  // "LlamaForCausalLM", ...
  std::string model_type;    // "llama", "mistral", "qwen2", "qwen3", "deepseek_v2", "deepseek_v3"
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t n_layer = 0;             // num_hidden_layers
  int64_t n_head = 0;              // num_attention_heads
  int64_t n_head_kv = 0;           // num_key_value_heads (null -> n_head); deepseek: n_head
  int64_t head_dim = 0;            // head_dim override, else hidden_size / n_head;
                                   // deepseek: qk_nope_head_dim + qk_rope_head_dim (the q.k width)
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
  // deepseek only (nullopt for the llama family). n_layer counts only the decoder layers the
  // model runs: checkpoint tensors of layers >= n_layer (V3's MTP layer,
  // num_nextn_predict_layers) are to be skipped by the model, not treated as an error.
  std::optional<MlaConfig> mla;
  std::optional<MoeConfig> moe;
  // The factor multiplying q.k before the softmax, for every model type: head_dim^-0.5 for the
  // llama family; for deepseek (qk_nope + qk_rope)^-0.5 * m^2 with m = 0.1 * mscale_all_dim *
  // ln(factor) + 1 when the RoPE type is not default, mscale_all_dim is non-zero and factor > 1
  // (else m = 1). This is NOT the RoPE attention_factor: transformers also multiplies cos and sin
  // by compute_rope_tables(...).attention_factor (yarn: mscale(factor, mscale) /
  // mscale(factor, mscale_all_dim), 1.0 for the published DeepSeek configs), so q_pe and k_pe
  // each carry it; apply both, each once. See deepseek_config.cpp for the quoted source.
  double softmax_scale = 0;

  // Parses config.json; errors name the file and the field. load() takes the model directory
  // (or the config.json path itself).
  static ModelConfig from_json(const nlohmann::json& json, const std::string& source_name);
  static ModelConfig load(const std::filesystem::path& model_dir);
};

}  // namespace latentserve
