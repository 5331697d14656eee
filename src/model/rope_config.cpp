// RoPE parameters and inverse frequencies, mirroring transformers' modeling_rope_utils.py
// (v5: _compute_{linear_scaling,dynamic_ntk,yarn,llama3}_parameters and the models'
// compute_default_rope_parameters).
//
// Precision. torch builds inv_freq as float32 tensors, so every elementwise step below is
// done in float, in the same order, with Python scalars rounded to float first (that is
// what TensorIterator does with a wrapped scalar). Three torch facts matter:
//   * `1.0 / t` is `t.reciprocal() * 1.0` (Tensor.__rtruediv__), i.e. 1.0f / t.
//   * `c / t` for a scalar c is `t.reciprocal() * c`: two roundings, not one.
//   * `base ** t` is an elementwise float32 pow (Sleef, <= 1 ulp). We evaluate pow in
//     double and round once, which is within 1 ulp of torch; everything else is exact,
//     so tables match torch to about 1 ulp.
// This file must not be built with -ffast-math or fp-contraction (the project builds with
// -std=c++20, where GCC's default is -ffp-contract=off).
#include "model/rope_config.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/error.h"

namespace latentserve {

using nlohmann::json;

// ---------------------------------------------------------------- config_field ----

namespace config_field {
namespace {

std::string describe(const json& value) {
  std::string text = value.dump();
  if (text.size() > 40) text = text.substr(0, 37) + "...";
  return fmt::format("{} {}", value.type_name(), text);
}

const json* find(const json& object, const std::string& key) {
  if (!object.is_object()) return nullptr;
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

}  // namespace

std::optional<int64_t> integer(const json& object, const std::string& key, const std::string& owner) {
  const json* v = find(object, key);
  if (!v) return std::nullopt;
  if (v->is_number_integer()) return v->get<int64_t>();
  // 4096.0 is an integer written loosely; 4096.5 is not.
  if (v->is_number_float()) {
    const double d = v->get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e15) return int64_t(d);
  }
  fail("{}: field '{}' must be an integer, found {}", owner, key, describe(*v));
}

std::optional<double> number(const json& object, const std::string& key, const std::string& owner) {
  const json* v = find(object, key);
  if (!v) return std::nullopt;
  if (!v->is_number()) fail("{}: field '{}' must be a number, found {}", owner, key, describe(*v));
  return v->get<double>();
}

std::optional<bool> boolean(const json& object, const std::string& key, const std::string& owner) {
  const json* v = find(object, key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) fail("{}: field '{}' must be true or false, found {}", owner, key, describe(*v));
  return v->get<bool>();
}

std::optional<std::string> string(const json& object, const std::string& key, const std::string& owner) {
  const json* v = find(object, key);
  if (!v) return std::nullopt;
  if (!v->is_string()) fail("{}: field '{}' must be a string, found {}", owner, key, describe(*v));
  return v->get<std::string>();
}

int64_t required_integer(const json& object, const std::string& key, const std::string& owner) {
  auto v = integer(object, key, owner);
  if (!v) fail("{}: required field '{}' is missing", owner, key);
  return *v;
}

double required_number(const json& object, const std::string& key, const std::string& owner) {
  auto v = number(object, key, owner);
  if (!v) fail("{}: required field '{}' is missing", owner, key);
  return *v;
}

}  // namespace config_field

// ---------------------------------------------------------------- parsing ----

std::string_view rope_type_name(RopeType type) {
  switch (type) {
    case RopeType::Default: return "default";
    case RopeType::Linear: return "linear";
    case RopeType::Llama3: return "llama3";
    case RopeType::Yarn: return "yarn";
    case RopeType::DynamicNtk: return "dynamic";
  }
  return "?";
}

namespace {

constexpr const char* kSupportedRopeTypes = "default, linear, dynamic, yarn, llama3";

std::optional<RopeType> parse_rope_type(const std::string& name) {
  if (name == "default") return RopeType::Default;
  if (name == "linear") return RopeType::Linear;
  if (name == "dynamic") return RopeType::DynamicNtk;
  if (name == "yarn") return RopeType::Yarn;
  if (name == "llama3") return RopeType::Llama3;
  return std::nullopt;
}

}  // namespace

RopeConfig RopeConfig::from_json(const json& rope_object, double rope_theta, const std::string& field,
                                 int64_t max_position_embeddings) {
  namespace cf = config_field;
  RopeConfig rope;
  rope.theta = rope_theta;
  rope.original_max_position_embeddings = max_position_embeddings;
  if (rope_object.is_null()) return rope;
  if (!rope_object.is_object())
    fail("{}: expected an object or null, found {}", field, rope_object.type_name());

  // transformers: rope_type = d.get("rope_type", d.get("type", "default")).
  std::optional<std::string> type_name = cf::string(rope_object, "rope_type", field);
  if (!type_name) type_name = cf::string(rope_object, "type", field);
  if (!type_name) {
    // Gemma-style per-layer-type parameters: {"full_attention": {...}, "sliding_attention": {...}}.
    bool all_objects = !rope_object.empty();
    for (const auto& [key, value] : rope_object.items()) all_objects = all_objects && value.is_object();
    if (all_objects) fail("{}: per-layer-type RoPE parameters are not supported", field);
    type_name = "default";
  }
  const std::optional<RopeType> type = parse_rope_type(*type_name);
  if (!type) fail("{}: rope type '{}' is not supported (supported: {})", field, *type_name, kSupportedRopeTypes);
  rope.type = *type;

  if (auto theta = cf::number(rope_object, "rope_theta", field)) rope.theta = *theta;
  if (auto partial = cf::number(rope_object, "partial_rotary_factor", field)) rope.partial_rotary_factor = *partial;
  if (!(rope.theta > 1.0)) fail("{}: rope_theta must be > 1, found {}", field, rope.theta);
  if (!(rope.partial_rotary_factor > 0.0 && rope.partial_rotary_factor <= 1.0))
    fail("{}: partial_rotary_factor must be in (0, 1], found {}", field, rope.partial_rotary_factor);

  // transformers' standardize_rope_params fills original_max_position_embeddings from
  // max_position_embeddings for llama3 / yarn when the config leaves it out.
  if (auto orig = cf::integer(rope_object, "original_max_position_embeddings", field))
    rope.original_max_position_embeddings = *orig;

  switch (rope.type) {
    case RopeType::Default:
      break;
    case RopeType::Linear:
    case RopeType::DynamicNtk:
      rope.factor = cf::required_number(rope_object, "factor", field);
      break;
    case RopeType::Llama3:
      rope.factor = cf::required_number(rope_object, "factor", field);
      rope.low_freq_factor = cf::required_number(rope_object, "low_freq_factor", field);
      rope.high_freq_factor = cf::required_number(rope_object, "high_freq_factor", field);
      if (rope.high_freq_factor == rope.low_freq_factor)
        fail("{}: llama3 high_freq_factor and low_freq_factor are both {} (the smoothing divides by their "
             "difference)", field, rope.low_freq_factor);
      break;
    case RopeType::Yarn: {
      if (rope.original_max_position_embeddings <= 0)
        fail("{}: yarn needs original_max_position_embeddings > 0", field);
      // A null factor means "max_position_embeddings / original" (DeepSeek-V3 style).
      auto factor = cf::number(rope_object, "factor", field);
      rope.factor = factor ? *factor
                           : double(max_position_embeddings) / double(rope.original_max_position_embeddings);
      rope.attention_factor = cf::number(rope_object, "attention_factor", field);
      // `d.get("beta_fast") or 32`: absent, null and 0 all mean the default.
      rope.beta_fast = cf::number(rope_object, "beta_fast", field).value_or(0.0);
      rope.beta_slow = cf::number(rope_object, "beta_slow", field).value_or(0.0);
      if (rope.beta_fast == 0.0) rope.beta_fast = 32.0;
      if (rope.beta_slow == 0.0) rope.beta_slow = 1.0;
      rope.mscale = cf::number(rope_object, "mscale", field).value_or(0.0);
      rope.mscale_all_dim = cf::number(rope_object, "mscale_all_dim", field).value_or(0.0);
      rope.truncate = cf::boolean(rope_object, "truncate", field).value_or(true);
      break;
    }
  }
  if (rope.type != RopeType::Default && !(rope.factor > 0.0))
    fail("{}: factor must be > 0, found {}", field, rope.factor);
  if ((rope.type == RopeType::Llama3 || rope.type == RopeType::Yarn) && rope.original_max_position_embeddings <= 0)
    fail("{}: original_max_position_embeddings must be > 0", field);
  return rope;
}

// ---------------------------------------------------------------- tables ----

namespace {

// torch: `base ** t` on a float32 tensor, elementwise in float (see the file comment).
float pow_f32(float base, float exponent) { return float(std::pow(double(base), double(exponent))); }

// exponent[i] = torch.arange(0, dim, 2).float() / dim, in float32: (2i) / dim.
float exponent_f32(int64_t i, int64_t dim) { return float(2 * i) / float(dim); }

// compute_default_rope_parameters: inv_freq[i] = 1 / base^(2i/dim).
std::vector<float> default_inv_freq(float base, int64_t dim) {
  std::vector<float> inv(size_t(dim / 2));
  for (int64_t i = 0; i < dim / 2; ++i) inv[size_t(i)] = 1.0f / pow_f32(base, exponent_f32(i, dim));
  return inv;
}

// _compute_llama3_parameters. Wavelength 2π/inv_freq splits the pairs three ways:
//   wavelen < original/high_freq_factor: high frequency, kept;
//   wavelen > original/low_freq_factor:  low frequency, divided by factor;
//   otherwise: smooth = (original/wavelen - low) / (high - low), and
//     inv = (1 - smooth) * inv / factor + smooth * inv.
void apply_llama3(const RopeConfig& r, std::vector<float>& inv) {
  const float factor = float(r.factor);
  const double old_context_len = double(r.original_max_position_embeddings);
  const float low_freq_wavelen = float(old_context_len / r.low_freq_factor);
  const float high_freq_wavelen = float(old_context_len / r.high_freq_factor);
  const float two_pi = float(2.0 * std::numbers::pi);
  const float old_context_len_f = float(old_context_len);
  const float low_f = float(r.low_freq_factor);
  const float high_minus_low = float(r.high_freq_factor - r.low_freq_factor);
  for (float& f : inv) {
    const float wavelen = (1.0f / f) * two_pi;  // 2π / inv_freq as torch evaluates it
    const float inv_llama = wavelen > low_freq_wavelen ? f / factor : f;
    const float smooth = ((1.0f / wavelen) * old_context_len_f - low_f) / high_minus_low;
    const float first = ((1.0f - smooth) * inv_llama) / factor;
    const float second = smooth * inv_llama;
    const float smoothed = first + second;
    const bool is_medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
    f = is_medium ? smoothed : inv_llama;
  }
}

double yarn_get_mscale(double scale, double mscale) {
  if (scale <= 1.0) return 1.0;
  return 0.1 * mscale * std::log(scale) + 1.0;
}

// Inverse of "pair d completes num_rotations turns over max_pos positions":
//   d = dim * ln(max_pos / (num_rotations * 2π)) / (2 ln base).
double yarn_correction_dim(double num_rotations, int64_t dim, double base, int64_t max_pos) {
  return (double(dim) * std::log(double(max_pos) / (num_rotations * 2.0 * std::numbers::pi))) /
         (2.0 * std::log(base));
}

// _compute_yarn_parameters. Pairs below `low` (fast rotating) keep their frequency
// (extrapolation), pairs above `high` are divided by factor (interpolation), a linear ramp
// blends the two in between.
RopeTables yarn_tables(const RopeConfig& r, int64_t dim) {
  RopeTables t;
  const float base = float(r.theta);
  const float factor = float(r.factor);

  double low = yarn_correction_dim(r.beta_fast, dim, r.theta, r.original_max_position_embeddings);
  double high = yarn_correction_dim(r.beta_slow, dim, r.theta, r.original_max_position_embeddings);
  if (r.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, double(dim - 1));
  if (low == high) high += 0.001;  // prevent a zero-width ramp
  const float low_f = float(low);
  const float width_f = float(high - low);

  t.inv_freq.resize(size_t(dim / 2));
  for (int64_t i = 0; i < dim / 2; ++i) {
    const float pos_freq = pow_f32(base, exponent_f32(i, dim));
    const float extrapolation = 1.0f / pos_freq;
    const float interpolation = 1.0f / (factor * pos_freq);
    const float ramp = std::clamp((float(i) - low_f) / width_f, 0.0f, 1.0f);
    const float extrapolation_factor = 1.0f - ramp;
    const float a = interpolation * (1.0f - extrapolation_factor);
    const float b = extrapolation * extrapolation_factor;
    t.inv_freq[size_t(i)] = a + b;
  }

  double attention_factor;
  if (r.attention_factor) {
    attention_factor = *r.attention_factor;
  } else if (r.mscale != 0.0 && r.mscale_all_dim != 0.0) {
    attention_factor = yarn_get_mscale(r.factor, r.mscale) / yarn_get_mscale(r.factor, r.mscale_all_dim);
  } else {
    attention_factor = yarn_get_mscale(r.factor, 1.0);  // 0.1 ln(factor) + 1
  }
  t.attention_factor = float(attention_factor);
  return t;
}

// _compute_dynamic_ntk_parameters as the model runs it: the forward pass hands it
// seq_len = max(position_ids) + 1 as an int64 tensor, so the base is grown in float32:
//   base' = base * ((factor * seq_len / max_pos) - (factor - 1)) ^ (dim / (dim - 2))
// (only when seq_len > max_pos; otherwise the default table).
float dynamic_base(const RopeConfig& r, int64_t dim, int64_t max_pos, int64_t seq_len) {
  if (seq_len <= max_pos) return float(r.theta);
  const float scaled = float(r.factor) * float(seq_len);
  const float ratio = scaled / float(max_pos);
  const float shifted = ratio - float(r.factor - 1.0);
  const float grown = float(std::pow(double(shifted), double(dim) / double(dim - 2)));
  return float(r.theta) * grown;
}

}  // namespace

RopeTables compute_rope_tables(const RopeConfig& rope, int64_t head_dim, int64_t max_position_embeddings,
                               int64_t seq_len) {
  // Python: dim = int(head_dim * partial_rotary_factor)
  const int64_t dim = int64_t(double(head_dim) * rope.partial_rotary_factor);
  if (dim < 2 || dim % 2 != 0)
    fail("RoPE: rotary dimension {} (head_dim {} x partial_rotary_factor {}) must be even and >= 2", dim, head_dim,
         rope.partial_rotary_factor);
  if (rope.type == RopeType::DynamicNtk && dim <= 2) fail("RoPE: dynamic NTK needs a rotary dimension > 2");

  RopeTables t;
  switch (rope.type) {
    case RopeType::Default:
      t.inv_freq = default_inv_freq(float(rope.theta), dim);
      break;
    case RopeType::Linear: {
      // Scaling positions by 1/factor is the same as scaling inv_freq by 1/factor.
      t.inv_freq = default_inv_freq(float(rope.theta), dim);
      const float factor = float(rope.factor);
      for (float& f : t.inv_freq) f = f / factor;
      break;
    }
    case RopeType::Llama3:
      t.inv_freq = default_inv_freq(float(rope.theta), dim);
      apply_llama3(rope, t.inv_freq);
      break;
    case RopeType::Yarn:
      t = yarn_tables(rope, dim);
      break;
    case RopeType::DynamicNtk:
      if (max_position_embeddings <= 0) fail("RoPE: dynamic NTK needs max_position_embeddings > 0");
      t.inv_freq = default_inv_freq(dynamic_base(rope, dim, max_position_embeddings, seq_len), dim);
      break;
  }
  t.rotary_dim = dim;
  return t;
}

}  // namespace latentserve
