// config.json -> ModelConfig for the Llama family (llama, mistral, qwen2, qwen3) and
// DeepSeek (deepseek_v2, deepseek_v3; their own fields in deepseek_config.cpp).
// Defaults follow the transformers configuration classes of each model type, so a field
// a config.json leaves out means what it means to transformers.
#include "model/model_config.h"

#include <array>
#include <fstream>

#include <cmath>

#include "core/error.h"
#include "model/deepseek_config.h"

namespace latentserve {

using nlohmann::json;
namespace cf = config_field;

namespace {

// What each transformers config class (v5) assumes for a field that config.json leaves
// out. A field written as null means "derive it" (hidden / n_head, n_head, no window).
struct ArchitectureInfo {
  const char* model_type;
  const char* architecture;
  int64_t default_max_position_embeddings;
  std::optional<int64_t> default_n_head_kv;       // nullopt: same as num_attention_heads
  std::optional<int64_t> default_head_dim;        // nullopt: hidden_size / num_attention_heads
  std::optional<int64_t> default_sliding_window;  // when the model uses one and omits the size
  std::optional<int64_t> default_bos_token_id;
  std::optional<int64_t> default_eos_token_id;
};

const std::array<ArchitectureInfo, 6> kArchitectures = {{
    {"llama", "LlamaForCausalLM", 2048, std::nullopt, std::nullopt, std::nullopt, 1, 2},
    {"mistral", "MistralForCausalLM", 4096 * 32, 8, std::nullopt, 4096, 1, 2},
    {"qwen2", "Qwen2ForCausalLM", 32768, 32, std::nullopt, 4096, std::nullopt, std::nullopt},
    {"qwen3", "Qwen3ForCausalLM", 32768, 32, 128, 4096, std::nullopt, std::nullopt},
    // DeepSeek: n_head_kv and head_dim are set by parse_deepseek_config (MLA), not from here.
    {"deepseek_v2", "DeepseekV2ForCausalLM", 2048, std::nullopt, std::nullopt, std::nullopt, 1, 2},
    {"deepseek_v3", "DeepseekV3ForCausalLM", 4096, std::nullopt, std::nullopt, std::nullopt, 0, 1},
}};

// model_type spellings that mean another one: Kimi-K2 ships model_type "kimi_k2" with
// architectures ["DeepseekV3ForCausalLM"] and the DeepSeek-V3 layout.
std::string canonical_model_type(const std::string& model_type) {
  if (model_type == "kimi_k2") return "deepseek_v3";
  return model_type;
}

bool is_deepseek(const std::string& model_type) {
  return model_type == "deepseek_v2" || model_type == "deepseek_v3";
}

// Absent key -> `absent`; null -> nullopt; otherwise the integer.
std::optional<int64_t> integer_or(const json& j, const char* key, std::optional<int64_t> absent,
                                  const std::string& source) {
  if (!j.contains(key)) return absent;
  return cf::integer(j, key, source);
}

std::string supported_model_types() {
  std::string s;
  for (const auto& a : kArchitectures) s += (s.empty() ? "" : ", ") + std::string(a.model_type);
  return s;
}

std::string supported_architectures() {
  std::string s;
  for (const auto& a : kArchitectures) s += (s.empty() ? "" : ", ") + std::string(a.architecture);
  return s;
}

const ArchitectureInfo* find_model_type(const std::string& model_type) {
  for (const auto& a : kArchitectures)
    if (model_type == a.model_type) return &a;
  return nullptr;
}

const ArchitectureInfo* find_architecture(const std::string& architecture) {
  for (const auto& a : kArchitectures)
    if (architecture == a.architecture) return &a;
  return nullptr;
}

int64_t positive(int64_t value, const char* key, const std::string& source) {
  if (value <= 0) fail("{}: field '{}' must be > 0, found {}", source, key, value);
  return value;
}

// "architectures": ["LlamaForCausalLM"] -> "LlamaForCausalLM" (absent/null/empty -> "").
std::string first_architecture(const json& j, const std::string& source) {
  auto it = j.find("architectures");
  if (it == j.end() || it->is_null()) return "";
  if (!it->is_array()) fail("{}: field 'architectures' must be a list of strings, found {}", source, it->type_name());
  if (it->empty()) return "";
  const json& first = (*it)[0];
  if (!first.is_string())
    fail("{}: field 'architectures[0]' must be a string, found {}", source, first.type_name());
  return first.get<std::string>();
}

// eos_token_id: an int, a list of ints, or null.
std::vector<int64_t> parse_eos_token_ids(const json& j, const std::string& source) {
  auto it = j.find("eos_token_id");
  if (it == j.end() || it->is_null()) return {};
  if (!it->is_array()) return {*cf::integer(j, "eos_token_id", source)};
  std::vector<int64_t> ids;
  for (size_t i = 0; i < it->size(); ++i) {
    // Same rules and message as a scalar field, under the name "eos_token_id[i]".
    const std::string key = fmt::format("eos_token_id[{}]", i);
    const auto id = cf::integer(json{{key, (*it)[i]}}, key, source);
    if (!id) fail("{}: field '{}' must be an integer, found null", source, key);
    ids.push_back(*id);
  }
  return ids;
}

}  // namespace

ModelConfig ModelConfig::from_json(const json& j, const std::string& source) {
  if (!j.is_object()) fail("{}: expected a JSON object at the top level, found {}", source, j.type_name());
  ModelConfig c;

  // ---- which architecture ----
  c.architecture = first_architecture(j, source);
  const ArchitectureInfo* arch = nullptr;
  if (auto model_type = cf::string(j, "model_type", source)) {
    arch = find_model_type(canonical_model_type(*model_type));
    if (!arch)
      fail("{}: model_type '{}' is not supported (supported: {})", source, *model_type, supported_model_types());
  }
  if (!c.architecture.empty()) {
    const ArchitectureInfo* by_name = find_architecture(c.architecture);
    if (!by_name)
      fail("{}: architecture '{}' is not supported (supported: {})", source, c.architecture,
           supported_architectures());
    // model_type decides the semantics when both are given (a few fine-tunes pair
    // model_type "llama" with another *ForCausalLM name); architectures fills a gap.
    if (!arch) arch = by_name;
  }
  if (!arch) fail("{}: required field 'model_type' is missing (supported: {})", source, supported_model_types());
  c.model_type = arch->model_type;
  if (c.architecture.empty()) c.architecture = arch->architecture;
  const std::string type = c.model_type;

  // ---- sizes ----
  c.vocab_size = positive(cf::required_integer(j, "vocab_size", source), "vocab_size", source);
  c.hidden_size = positive(cf::required_integer(j, "hidden_size", source), "hidden_size", source);
  c.intermediate_size = positive(cf::required_integer(j, "intermediate_size", source), "intermediate_size", source);
  c.n_layer = positive(cf::required_integer(j, "num_hidden_layers", source), "num_hidden_layers", source);
  c.n_head = positive(cf::required_integer(j, "num_attention_heads", source), "num_attention_heads", source);
  const bool deepseek = is_deepseek(type);
  if (!deepseek) {
    c.n_head_kv = positive(integer_or(j, "num_key_value_heads", arch->default_n_head_kv, source).value_or(c.n_head),
                           "num_key_value_heads", source);
    if (c.n_head % c.n_head_kv != 0)
      fail("{}: num_attention_heads {} is not a multiple of num_key_value_heads {}", source, c.n_head, c.n_head_kv);
  }
  if (deepseek) {
    // n_head_kv and head_dim come from the MLA fields (parse_deepseek_config, below).
  } else if (auto head_dim = integer_or(j, "head_dim", arch->default_head_dim, source)) {
    c.head_dim = positive(*head_dim, "head_dim", source);
  } else {
    if (c.hidden_size % c.n_head != 0)
      fail("{}: hidden_size {} is not a multiple of num_attention_heads {} and no head_dim is given", source,
           c.hidden_size, c.n_head);
    c.head_dim = c.hidden_size / c.n_head;
  }
  c.max_position_embeddings = positive(
      cf::integer(j, "max_position_embeddings", source).value_or(arch->default_max_position_embeddings),
      "max_position_embeddings", source);
  c.rms_norm_eps = cf::number(j, "rms_norm_eps", source).value_or(1e-6);
  c.hidden_act = cf::string(j, "hidden_act", source).value_or("silu");
  // transformers v5 writes "dtype", older versions "torch_dtype".
  c.torch_dtype = cf::string(j, "dtype", source).value_or(cf::string(j, "torch_dtype", source).value_or(""));
  c.tie_word_embeddings = cf::boolean(j, "tie_word_embeddings", source).value_or(false);
  c.bos_token_id = integer_or(j, "bos_token_id", arch->default_bos_token_id, source);
  if (j.contains("eos_token_id")) {
    c.eos_token_ids = parse_eos_token_ids(j, source);
  } else if (arch->default_eos_token_id) {
    c.eos_token_ids = {*arch->default_eos_token_id};
  }

  // ---- per-architecture switches ----
  if (type == "llama") {
    // LlamaAttention: q/k/v/o all take bias=config.attention_bias; LlamaMLP: mlp_bias.
    c.attention_bias = cf::boolean(j, "attention_bias", source).value_or(false);
    c.o_proj_bias = c.attention_bias;
    c.mlp_bias = cf::boolean(j, "mlp_bias", source).value_or(false);
  } else if (type == "mistral") {
    // MistralAttention has no biases. sliding_window: null in v0.2+ configs, 4096 if absent.
    c.sliding_window = integer_or(j, "sliding_window", arch->default_sliding_window, source);
  } else if (type == "qwen2") {
    // Qwen2Attention: q/k/v always biased, o_proj never.
    c.attention_bias = true;
    c.o_proj_bias = false;
  } else if (type == "qwen3") {
    // Qwen3Attention: q/k/v/o take bias=config.attention_bias; q_norm/k_norm over head_dim.
    c.attention_bias = cf::boolean(j, "attention_bias", source).value_or(false);
    c.o_proj_bias = c.attention_bias;
    c.qk_norm = true;
  }
  if (type == "qwen2" || type == "qwen3") {
    // Qwen configs carry sliding_window even when it is off; use_sliding_window decides.
    const auto window = integer_or(j, "sliding_window", arch->default_sliding_window, source);
    if (cf::boolean(j, "use_sliding_window", source).value_or(false)) c.sliding_window = window;
  }
  if (c.sliding_window && *c.sliding_window <= 0)
    fail("{}: field 'sliding_window' must be > 0, found {}", source, *c.sliding_window);

  // ---- RoPE ----
  // transformers v5: rope_parameters = rope_scaling or rope_parameters; rope_theta inside
  // the object wins over the top-level one (default 10000 for all four model types).
  const double rope_theta = cf::number(j, "rope_theta", source).value_or(10000.0);
  const json null_json;
  const char* rope_field = "rope_scaling";
  const json* rope_object = &null_json;
  auto scaling = j.find("rope_scaling");
  auto parameters = j.find("rope_parameters");
  if (scaling != j.end() && !scaling->is_null()) {
    rope_object = &*scaling;
  } else if (parameters != j.end() && !parameters->is_null()) {
    rope_object = &*parameters;
    rope_field = "rope_parameters";
  }
  c.rope = RopeConfig::from_json(*rope_object, rope_theta, source + ": " + rope_field, c.max_position_embeddings);
  // A top-level partial_rotary_factor fills in when the RoPE object has none
  // (convert_rope_params_to_dict: rope_parameters.setdefault("partial_rotary_factor", ...)).
  auto partial = cf::number(j, "partial_rotary_factor", source);
  if (partial && !(rope_object->is_object() && rope_object->contains("partial_rotary_factor"))) {
    if (!(*partial > 0.0 && *partial <= 1.0))
      fail("{}: field 'partial_rotary_factor' must be in (0, 1], found {}", source, *partial);
    c.rope.partial_rotary_factor = *partial;
  }

  if (deepseek) {
    parse_deepseek_config(j, *rope_object, source, c);
  } else {
    // LlamaAttention & co.: self.scaling = self.head_dim**-0.5
    c.softmax_scale = std::pow(double(c.head_dim), -0.5);
  }
  return c;
}

ModelConfig ModelConfig::load(const std::filesystem::path& model_dir) {
  const std::filesystem::path path =
      std::filesystem::is_directory(model_dir) ? model_dir / "config.json" : model_dir;
  std::ifstream in(path);
  if (!in) fail("{}: cannot open (expected a Hugging Face config.json)", path.string());
  json j;
  try {
    j = json::parse(in);
  } catch (const json::parse_error& e) {
    fail("{}: invalid JSON: {}", path.string(), e.what());
  }
  return from_json(j, path.string());
}

}  // namespace latentserve
