#pragma once
// Rotary position embedding parameters, read from `rope_scaling` (older configs) or
// `rope_parameters` (newer transformers), and the inverse frequencies they imply,
// computed exactly as transformers' ROPE_INIT_FUNCTIONS do.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace latentserve {

enum class RopeType { Default, Linear, Llama3, Yarn, DynamicNtk };

struct RopeConfig {
  RopeType type = RopeType::Default;
  double theta = 10000.0;               // rope_theta
  double partial_rotary_factor = 1.0;   // rotary_dim = head_dim * factor
  bool interleaved = false;             // pairs (2i, 2i+1) instead of (i, i + d/2)
  double factor = 1.0;                  // linear, llama3, yarn, dynamic
  // llama3
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 0;
  // yarn
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double mscale = 0.0;          // 0 = absent
  double mscale_all_dim = 0.0;  // 0 = absent
  std::optional<double> attention_factor;  // explicit override when the config gives one
  bool truncate = true;         // yarn: round the correction range (transformers' default)

  // Parses a `rope_scaling` / `rope_parameters` object (may be null) plus rope_theta.
  // `field` names where it came from, for errors.
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

}  // namespace latentserve
