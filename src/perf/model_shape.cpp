#include "perf/model_shape.h"

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/model_config.h"

namespace latentserve::perf {

namespace {

int64_t attention_params_per_layer(const ModelShape& m) {
  const AttentionSpec& a = m.attention;
  const int64_t H = m.hidden_size;
  if (a.kind != AttentionKind::MLA) {
    // q [H -> n_head*d_qk], k [H -> n_kv*d_qk], v [H -> n_kv*d_v], o [n_head*d_v -> H]
    return H * a.n_head * a.head_dim_qk + H * a.n_head_kv * (a.head_dim_qk + a.head_dim_v) +
           a.n_head * a.head_dim_v * H;
  }
  const int64_t nope = a.head_dim_qk - a.qk_rope_head_dim;
  const int64_t q = m.q_lora_rank > 0
                        ? H * m.q_lora_rank + m.q_lora_rank + m.q_lora_rank * a.n_head * a.head_dim_qk  // q_a, norm, q_b
                        : H * a.n_head * a.head_dim_qk;                                               // q_proj
  const int64_t kv_a = H * (a.kv_lora_rank + a.qk_rope_head_dim) + a.kv_lora_rank;  // kv_a_proj_with_mqa + norm
  const int64_t kv_b = a.kv_lora_rank * a.n_head * (nope + a.head_dim_v);            // W_UK and W_UV
  const int64_t o = a.n_head * a.head_dim_v * H;
  return q + kv_a + kv_b + o;
}

int64_t mlp_params(int64_t hidden, int64_t intermediate) { return 3 * hidden * intermediate; }  // gate, up, down

int64_t get_int(const nlohmann::json& j, const char* key, const std::string& file) {
  if (!j.contains(key) || !j[key].is_number_integer()) fail("{}: field '{}' must be an integer", file, key);
  return j[key].get<int64_t>();
}

DType dtype_from_torch(const std::string& torch_dtype) {
  if (torch_dtype == "float32") return DType::F32;
  if (torch_dtype == "float16") return DType::F16;
  return DType::BF16;  // bfloat16, or unstated: the serving default
}

}  // namespace

ParamCounts count_params(const ModelShape& m) {
  ParamCounts p;
  const int64_t H = m.hidden_size;
  p.attention_per_layer = attention_params_per_layer(m);
  p.embedding = m.vocab_size * H;
  p.lm_head = m.vocab_size * H;
  const int64_t norms_per_layer = 2 * H;
  int64_t total = 0, active = 0;
  for (int64_t layer = 0; layer < m.n_layer; ++layer) {
    int64_t layer_total = p.attention_per_layer + norms_per_layer, layer_active = layer_total;
    if (!m.moe.enabled() || layer < m.moe.first_k_dense_layers) {
      layer_total += mlp_params(H, m.intermediate_size);
      layer_active += mlp_params(H, m.intermediate_size);
    } else {
      const int64_t expert = mlp_params(H, m.moe.moe_intermediate_size), router = m.moe.n_routed_experts * H;
      layer_total += (m.moe.n_routed_experts + m.moe.n_shared_experts) * expert + router;
      layer_active += (m.moe.n_experts_per_token + m.moe.n_shared_experts) * expert + router;
    }
    total += layer_total;
    active += layer_active;
  }
  p.total = total + p.embedding + (m.tie_word_embeddings ? 0 : p.lm_head) + H;  // + final norm
  p.active_per_token = active + p.lm_head + H;
  return p;
}

double expected_experts_touched(const MoeShape& moe, double batch_tokens) {
  if (!moe.enabled()) return 0;
  const double E = double(moe.n_routed_experts), k = double(moe.n_experts_per_token);
  return E * (1.0 - std::pow(1.0 - k / E, batch_tokens));
}

double params_read_per_step(const ModelShape& m, double batch_tokens) {
  const ParamCounts p = count_params(m);
  if (!m.moe.enabled()) return double(p.active_per_token);
  const double expert = double(mlp_params(m.hidden_size, m.moe.moe_intermediate_size));
  const double n_moe_layers = double(m.n_layer - m.moe.first_k_dense_layers);
  // active_per_token counts k routed experts per MoE layer; a batch touches more.
  const double extra = expected_experts_touched(m.moe, batch_tokens) - double(m.moe.n_experts_per_token);
  return double(p.active_per_token) + n_moe_layers * extra * expert;
}

std::string attention_label(const AttentionSpec& a) {
  switch (a.kind) {
    case AttentionKind::MHA: return "mha";
    case AttentionKind::MQA: return "mqa";
    case AttentionKind::MLA: return "mla";
    case AttentionKind::GQA: return "gqa" + std::to_string(a.n_head_kv);
  }
  return "?";
}

ModelShape with_attention(const ModelShape& shape, const std::string& kind, const std::string& flag) {
  if (kind == attention_label(shape.attention)) return shape;
  ModelShape m = shape;
  const int64_t n_head = shape.attention.n_head, d = shape.attention.head_dim_v;
  if (kind == "mla") {
    m.attention = AttentionSpec::latent(n_head, 512, d, 64, d);
    if (shape.attention.kind != AttentionKind::MLA) m.q_lora_rank = 0;
  } else {
    int64_t n_kv = 0;
    if (kind == "mha") n_kv = n_head;
    else if (kind == "mqa") n_kv = 1;
    else if (kind.rfind("gqa", 0) == 0 && kind.size() > 3 && kind.find_first_not_of("0123456789", 3) == std::string::npos)
      n_kv = std::stoll(kind.substr(3));
    else fail("{}: unknown attention kind '{}', expected mha, gqaN (N KV heads, e.g. gqa8), mqa or mla", flag, kind);
    if (n_kv <= 0 || n_kv > n_head || n_head % n_kv != 0)
      fail("{}: '{}' needs a KV head count that divides n_head ({}), got {}", flag, kind, n_head, n_kv);
    m.attention = AttentionSpec::standard(n_head, n_kv, d, d);
    m.q_lora_rank = 0;
  }
  if (m.attention.kind != shape.attention.kind || m.attention.n_head_kv != shape.attention.n_head_kv)
    m.name = shape.name + "/" + attention_label(m.attention);
  return m;
}

ModelShape shape_from_model_dir(const std::filesystem::path& model_dir) {
  const std::filesystem::path file =
      std::filesystem::is_directory(model_dir) ? model_dir / "config.json" : model_dir;
  std::ifstream in(file);
  if (!in) fail("--model: cannot read {}", file.string());
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    fail("--model: {} is not valid JSON: {}", file.string(), e.what());
  }
  const std::string model_type = j.value("model_type", "");
  ModelShape m;
  m.name = model_dir.string();
  m.source = file.string();
  if (model_type == "deepseek_v2" || model_type == "deepseek_v3") {
    const std::string f = file.string();
    m.n_layer = get_int(j, "num_hidden_layers", f);
    m.hidden_size = get_int(j, "hidden_size", f);
    m.intermediate_size = get_int(j, "intermediate_size", f);
    m.vocab_size = get_int(j, "vocab_size", f);
    m.tie_word_embeddings = j.value("tie_word_embeddings", false);
    m.q_lora_rank = j.contains("q_lora_rank") && j["q_lora_rank"].is_number_integer() ? j["q_lora_rank"].get<int64_t>() : 0;
    m.attention = AttentionSpec::latent(get_int(j, "num_attention_heads", f), get_int(j, "kv_lora_rank", f),
                                        get_int(j, "qk_nope_head_dim", f), get_int(j, "qk_rope_head_dim", f),
                                        get_int(j, "v_head_dim", f));
    if (j.contains("n_routed_experts") && j["n_routed_experts"].is_number_integer()) {
      m.moe.n_routed_experts = get_int(j, "n_routed_experts", f);
      m.moe.n_shared_experts = j.value("n_shared_experts", int64_t(0));
      m.moe.n_experts_per_token = get_int(j, "num_experts_per_tok", f);
      m.moe.moe_intermediate_size = get_int(j, "moe_intermediate_size", f);
      m.moe.first_k_dense_layers = j.value("first_k_dense_replace", int64_t(0));
    }
    m.weight_dtype = dtype_from_torch(j.value("torch_dtype", j.value("dtype", "bfloat16")));
    return m;
  }
  const ModelConfig c = ModelConfig::from_json(j, file.string());
  m.n_layer = c.n_layer;
  m.hidden_size = c.hidden_size;
  m.intermediate_size = c.intermediate_size;
  m.vocab_size = c.vocab_size;
  m.tie_word_embeddings = c.tie_word_embeddings;
  m.attention = AttentionSpec::standard(c.n_head, c.n_head_kv, c.head_dim, c.head_dim);
  m.weight_dtype = dtype_from_torch(c.torch_dtype);
  return m;
}

}  // namespace latentserve::perf
