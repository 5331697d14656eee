#pragma once
// config.json fields of deepseek_v2 / deepseek_v3 (also DeepSeek-R1, Kimi-K2: the V3 layout):
// MLA dimensions, MoE routing, the softmax scale with the YaRN mscale correction, the RoPE
// layout. Called by ModelConfig::from_json; the rules and the transformers 5.17 source they
// follow are quoted in deepseek_config.cpp.
#include <string>

#include <nlohmann/json.hpp>

#include "model/model_config.h"

namespace latentserve {

// Fills c.mla, c.moe, c.head_dim (qk_nope + qk_rope), c.n_head_kv (= n_head), c.rope.interleaved,
// c.attention_bias / o_proj_bias / mlp_bias and c.softmax_scale. Expects c.model_type
// ("deepseek_v2" or "deepseek_v3"), c.n_head and c.rope already parsed; `rope_object` is the
// `rope_scaling` / `rope_parameters` object c.rope came from (JSON null when there was none).
// Errors name `source` and the field.
void parse_deepseek_config(const nlohmann::json& j, const nlohmann::json& rope_object, const std::string& source,
                           ModelConfig& c);

// transformers' yarn_apply_mscale: qk_head_dim^-0.5, times mscale^2 with
// mscale = 0.1 * mscale_all_dim * ln(factor) + 1 when rope_type != "default", mscale_all_dim != 0
// and factor > 1. mscale_all_dim is 0 when the config has none.
double deepseek_softmax_scale(int64_t qk_head_dim, RopeType rope_type, double factor, double mscale_all_dim);

}  // namespace latentserve
