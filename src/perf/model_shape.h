#pragma once
// ModelShape: what the performance model needs to know about a transformer: its layer
// count, widths, attention (AttentionSpec, shared with the KV pool) and MoE routing.
// From it come parameter counts: total, active per token, and read per decode step.
// Pure arithmetic; built from a preset (presets.h) or a config.json.
#include <cstdint>
#include <filesystem>
#include <string>

#include "attention/attention_spec.h"
#include "core/dtype.h"

namespace latentserve::perf {

// DeepSeek-style MoE: the first `first_k_dense_layers` layers have a dense MLP of
// intermediate_size; the others route each token to n_experts_per_token of n_routed_experts
// (plus n_shared_experts always on), each expert an MLP of moe_intermediate_size.
struct MoeShape {
  int64_t n_routed_experts = 0;  // 0: a dense model
  int64_t n_shared_experts = 0;
  int64_t n_experts_per_token = 0;
  int64_t moe_intermediate_size = 0;
  int64_t first_k_dense_layers = 0;
  bool enabled() const { return n_routed_experts > 0; }
};

struct ModelShape {
  std::string name;    // preset name or config.json path
  std::string source;  // where the shape came from
  int64_t n_layer = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;  // dense MLP (gate, up, down)
  int64_t vocab_size = 0;
  bool tie_word_embeddings = false;
  AttentionSpec attention;
  int64_t q_lora_rank = 0;  // MLA: 0 when q_proj maps hidden straight to the heads
  MoeShape moe;
  DType weight_dtype = DType::BF16;
};

// Parameter counts (elements). Biases are ignored (a few thousand per layer).
struct ParamCounts {
  int64_t attention_per_layer = 0;
  int64_t embedding = 0;  // the input table: one row per token is read, never the table
  int64_t lm_head = 0;    // vocab x hidden (the embedding table again when tied)
  int64_t total = 0;      // every stored parameter
  int64_t active_per_token = 0;  // the matmul parameters one token uses (MoE: top-k + shared experts)
};
ParamCounts count_params(const ModelShape& shape);

// Matmul parameters one decode step of `batch` tokens reads: everything but the input
// embedding, with MoE experts counted as the expected number of distinct experts the batch
// touches under uniform routing: E * (1 - (1 - k/E)^batch) per MoE layer.
double params_read_per_step(const ModelShape& shape, double batch_tokens);
double expected_experts_touched(const MoeShape& moe, double batch_tokens);

// The same backbone with another attention: "mha", "gqaN" (N KV heads), "mqa", "mla"
// (kv_lora_rank 512, qk_rope_head_dim 64). Head width: head_dim_v of the original (128 for
// DeepSeek, whose MHA-equivalent is 128 wide). Error naming `flag` for an unknown kind or a
// KV head count that does not divide n_head.
ModelShape with_attention(const ModelShape& shape, const std::string& kind, const std::string& flag = "--attention");
// "mha", "gqa8", "mqa", "mla": the short label of a shape's attention.
std::string attention_label(const AttentionSpec& spec);

// config.json of a Hugging Face checkpoint folder: llama-family through ModelConfig,
// deepseek_v2 / deepseek_v3 (MLA + MoE) read here until ModelConfig carries those fields.
ModelShape shape_from_model_dir(const std::filesystem::path& model_dir);

}  // namespace latentserve::perf
