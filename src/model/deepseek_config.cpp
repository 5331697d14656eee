// deepseek_v2 / deepseek_v3 config.json -> ModelConfig::mla, ::moe, softmax_scale, RoPE layout.
//
// Everything here follows transformers 5.17 (configuration_deepseek_v{2,3}.py and
// modeling_deepseek_v{2,3}.py); the lines that decide each rule are quoted where it is applied.
//
// Summary for the model code:
//   * Attention scale. Both versions: `self.scaling = yarn_apply_mscale(config.rope_parameters,
//     self.qk_head_dim ** (-0.5))` with
//         def yarn_apply_mscale(rope_parameters, scaling):
//             if rope_parameters.get("rope_type", "default") != "default":
//                 mscale_all_dim = rope_parameters.get("mscale_all_dim", 0)
//                 scaling_factor = rope_parameters["factor"]
//                 if mscale_all_dim:
//                     mscale = yarn_get_mscale(scaling_factor, mscale_all_dim)
//                     scaling = scaling * mscale * mscale
//             return scaling
//         def yarn_get_mscale(scale=1, mscale=1):
//             if scale <= 1: return 1.0
//             return 0.1 * mscale * math.log(scale) + 1.0
//     -> ModelConfig::softmax_scale. Note it is any non-default rope type (linear too), and only
//     mscale_all_dim enters it, never `mscale`.
//   * RoPE attention_factor. Separately, the rotary embedding multiplies cos/sin (v3) or
//     freqs_cis (v2) by `self.attention_scaling`, the second value of the rope init function:
//     for yarn `get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim)` when both are
//     set, else `get_mscale(factor)` (0.1 ln factor + 1). That is RopeTables::attention_factor
//     from compute_rope_tables: multiply q_pe and k_pe by it (rope score gets it squared), as the
//     llama path does. It is 1.0 for every published DeepSeek config (mscale == mscale_all_dim),
//     but e.g. {factor 40, mscale 1, no mscale_all_dim} gives softmax_scale = 192^-0.5 and
//     attention_factor 1.36889. Apply softmax_scale once to the whole q.k score and
//     attention_factor once to the rotary part; neither contains the other.
//   * Rotary width: config.head_dim is set to qk_rope_head_dim in both config classes
//     (`self.head_dim = self.qk_rope_head_dim`) and the rope init reads config.head_dim, so call
//     compute_rope_tables(c.rope, c.mla->qk_rope_head_dim, ...), NOT c.head_dim.
//   * RoPE layout. v2 always rotates adjacent pairs (2i, 2i+1) as complex numbers:
//         xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
//         xq_out = torch.view_as_real(xq_ * freqs_cis).flatten(3).type_as(xq)
//     (output stays interleaved). v3: `if self.config.rope_interleave:` (default True)
//     apply_rotary_pos_emb_interleave, also pairs (2i, 2i+1) with frequency i, but its output is
//     written de-interleaved: `torch.cat([q1 * cos - q2 * sin, q2 * cos + q1 * sin], dim=-1)` with
//     q1, q2 = q[..., 0::2], q[..., 1::2]. q and k get the same permutation, so scores are those of
//     the in-place interleaved rotation; only the element order of the cached k_pe differs.
//     rope_interleave false: rotate_half (neox) layout. -> RopeConfig::interleaved.
//   * MoE: see MoeScoring / MoeTopk in model_config.h and the router notes in parse_moe below.
#include "model/deepseek_config.h"

#include <cmath>

#include "core/error.h"

