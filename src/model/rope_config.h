#pragma once
// Rotary position embedding parameters, read from `rope_scaling` (older configs) or
// `rope_parameters` (newer transformers), and the inverse frequencies they imply,
// computed exactly as transformers' ROPE_INIT_FUNCTIONS do (float32 where torch uses
// float32, see rope_config.cpp).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace latentserve {

enum class RopeType { Default, Linear, Llama3, Yarn, DynamicNtk };

// The transformers spelling: "default", "linear", "llama3", "yarn", "dynamic".
std::string_view rope_type_name(RopeType type);

struct RopeConfig {
  RopeType type = RopeType::Default;
  double theta = 10000.0;               // rope_theta
  double partial_rotary_factor = 1.0;   // rotary_dim = int(head_dim * factor)
  bool interleaved = false;             // pairs (2i, 2i+1) instead of (i, i + d/2)
  double factor = 1.0;                  // linear, llama3, yarn, dynamic
  // llama3, yarn (both default to max_position_embeddings when the config omits it)
  int64_t original_max_position_embeddings = 0;
  // llama3
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  // yarn
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double mscale = 0.0;          // 0 = absent
  double mscale_all_dim = 0.0;  // 0 = absent
  std::optional<double> attention_factor;  // explicit override when the config gives one
  bool truncate = true;         // yarn: round the correction range (transformers' default)

  // Parses a `rope_scaling` / `rope_parameters` object (may be null) plus rope_theta
  // (the top-level value; a "rope_theta" inside the object wins, as in transformers v5).
  // `field` names where it came from, e.g. "/m/config.json: rope_scaling"; errors name it.
  static RopeConfig from_json(const nlohmann::json& rope_object, double rope_theta,
                              const std::string& field, int64_t max_position_embeddings);
};

// What a forward pass needs: inv_freq for each rotated pair and the scale applied to
// cos/sin (yarn's attention_factor; 1 otherwise).
struct RopeTables {
  int64_t rotary_dim = 0;
  std::vector<float> inv_freq;  // [rotary_dim / 2]
  float attention_factor = 1.0f;
};

// head_dim: the per-head dimension rotated (before partial_rotary_factor).
// seq_len: the longest sequence this step sees (dynamic NTK grows with it; others ignore it).
RopeTables compute_rope_tables(const RopeConfig& rope, int64_t head_dim, int64_t max_position_embeddings,
                               int64_t seq_len);

// Typed access to config.json fields, shared by ModelConfig and RopeConfig. `owner` names
// the file (and object) for errors: "FILE: field 'KEY' must be an integer, found string".
// Absent keys and JSON null read as nullopt.
namespace config_field {
std::optional<int64_t> integer(const nlohmann::json& object, const std::string& key, const std::string& owner);
std::optional<double> number(const nlohmann::json& object, const std::string& key, const std::string& owner);
std::optional<bool> boolean(const nlohmann::json& object, const std::string& key, const std::string& owner);
std::optional<std::string> string(const nlohmann::json& object, const std::string& key, const std::string& owner);
// Throws "FILE: required field 'KEY' is missing" when absent or null.
int64_t required_integer(const nlohmann::json& object, const std::string& key, const std::string& owner);
double required_number(const nlohmann::json& object, const std::string& key, const std::string& owner);
}  // namespace config_field

}  // namespace latentserve
