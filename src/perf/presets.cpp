#include "perf/presets.h"

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace latentserve::perf {

namespace {

ModelShape llama(const char* name, const char* source, int64_t layers, int64_t hidden, int64_t intermediate,
                 int64_t vocab, int64_t n_head, int64_t n_kv, int64_t head_dim, bool tied) {
  ModelShape m;
  m.name = name;
  m.source = source;
  m.n_layer = layers;
  m.hidden_size = hidden;
  m.intermediate_size = intermediate;
  m.vocab_size = vocab;
  m.tie_word_embeddings = tied;
  m.attention = AttentionSpec::standard(n_head, n_kv, head_dim, head_dim);
  return m;
}

// DeepSeek MLA: qk_nope_head_dim 128, qk_rope_head_dim 64, v_head_dim 128, kv_lora_rank 512
// in every published DeepSeek-V2/V3 config.
ModelShape deepseek(const char* name, const char* source, int64_t layers, int64_t hidden, int64_t intermediate,
                    int64_t vocab, int64_t n_head, int64_t q_lora_rank, MoeShape moe) {
  ModelShape m;
  m.name = name;
  m.source = source;
  m.n_layer = layers;
  m.hidden_size = hidden;
  m.intermediate_size = intermediate;
  m.vocab_size = vocab;
  m.attention = AttentionSpec::latent(n_head, 512, 128, 64, 128);
  m.q_lora_rank = q_lora_rank;
  m.moe = moe;
  return m;
}

std::vector<ModelShape> all_presets() {
  std::vector<ModelShape> p;
  p.push_back(llama("llama2-7b", "meta-llama/Llama-2-7b-hf config.json (MHA: 32 KV heads)", 32, 4096, 11008, 32000,
                    32, 32, 128, false));
  // Published Llama 2 70B is GQA-8 (num_key_value_heads 8); the MHA and MQA variants of
  // that backbone are the counterfactuals the KV analysis compares.
  p.push_back(llama("llama2-70b", "meta-llama/Llama-2-70b-hf config.json (GQA: 8 KV heads)", 80, 8192, 28672, 32000,
                    64, 8, 128, false));
  p.push_back(llama("llama-70b-mha", "Llama 2 70B backbone with 64 KV heads (MHA variant, not a released model)",
                    80, 8192, 28672, 32000, 64, 64, 128, false));
  p.push_back(llama("llama-70b-mqa", "Llama 2 70B backbone with 1 KV head (MQA variant, not a released model)", 80,
                    8192, 28672, 32000, 64, 1, 128, false));
  p.push_back(llama("llama3-70b", "meta-llama/Meta-Llama-3-70B config.json", 80, 8192, 28672, 128256, 64, 8, 128,
                    false));
  p.push_back(llama("llama3-8b", "meta-llama/Meta-Llama-3-8B config.json", 32, 4096, 14336, 128256, 32, 8, 128,
                    false));
  p.push_back(llama("llama-3.2-1b", "meta-llama/Llama-3.2-1B config.json", 16, 2048, 8192, 128256, 32, 8, 64, true));
  // Small enough that the CPU engine decodes it at 8K context in well under a second.
  p.push_back(llama("tiny-bench", "latentserve's CPU benchmark backbone (not a released model)", 8, 1024, 4096, 32000,
                    16, 16, 64, false));
  p.push_back(deepseek("deepseek-v2", "deepseek-ai/DeepSeek-V2 config.json", 60, 5120, 12288, 102400, 128, 1536,
                       {160, 2, 6, 1536, 1}));
  p.push_back(deepseek("deepseek-v3",
                       "deepseek-ai/DeepSeek-V3 config.json (MTP module excluded; weights fp8 e4m3 as released, "
                       "block scales not counted)",
                       61, 7168, 18432, 129280, 128, 1536, {256, 1, 8, 2048, 3}));
  p.back().weight_dtype = DType::F8_E4M3;
  p.push_back(deepseek("deepseek-v2-lite", "deepseek-ai/DeepSeek-V2-Lite config.json", 27, 2048, 10944, 102400, 16,
                       0, {64, 2, 6, 1408, 1}));
  return p;
}

}  // namespace

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (const auto& p : all_presets()) names.push_back(p.name);
  return names;
}

ModelShape model_preset(const std::string& name, const std::string& flag) {
  for (auto& p : all_presets())
    if (p.name == name) return p;
  std::string list;
  for (const auto& n : preset_names()) list += (list.empty() ? "" : ", ") + n;
  fail("{}: unknown preset '{}', expected one of {}", flag, name, list);
}

std::string preset_config_json(const ModelShape& m) {
  if (m.moe.enabled()) fail("{}: MoE shapes have no synthetic config yet (bench the dense backbone)", m.name);
  if (m.attention.kind == AttentionKind::MLA) {  // a dense DeepSeek-V2 (every layer an MLP)
    const AttentionSpec& a = m.attention;
    const nlohmann::json j = {
        {"architectures", {"DeepseekV2ForCausalLM"}}, {"model_type", "deepseek_v2"},
        {"vocab_size", m.vocab_size}, {"hidden_size", m.hidden_size},
        {"intermediate_size", m.intermediate_size}, {"num_hidden_layers", m.n_layer},
        {"num_attention_heads", a.n_head}, {"num_key_value_heads", a.n_head},
        {"kv_lora_rank", a.kv_lora_rank}, {"q_lora_rank", m.q_lora_rank > 0 ? nlohmann::json(m.q_lora_rank) : nlohmann::json()},
        {"qk_nope_head_dim", a.head_dim_qk - a.qk_rope_head_dim}, {"qk_rope_head_dim", a.qk_rope_head_dim},
        {"v_head_dim", a.head_dim_v}, {"n_routed_experts", nullptr}, {"first_k_dense_replace", m.n_layer},
        {"max_position_embeddings", 131072}, {"rms_norm_eps", 1e-6}, {"tie_word_embeddings", m.tie_word_embeddings},
        {"hidden_act", "silu"}, {"rope_theta", 10000.0}, {"bos_token_id", 1}, {"eos_token_id", 2},
        {"torch_dtype", "bfloat16"}};
    return j.dump();
  }
  const nlohmann::json j = {
      {"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"},
      {"vocab_size", m.vocab_size}, {"hidden_size", m.hidden_size},
      {"intermediate_size", m.intermediate_size}, {"num_hidden_layers", m.n_layer},
      {"num_attention_heads", m.attention.n_head}, {"num_key_value_heads", m.attention.n_head_kv},
      {"head_dim", m.attention.head_dim_qk}, {"max_position_embeddings", 131072},
      {"rms_norm_eps", 1e-5}, {"tie_word_embeddings", m.tie_word_embeddings},
      {"hidden_act", "silu"}, {"rope_theta", 500000.0}, {"bos_token_id", 1}, {"eos_token_id", 2},
      {"torch_dtype", "bfloat16"}};
  return j.dump();
}

}  // namespace latentserve::perf