namespace latentserve {

using nlohmann::json;
namespace cf = config_field;

bool MoeConfig::is_moe_layer(int64_t layer) const {
  return n_routed_experts > 0 && layer >= first_k_dense_replace && layer % moe_layer_freq == 0;
}

double deepseek_softmax_scale(int64_t qk_head_dim, RopeType rope_type, double factor, double mscale_all_dim) {
  double scaling = std::pow(double(qk_head_dim), -0.5);
  if (rope_type != RopeType::Default && mscale_all_dim != 0.0) {
    const double mscale = factor <= 1.0 ? 1.0 : 0.1 * mscale_all_dim * std::log(factor) + 1.0;
    scaling = scaling * mscale * mscale;  // same order of operations as Python
  }
  return scaling;
}

namespace {

// The defaults of DeepseekV2Config / DeepseekV3Config (transformers 5.17) for the fields this
// file reads; nullopt where the class default is None.
struct DeepseekDefaults {
  std::optional<int64_t> q_lora_rank;
  int64_t qk_nope_head_dim, qk_rope_head_dim, v_head_dim;
  int64_t n_routed_experts, n_shared_experts;
  std::optional<int64_t> num_experts_per_tok;
  int64_t moe_intermediate_size, first_k_dense_replace;
  std::optional<int64_t> n_group, topk_group;
  const char* scoring_func;
  const char* topk_method;
  bool norm_topk_prob;
  double routed_scaling_factor;
};

// DeepseekV2Config: q_lora_rank 1536, qk_nope 128, qk_rope 64, v_head_dim 128, n_routed_experts 64,
// n_shared_experts 2, num_experts_per_tok None, moe_intermediate_size 1407, first_k_dense_replace 0,
// n_group None, topk_group None, topk_method "greedy", norm_topk_prob False, routed_scaling_factor
// 1.0 (it has no scoring_func: DeepseekV2TopkRouter always uses softmax).
constexpr DeepseekDefaults kV2Defaults{1536, 128, 64, 128, 64, 2, std::nullopt, 1407, 0,
                                       std::nullopt, std::nullopt, "softmax", "greedy", false, 1.0};
// DeepseekV3Config: q_lora_rank 1536, qk_nope 128, qk_rope 64, v_head_dim 128, n_routed_experts 256,
// n_shared_experts 1, num_experts_per_tok 8, moe_intermediate_size 2048, first_k_dense_replace 3,
// n_group 8, topk_group 4, norm_topk_prob True, routed_scaling_factor 2.5 (no scoring_func or
// topk_method: DeepseekV3TopkRouter is always sigmoid + noaux_tc).
constexpr DeepseekDefaults kV3Defaults{1536, 128, 64, 128, 256, 1, 8, 2048, 3, 8, 4, "sigmoid", "noaux_tc", true, 2.5};

std::optional<int64_t> integer_or(const json& j, const char* key, std::optional<int64_t> absent,
                                  const std::string& source) {
  if (!j.contains(key)) return absent;
  return cf::integer(j, key, source);
}

int64_t positive_field(const json& j, const char* key, int64_t absent, const std::string& source) {
  const auto v = integer_or(j, key, absent, source);
  if (!v) fail("{}: field '{}' must be an integer > 0, found null", source, key);
  if (*v <= 0) fail("{}: field '{}' must be > 0, found {}", source, key, *v);
  return *v;
}

MlaConfig parse_mla(const json& j, const DeepseekDefaults& d, const std::string& source) {
  MlaConfig m;
  // transformers defaults kv_lora_rank to 512, but a DeepSeek config without it is broken
  // (the latent width decides every tensor shape and the cache), so it is required here.
  m.kv_lora_rank = cf::required_integer(j, "kv_lora_rank", source);
  if (m.kv_lora_rank <= 0) fail("{}: field 'kv_lora_rank' must be > 0, found {}", source, m.kv_lora_rank);
  // q_lora_rank: null -> plain q_proj (DeepSeek-V2-Lite); absent -> the class default 1536.
  if (const auto q = integer_or(j, "q_lora_rank", d.q_lora_rank, source)) {
    if (*q <= 0) fail("{}: field 'q_lora_rank' must be > 0 or null, found {}", source, *q);
    m.q_lora_rank = *q;
  }
  m.qk_nope_head_dim = positive_field(j, "qk_nope_head_dim", d.qk_nope_head_dim, source);
  m.qk_rope_head_dim = positive_field(j, "qk_rope_head_dim", d.qk_rope_head_dim, source);
  m.v_head_dim = positive_field(j, "v_head_dim", d.v_head_dim, source);
  if (m.qk_rope_head_dim % 2 != 0)
    fail("{}: field 'qk_rope_head_dim' must be even (RoPE rotates pairs), found {}", source, m.qk_rope_head_dim);
  return m;
}

std::optional<MoeScoring> parse_scoring(const std::string& name) {
  if (name == "softmax") return MoeScoring::Softmax;
  if (name == "sigmoid") return MoeScoring::Sigmoid;
  return std::nullopt;
}

std::optional<MoeTopk> parse_topk(const std::string& name) {
  if (name == "greedy") return MoeTopk::Greedy;
  if (name == "group_limited_greedy") return MoeTopk::GroupLimitedGreedy;
  if (name == "noaux_tc") return MoeTopk::NoauxTc;
  return std::nullopt;
}

// Router semantics in transformers 5.17 (what the model code must reproduce):
//   v2 (DeepseekV2TopkRouter): logits = x.f32 @ W^T; scores = softmax(logits) over all experts;
//     greedy: topk(scores, k); group_limited_greedy: group score = max of the group's scores, keep
//     the topk_group best groups, others masked to 0.0, then topk(scores, k). weights = the
//     chosen softmax scores * routed_scaling_factor. norm_topk_prob is never applied.
//   v3 (DeepseekV3TopkRouter): scores = sigmoid(logits); choice = scores + e_score_correction_bias;
//     group score = sum of the two largest choice values in the group; keep topk_group groups,
//     others masked to -inf; topk(choice, k); weights = scores (without the bias) at those experts;
//     if norm_topk_prob: weights /= (sum + 1e-20); weights *= routed_scaling_factor.
//   Both: output = sum_k w_k expert_k(x) + shared_experts(x), the shared MLP being one SwiGLU of
//   width moe_intermediate_size * n_shared_experts.
// A config asking for a combination transformers does not run (v2 with sigmoid/noaux_tc/
// norm_topk_prob, v3 with softmax or another top-k method) is rejected rather than guessed.
std::optional<MoeConfig> parse_moe(const json& j, const DeepseekDefaults& d, bool v3, const std::string& source) {
  // null n_routed_experts (the DeepSeek code's "no MoE") or 0: every layer is dense.
  const auto n_routed = integer_or(j, "n_routed_experts", d.n_routed_experts, source);
  if (!n_routed || *n_routed == 0) return std::nullopt;
  MoeConfig m;
  m.n_routed_experts = *n_routed;
  if (m.n_routed_experts < 0) fail("{}: field 'n_routed_experts' must be >= 0, found {}", source, m.n_routed_experts);

  const auto k = integer_or(j, "num_experts_per_tok", d.num_experts_per_tok, source);
  if (!k) fail("{}: required field 'num_experts_per_tok' is missing (needed with n_routed_experts {})", source,
               m.n_routed_experts);
  m.num_experts_per_tok = *k;
  if (m.num_experts_per_tok <= 0)
    fail("{}: field 'num_experts_per_tok' must be > 0, found {}", source, m.num_experts_per_tok);
  if (m.num_experts_per_tok > m.n_routed_experts)
    fail("{}: field 'num_experts_per_tok' ({}) exceeds n_routed_experts ({})", source, m.num_experts_per_tok,
         m.n_routed_experts);

  m.n_shared_experts = integer_or(j, "n_shared_experts", d.n_shared_experts, source).value_or(0);
  if (m.n_shared_experts < 0) fail("{}: field 'n_shared_experts' must be >= 0, found {}", source, m.n_shared_experts);
  m.moe_intermediate_size = positive_field(j, "moe_intermediate_size", d.moe_intermediate_size, source);
  m.first_k_dense_replace = integer_or(j, "first_k_dense_replace", d.first_k_dense_replace, source).value_or(0);
  if (m.first_k_dense_replace < 0)
    fail("{}: field 'first_k_dense_replace' must be >= 0, found {}", source, m.first_k_dense_replace);
  m.moe_layer_freq = positive_field(j, "moe_layer_freq", 1, source);

  const std::string scoring = cf::string(j, "scoring_func", source).value_or(d.scoring_func);
  const auto scoring_func = parse_scoring(scoring);
  if (!scoring_func) fail("{}: scoring_func '{}' is not supported (supported: softmax, sigmoid)", source, scoring);
  m.scoring_func = *scoring_func;
  const std::string method = cf::string(j, "topk_method", source).value_or(d.topk_method);
  const auto topk_method = parse_topk(method);
  if (!topk_method)
    fail("{}: topk_method '{}' is not supported (supported: greedy, group_limited_greedy, noaux_tc)", source, method);
  m.topk_method = *topk_method;

  m.n_group = integer_or(j, "n_group", d.n_group, source).value_or(1);
  m.topk_group = integer_or(j, "topk_group", d.topk_group, source).value_or(1);
  if (m.n_group <= 0) fail("{}: field 'n_group' must be > 0, found {}", source, m.n_group);
  if (m.topk_group <= 0) fail("{}: field 'topk_group' must be > 0, found {}", source, m.topk_group);
  m.norm_topk_prob = cf::boolean(j, "norm_topk_prob", source).value_or(d.norm_topk_prob);
  m.routed_scaling_factor = cf::number(j, "routed_scaling_factor", source).value_or(d.routed_scaling_factor);
  if (!(m.routed_scaling_factor > 0.0))
    fail("{}: field 'routed_scaling_factor' must be > 0, found {}", source, m.routed_scaling_factor);

  // What transformers' router for this model type can do.
  if (v3) {
    if (m.scoring_func != MoeScoring::Sigmoid)
      fail("{}: scoring_func '{}' is not supported for deepseek_v3 (its router is sigmoid + noaux_tc)", source,
           scoring);
    if (m.topk_method != MoeTopk::NoauxTc)
      fail("{}: topk_method '{}' is not supported for deepseek_v3 (its router is sigmoid + noaux_tc)", source, method);
  } else {
    if (m.scoring_func != MoeScoring::Softmax)
      fail("{}: scoring_func '{}' is not supported for deepseek_v2 (its router is softmax)", source, scoring);
    if (m.topk_method == MoeTopk::NoauxTc)
      fail("{}: topk_method 'noaux_tc' is not supported for deepseek_v2 (greedy or group_limited_greedy)", source);
    if (m.norm_topk_prob)
      fail("{}: field 'norm_topk_prob' true is not supported for deepseek_v2 (transformers' DeepseekV2 router "
           "never normalises the top-k weights)", source);
  }

  // Grouping is applied by group_limited_greedy and noaux_tc (greedy ignores n_group/topk_group).
  if (m.topk_group > m.n_group)
    fail("{}: field 'topk_group' ({}) exceeds n_group ({})", source, m.topk_group, m.n_group);
  if (m.n_routed_experts % m.n_group != 0)
    fail("{}: field 'n_routed_experts' ({}) is not divisible by n_group ({})", source, m.n_routed_experts, m.n_group);
  if (m.topk_method != MoeTopk::Greedy) {
    const int64_t per_group = m.n_routed_experts / m.n_group;
    if (m.topk_method == MoeTopk::NoauxTc && per_group < 2)
      fail("{}: field 'n_group' ({}) leaves {} expert(s) per group; noaux_tc scores a group by its two best "
           "experts", source, m.n_group, per_group);
    if (m.num_experts_per_tok > m.topk_group * per_group)
      fail("{}: field 'num_experts_per_tok' ({}) exceeds the {} experts of the topk_group ({}) kept groups", source,
           m.num_experts_per_tok, m.topk_group * per_group, m.topk_group);
  }
  return m;
}

}  // namespace

void parse_deepseek_config(const json& j, const json& rope_object, const std::string& source, ModelConfig& c) {
  const bool v3 = c.model_type == "deepseek_v3";
  const DeepseekDefaults& d = v3 ? kV3Defaults : kV2Defaults;

  c.mla = parse_mla(j, d, source);
  c.moe = parse_moe(j, d, v3, source);

  // Per head q.k width. config.json's own "head_dim" (transformers writes qk_rope_head_dim there)
  // and "qk_head_dim" are derived values that transformers recomputes; they are ignored.
  c.head_dim = c.mla->qk_nope_head_dim + c.mla->qk_rope_head_dim;
  // kv_b_proj expands the latent to every head: MLA has no KV-head sharing. transformers would
  // repeat_kv by n_head / num_key_value_heads and fail on any other value.
  if (const auto kv = cf::integer(j, "num_key_value_heads", source); kv && *kv != c.n_head)
    fail("{}: field 'num_key_value_heads' ({}) must equal num_attention_heads ({}) for {}", source, *kv, c.n_head,
         c.model_type);
  c.n_head_kv = c.n_head;

  // Biases: attention_bias covers q_a_proj, kv_a_proj_with_mqa and o_proj (never q_proj, q_b_proj,
  // kv_b_proj). v2's mlp_bias covers the dense MLP and the shared experts (routed experts never
  // have one); v3 has no MLP biases.
  c.attention_bias = cf::boolean(j, "attention_bias", source).value_or(false);
  c.o_proj_bias = c.attention_bias;
  c.mlp_bias = v3 ? false : cf::boolean(j, "mlp_bias", source).value_or(false);

  // v2: always complex (interleaved-pair) rotation; v3: rope_interleave, default True.
  c.rope.interleaved = v3 ? cf::boolean(j, "rope_interleave", source).value_or(true) : true;
  if (c.rope.partial_rotary_factor != 1.0)
    fail("{}: partial_rotary_factor {} is not supported for {} (qk_rope_head_dim is the rotary width)", source,
         c.rope.partial_rotary_factor, c.model_type);

  // Softmax scale (see the file comment). rope_parameters["factor"] and .get("mscale_all_dim", 0)
  // are read for any non-default RoPE type, so mscale_all_dim is taken from the object here
  // (RopeConfig keeps it for yarn only). For yarn with a null factor transformers' scale code
  // would fail on None; RopeConfig's factor (max_position_embeddings / original) is used instead.
  const double mscale_all_dim = cf::number(rope_object, "mscale_all_dim", source).value_or(0.0);
  c.softmax_scale = deepseek_softmax_scale(c.head_dim, c.rope.type, c.rope.factor, mscale_all_dim);
}

}  // namespace latentserve
