// The five MLA verification checks (see mla_verify.h and docs/mla.md).
//
// Layering note: this is a verification harness. It lives in attention/ because the checks are
// about attention, but check 5 drives the engine (OfflineRunner) and the model (DeepseekModel),
// which sit above attention/; nothing below engine/ includes this file.
#include "attention/mla_verify.h"

#include <cblas.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <random>

#include "attention/attention_spec.h"
#include "core/convert.h"
#include "core/error.h"
#include "core/fp8.h"
#include "engine/offline_runner.h"
#include "io/checkpoint.h"
#include "model/architectures.h"
#include "model/rope_config.h"
#include "model/weight_source.h"

// LAPACK's symmetric eigensolver (OpenBLAS exports it); Fortran calling convention with the
// hidden lengths of the two character arguments.
extern "C" void dsyev_(const char* jobz, const char* uplo, const int* n, double* a, const int* lda, double* w,
                       double* work, const int* lwork, int* info, size_t jobz_len, size_t uplo_len);

namespace latentserve {

// ------------------------------------------------------------------------------------------
// Shapes, configs, weights
// ------------------------------------------------------------------------------------------

MlaShape deepseek_v3_mla_shape() { return {128, 512, 128, 64, 128}; }

nlohmann::json deepseek_v3_config_json() {
  // deepseek-ai/DeepSeek-V3 config.json (quantization_config and auto_map left out).
  return nlohmann::json::parse(R"({
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
    "attention_bias": false, "attention_dropout": 0.0, "bos_token_id": 0, "eos_token_id": 1,
    "first_k_dense_replace": 3, "hidden_act": "silu", "hidden_size": 7168, "intermediate_size": 18432,
    "kv_lora_rank": 512, "max_position_embeddings": 163840, "moe_intermediate_size": 2048,
    "moe_layer_freq": 1, "n_group": 8, "n_routed_experts": 256, "n_shared_experts": 1,
    "norm_topk_prob": true, "num_attention_heads": 128, "num_experts_per_tok": 8,
    "num_hidden_layers": 61, "num_key_value_heads": 128, "num_nextn_predict_layers": 1,
    "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
    "rms_norm_eps": 1e-06, "rope_theta": 10000,
    "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0,
                     "original_max_position_embeddings": 4096, "type": "yarn"},
    "routed_scaling_factor": 2.5, "scoring_func": "sigmoid", "topk_group": 4, "topk_method": "noaux_tc",
    "tie_word_embeddings": false, "torch_dtype": "bfloat16", "vocab_size": 129280})");
}

nlohmann::json small_backbone_config_json(const nlohmann::json& base) {
  nlohmann::json j = base;
  j["hidden_size"] = 1024;
  j["intermediate_size"] = 2048;
  j["num_hidden_layers"] = 2;
  j["first_k_dense_replace"] = 2;  // both layers dense: no MoE layer
  j["vocab_size"] = 512;
  j["bos_token_id"] = 0;
  j["eos_token_id"] = 1;
  j["tie_word_embeddings"] = false;
  j.erase("quantization_config");
  return j;
}

const double* MlaLayerWeights::w_uk(int64_t head) const {
  return &kv_b_proj[size_t(head * (shape.qk_nope_head_dim + shape.v_head_dim) * shape.kv_lora_rank)];
}
const double* MlaLayerWeights::w_uv(int64_t head) const {
  return w_uk(head) + shape.qk_nope_head_dim * shape.kv_lora_rank;
}

namespace {

MlaLayerWeights weights_frame(const ModelConfig& c) {
  if (!c.mla) fail("verify-mla needs a deepseek_v2 / deepseek_v3 config (MLA fields), found model_type '{}'", c.model_type);
  const MlaConfig& m = *c.mla;
  MlaLayerWeights w;
  w.shape = {c.n_head, m.kv_lora_rank, m.qk_nope_head_dim, m.qk_rope_head_dim, m.v_head_dim};
  const RopeTables rope = compute_rope_tables(c.rope, m.qk_rope_head_dim, c.max_position_embeddings,
                                              c.max_position_embeddings);
  w.inv_freq.assign(rope.inv_freq.begin(), rope.inv_freq.end());
  w.rope_attention_factor = rope.attention_factor;
  w.rope_interleaved = c.rope.interleaved;
  w.softmax_scale = c.softmax_scale;
  return w;
}

double dot(const double* a, const double* b, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

double norm2(const double* a, int64_t n) { return std::sqrt(dot(a, a, n)); }

std::vector<double> normal_vector(size_t n, std::mt19937_64& rng) {
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<double> v(n);
  for (auto& x : v) x = normal(rng);
  return v;
}

// max |a - b| / max |b|
double max_relative_deviation(const std::vector<double>& a, const std::vector<double>& b) {
  double diff = 0, ref = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::abs(a[i] - b[i]));
    ref = std::max(ref, std::abs(b[i]));
  }
  return ref > 0 ? diff / ref : diff;
}

}  // namespace

MlaLayerWeights random_mla_layer_weights(const ModelConfig& config, uint64_t seed) {
  MlaLayerWeights w = weights_frame(config);
  const MlaShape& s = w.shape;
  std::mt19937_64 rng(seed);
  const double a = 1.0 / std::sqrt(double(s.kv_lora_rank));
  std::uniform_real_distribution<double> uniform(-a, a);
  w.kv_b_proj.resize(size_t(s.n_head * (s.qk_nope_head_dim + s.v_head_dim) * s.kv_lora_rank));
  for (auto& x : w.kv_b_proj) x = uniform(rng);
  w.source = fmt::format("random (seed {})", seed);
  return w;
}

MlaLayerWeights load_mla_layer_weights(const std::filesystem::path& model_dir, int64_t layer) {
  MlaLayerWeights w = weights_frame(ModelConfig::load(model_dir));
  const MlaShape& s = w.shape;
  const Checkpoint ckpt = Checkpoint::open(model_dir);
  const std::string name = fmt::format("model.layers.{}.self_attn.kv_b_proj.weight", layer);
  const TensorView t = ckpt.tensor(name);
  const int64_t rows = s.n_head * (s.qk_nope_head_dim + s.v_head_dim), cols = s.kv_lora_rank;
  if (t.rank != 2 || t.dim(0) != rows || t.dim(1) != cols || !t.is_contiguous())
    fail("{}: tensor '{}': expected a contiguous [{}, {}] matrix, found {}", ckpt.file_of(name).string(), name, rows,
         cols, t.shape_string());
  w.kv_b_proj.resize(size_t(rows * cols));
  if (t.dtype == DType::F8_E4M3) {
    // DeepSeek-V3's fp8 release: w = fp8 * weight_scale_inv[row / 128, col / 128].
    const std::string scale_name = name + "_scale_inv";
    const TensorView sc = ckpt.tensor(scale_name);
    const int64_t br = (rows + 127) / 128, bc = (cols + 127) / 128;
    if (sc.rank != 2 || sc.dim(0) != br || sc.dim(1) != bc)
      fail("{}: tensor '{}': expected [{}, {}] block scales, found {}", ckpt.file_of(scale_name).string(), scale_name,
           br, bc, sc.shape_string());
    std::vector<float> scales(static_cast<size_t>(br * bc));
    convert_to_f32(sc.data, sc.dtype, scales.data(), br * bc);
    const auto* bits = static_cast<const uint8_t*>(t.data);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        w.kv_b_proj[size_t(r * cols + c)] =
            double(fp8_e4m3_to_f32(bits[r * cols + c])) * double(scales[size_t((r / 128) * bc + c / 128)]);
  } else {
    std::vector<float> row(static_cast<size_t>(cols));
    const size_t row_bytes = size_t(cols) * dtype_size_bytes(t.dtype);
    for (int64_t r = 0; r < rows; ++r) {
      with_context(ckpt.file_of(name).string() + ": tensor '" + name + "'",
                   [&] { convert_to_f32(static_cast<const char*>(t.data) + size_t(r) * row_bytes, t.dtype, row.data(), cols); });
      std::copy(row.begin(), row.end(), w.kv_b_proj.begin() + r * cols);
    }
  }
  w.source = fmt::format("{}: {}", model_dir.string(), name);
  return w;
}

// ------------------------------------------------------------------------------------------
// 1. KV footprint
// ------------------------------------------------------------------------------------------

KvFootprintResult check_kv_footprint(const MlaShape& shape, int64_t context_tokens,
                                     const std::optional<KvFootprintPublished>& published) {
  KvFootprintResult r;
  r.context_tokens = context_tokens;
  const DType dt = DType::BF16;
  const int64_t nh = shape.n_head, dk = shape.qk_nope_head_dim, dv = shape.v_head_dim;
  auto add = [&](std::string name, const AttentionSpec& spec, int64_t n_kv, int64_t closed_form_elements,
                 std::optional<int64_t> pub) {
    KvFootprintRow row{std::move(name), n_kv, spec.kv_bytes_per_token(dt), 0, pub};
    row.cache_bytes_at_context = row.bytes_per_token * context_tokens;
    if (row.bytes_per_token != closed_form_elements * 2)
      r.mismatches.push_back(fmt::format("{}: AttentionSpec says {} B/token, the closed form {}", row.name,
                                         row.bytes_per_token, closed_form_elements * 2));
    if (pub && *pub != row.bytes_per_token)
      r.mismatches.push_back(fmt::format("{}: {} B/token, published {}", row.name, row.bytes_per_token, *pub));
    r.rows.push_back(row);
  };
  const auto& P = published;
  add("MHA", AttentionSpec::standard(nh, nh, dk, dv), nh, nh * (dk + dv), P ? std::optional(P->mha) : std::nullopt);
  const bool has_gqa8 = nh > 8 && nh % 8 == 0;
  if (has_gqa8)
    add("GQA-8", AttentionSpec::standard(nh, 8, dk, dv), 8, 8 * (dk + dv), P ? std::optional(P->gqa8) : std::nullopt);
  else if (P)
    r.mismatches.push_back(fmt::format("GQA-8 needs n_head a multiple of 8 above 8, found {}", nh));
  add("MQA", AttentionSpec::standard(nh, 1, dk, dv), 1, dk + dv, P ? std::optional(P->mqa) : std::nullopt);
  add("MLA",
      AttentionSpec::latent(nh, shape.kv_lora_rank, shape.qk_nope_head_dim, shape.qk_rope_head_dim, shape.v_head_dim),
      0, shape.kv_lora_rank + shape.qk_rope_head_dim, P ? std::optional(P->mla) : std::nullopt);

  const double mla = double(r.rows.back().bytes_per_token);
  r.saving_vs_mha_percent = 100.0 * (1.0 - mla / double(r.rows.front().bytes_per_token));
  if (has_gqa8) r.saving_vs_gqa8_percent = 100.0 * (1.0 - mla / double(r.rows[1].bytes_per_token));
  if (P) {
    r.compared_with_published = true;
    auto round2 = [](double x) { return std::round(x * 100.0) / 100.0; };
    if (round2(r.saving_vs_mha_percent) != P->saving_vs_mha_percent)
      r.mismatches.push_back(fmt::format("saving vs MHA {:.2f}%, published {:.2f}%", r.saving_vs_mha_percent,
                                         P->saving_vs_mha_percent));
    if (r.saving_vs_gqa8_percent && round2(*r.saving_vs_gqa8_percent) != P->saving_vs_gqa8_percent)
      r.mismatches.push_back(fmt::format("saving vs GQA-8 {:.2f}%, published {:.2f}%", *r.saving_vs_gqa8_percent,
                                         P->saving_vs_gqa8_percent));
    if (context_tokens == 8192) {
      const double mib = 1024.0 * 1024.0;
      if (double(r.rows.front().cache_bytes_at_context) / mib != P->mha_cache_mib_at_8k)
        r.mismatches.push_back(fmt::format("MHA cache at 8K {} MiB, published {} MiB",
                                           double(r.rows.front().cache_bytes_at_context) / mib, P->mha_cache_mib_at_8k));
      if (double(r.rows.back().cache_bytes_at_context) / mib != P->mla_cache_mib_at_8k)
        r.mismatches.push_back(fmt::format("MLA cache at 8K {} MiB, published {} MiB",
                                           double(r.rows.back().cache_bytes_at_context) / mib, P->mla_cache_mib_at_8k));
    }
  }
  r.passed = r.mismatches.empty();
  return r;
}

// ------------------------------------------------------------------------------------------
// 2. Low rank
// ------------------------------------------------------------------------------------------

std::vector<double> reconstruct_keys_from_latent(const MlaLayerWeights& w, int64_t n_tokens, uint64_t seed) {
  const MlaShape& s = w.shape;
  const int64_t r = s.kv_lora_rank, dn = s.qk_nope_head_dim, cols = s.n_head * dn;
  std::mt19937_64 rng(seed);
  const std::vector<double> c = normal_vector(size_t(n_tokens * r), rng);  // [L, r]
  std::vector<double> w_uk(static_cast<size_t>(cols * r));                  // [n_head * dn, r]
  for (int64_t h = 0; h < s.n_head; ++h) std::copy_n(w.w_uk(h), dn * r, w_uk.begin() + h * dn * r);
  // K[L, n_head * dn] = C · W_UKᵀ
  std::vector<double> k(static_cast<size_t>(n_tokens * cols));
  cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, blasint(n_tokens), blasint(cols), blasint(r), 1.0, c.data(),
              blasint(r), w_uk.data(), blasint(r), 0.0, k.data(), blasint(cols));
  return k;
}

LowRankResult measure_key_rank(const std::vector<double>& keys, int64_t rows, int64_t cols, int64_t rank_bound) {
  if (int64_t(keys.size()) != rows * cols) fail("measure_key_rank: {} values for a [{}, {}] matrix", keys.size(), rows, cols);
  LowRankResult r;
  r.rows = rows;
  r.cols = cols;
  r.rank_bound = rank_bound;
  // G[rows, rows] = K Kᵀ (upper triangle, row-major = lower triangle column-major)
  std::vector<double> g(static_cast<size_t>(rows * rows), 0.0);
  cblas_dsyrk(CblasRowMajor, CblasUpper, CblasNoTrans, blasint(rows), blasint(cols), 1.0, keys.data(), blasint(cols),
              0.0, g.data(), blasint(rows));
  const int n = int(rows);
  int lwork = -1, info = 0;
  double query = 0;
  std::vector<double> eig(static_cast<size_t>(rows));
  dsyev_("N", "L", &n, g.data(), &n, eig.data(), &query, &lwork, &info, 1, 1);
  lwork = int(query);
  std::vector<double> work(static_cast<size_t>(std::max(lwork, 1)));
  dsyev_("N", "L", &n, g.data(), &n, eig.data(), work.data(), &lwork, &info, 1, 1);
  if (info != 0) fail("LAPACK dsyev failed with info = {}", info);
  // singular values, descending
  std::vector<double> sigma(eig.rbegin(), eig.rend());
  for (auto& x : sigma) x = std::sqrt(std::max(x, 0.0));
  r.relative_tolerance = 10.0 * std::sqrt(double(rows) * std::numeric_limits<double>::epsilon());
  r.sigma_max = sigma.front();
  const double cut = r.relative_tolerance * r.sigma_max;
  while (r.numerical_rank < rows && sigma[size_t(r.numerical_rank)] > cut) ++r.numerical_rank;
  r.sigma_min_kept = r.numerical_rank > 0 ? sigma[size_t(r.numerical_rank - 1)] : 0.0;
  r.sigma_first_dropped = r.numerical_rank < rows ? sigma[size_t(r.numerical_rank)] : 0.0;
  r.passed = r.numerical_rank <= rank_bound;
  return r;
}

LowRankResult check_low_rank(const MlaLayerWeights& w, int64_t n_tokens, uint64_t seed) {
  const int64_t L = std::max(n_tokens, w.shape.kv_lora_rank + 128);
  const int64_t cols = w.shape.n_head * w.shape.qk_nope_head_dim;
  return measure_key_rank(reconstruct_keys_from_latent(w, L, seed), L, cols, w.shape.kv_lora_rank);
}

// ------------------------------------------------------------------------------------------
// 3. Decoupled RoPE
// ------------------------------------------------------------------------------------------

namespace {
void rotate_pairs(double* x, int64_t pos, const std::vector<double>& inv_freq, double factor, bool interleaved,
                  bool f32_angles) {
  const int64_t half = int64_t(inv_freq.size());
  for (int64_t i = 0; i < half; ++i) {
    const double angle = f32_angles ? double(float(pos) * float(inv_freq[size_t(i)])) : double(pos) * inv_freq[size_t(i)];
    const double c = std::cos(angle) * factor, s = std::sin(angle) * factor;
    double& a = interleaved ? x[2 * i] : x[i];
    double& b = interleaved ? x[2 * i + 1] : x[i + half];
    const double a0 = a, b0 = b;
    a = a0 * c - b0 * s;
    b = b0 * c + a0 * s;
  }
}
}  // namespace

RopeRotation model_rope_rotation(const MlaLayerWeights& w) {
  return [inv = w.inv_freq, f = w.rope_attention_factor, il = w.rope_interleaved](double* x, int64_t pos) {
    rotate_pairs(x, pos, inv, f, il, false);
  };
}

DecoupledRopeResult check_decoupled_rope(const MlaLayerWeights& w, uint64_t seed, const RopeRotation& rotate_q_in,
                                         const RopeRotation& rotate_k_in) {
  const RopeRotation rotate_q = rotate_q_in ? rotate_q_in : model_rope_rotation(w);
  const RopeRotation rotate_k = rotate_k_in ? rotate_k_in : model_rope_rotation(w);
  const int64_t dn = w.shape.qk_nope_head_dim, dr = w.shape.qk_rope_head_dim, dq = dn + dr;
  DecoupledRopeResult r;
  r.n_pairs = 64;
  r.deltas = {1, 7, 64, 1000, 4096, 32768};
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> position(0, 4095);
  const double f2 = w.rope_attention_factor * w.rope_attention_factor;
  for (int64_t i = 0; i < r.n_pairs; ++i) {
    const std::vector<double> q = normal_vector(size_t(dq), rng), k = normal_vector(size_t(dq), rng);
    int64_t t = position(rng), s = position(rng);
    if (s > t) std::swap(s, t);  // causal: key at s <= query at t
    // (a) [q_nope | R_t q_pe] · [k_nope | R_s k_pe] == q_nope·k_nope + (R_t q_pe)·(R_s k_pe)
    std::vector<double> q_cat = q, k_cat = k;
    rotate_q(q_cat.data() + dn, t);
    rotate_k(k_cat.data() + dn, s);
    const double concat = dot(q_cat.data(), k_cat.data(), dq);
    const double content = dot(q.data(), k.data(), dn);
    const double rope = dot(q_cat.data() + dn, k_cat.data() + dn, dr);
    const double bound = norm2(q.data(), dq) * norm2(k.data(), dq) * std::max(1.0, f2);
    r.max_split_deviation = std::max(r.max_split_deviation, std::abs(concat - (content + rope)) / bound);
    // (b) the rope score at (t + Δ, s + Δ) equals the one at (t, s)
    const double rope_bound = norm2(q.data() + dn, dr) * norm2(k.data() + dn, dr) * f2;
    for (int64_t delta : r.deltas) {
      std::vector<double> qd(q.begin() + dn, q.end()), kd(k.begin() + dn, k.end());
      rotate_q(qd.data(), t + delta);
      rotate_k(kd.data(), s + delta);
      r.max_relative_deviation = std::max(r.max_relative_deviation, std::abs(dot(qd.data(), kd.data(), dr) - rope) / rope_bound);
      // informational: the model's rotation with f32 angles, at (t, s) and shifted
      std::vector<double> q0(q.begin() + dn, q.end()), k0(k.begin() + dn, k.end()), q1 = q0, k1 = k0;
      rotate_pairs(q0.data(), t, w.inv_freq, w.rope_attention_factor, w.rope_interleaved, true);
      rotate_pairs(k0.data(), s, w.inv_freq, w.rope_attention_factor, w.rope_interleaved, true);
      rotate_pairs(q1.data(), t + delta, w.inv_freq, w.rope_attention_factor, w.rope_interleaved, true);
      rotate_pairs(k1.data(), s + delta, w.inv_freq, w.rope_attention_factor, w.rope_interleaved, true);
      r.max_relative_deviation_f32_angles =
          std::max(r.max_relative_deviation_f32_angles,
                   std::abs(dot(q1.data(), k1.data(), dr) - dot(q0.data(), k0.data(), dr)) / rope_bound);
    }
  }
  r.passed = r.max_split_deviation <= r.tolerance && r.max_relative_deviation <= r.tolerance;
  return r;
}

// ------------------------------------------------------------------------------------------
// 4. Absorption equivalence
// ------------------------------------------------------------------------------------------

AbsorptionResult check_absorption(const MlaLayerWeights& naive_w, const MlaLayerWeights& absorbed_w,
                                  int64_t context_tokens, uint64_t seed) {
  const MlaShape& s = naive_w.shape;
  const int64_t nh = s.n_head, r = s.kv_lora_rank, dn = s.qk_nope_head_dim, dr = s.qk_rope_head_dim,
                dv = s.v_head_dim, dq = s.qk_head_dim(), row = s.latent_row(), L = context_tokens;
  if (absorbed_w.kv_b_proj.size() != naive_w.kv_b_proj.size()) fail("check_absorption: the two weights differ in shape");
  std::mt19937_64 rng(seed);
  const std::vector<double> q = normal_vector(size_t(nh * dq), rng);      // [nh, dq], RoPE already applied
  const std::vector<double> latent = normal_vector(size_t(L * row), rng); // [L, r + dr] = [c_kv | k_pe]
  const double scale = naive_w.softmax_scale;
  AbsorptionResult res;
  res.context_tokens = L;
  res.n_head = nh;

  auto softmax = [](std::vector<double>& logits, int64_t n, int64_t rows) {
    for (int64_t h = 0; h < rows; ++h) {
      double* x = &logits[size_t(h * n)];
      const double m = *std::max_element(x, x + n);
      double sum = 0;
      for (int64_t u = 0; u < n; ++u) sum += (x[u] = std::exp(x[u] - m));
      for (int64_t u = 0; u < n; ++u) x[u] /= sum;
    }
  };

  // naive: kv[L, nh * (dn + dv)] = c · kv_b_projᵀ; K_h = [k_nope_h | k_pe], V_h = v_h
  std::vector<double> kv(static_cast<size_t>(L * nh * (dn + dv)));
  cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, blasint(L), blasint(nh * (dn + dv)), blasint(r), 1.0,
              latent.data(), blasint(row), naive_w.kv_b_proj.data(), blasint(r), 0.0, kv.data(), blasint(nh * (dn + dv)));
  std::vector<double> n_logits(static_cast<size_t>(nh * L)), n_out(static_cast<size_t>(nh * dv), 0.0);
  for (int64_t h = 0; h < nh; ++h)
    for (int64_t u = 0; u < L; ++u) {
      const double* k_nope = &kv[size_t((u * nh + h) * (dn + dv))];
      n_logits[size_t(h * L + u)] =
          scale * (dot(&q[size_t(h * dq)], k_nope, dn) + dot(&q[size_t(h * dq + dn)], &latent[size_t(u * row + r)], dr));
    }
  std::vector<double> n_weights = n_logits;
  softmax(n_weights, L, nh);
  for (int64_t h = 0; h < nh; ++h)
    for (int64_t u = 0; u < L; ++u) {
      const double p = n_weights[size_t(h * L + u)];
      const double* v = &kv[size_t((u * nh + h) * (dn + dv) + dn)];
      for (int64_t d = 0; d < dv; ++d) n_out[size_t(h * dv + d)] += p * v[d];
    }

  // absorbed: q_lat_h = W_UK[h]ᵀ q_nope_h [r]; logit = scale (q_lat·c + q_pe·k_pe);
  // o_lat_h = Σ p c; out_h = W_UV[h] o_lat_h
  std::vector<double> a_logits(static_cast<size_t>(nh * L)), a_out(static_cast<size_t>(nh * dv));
  std::vector<double> q_lat(static_cast<size_t>(r)), o_lat(static_cast<size_t>(r));
  for (int64_t h = 0; h < nh; ++h) {
    std::fill(q_lat.begin(), q_lat.end(), 0.0);
    const double* w_uk = absorbed_w.w_uk(h);
    for (int64_t d = 0; d < dn; ++d)
      for (int64_t c = 0; c < r; ++c) q_lat[size_t(c)] += q[size_t(h * dq + d)] * w_uk[d * r + c];
    for (int64_t u = 0; u < L; ++u)
      a_logits[size_t(h * L + u)] = scale * (dot(q_lat.data(), &latent[size_t(u * row)], r) +
                                             dot(&q[size_t(h * dq + dn)], &latent[size_t(u * row + r)], dr));
  }
  std::vector<double> a_weights = a_logits;
  softmax(a_weights, L, nh);
  for (int64_t h = 0; h < nh; ++h) {
    std::fill(o_lat.begin(), o_lat.end(), 0.0);
    for (int64_t u = 0; u < L; ++u)
      for (int64_t c = 0; c < r; ++c) o_lat[size_t(c)] += a_weights[size_t(h * L + u)] * latent[size_t(u * row + c)];
    const double* w_uv = absorbed_w.w_uv(h);
    for (int64_t d = 0; d < dv; ++d) a_out[size_t(h * dv + d)] = dot(w_uv + d * r, o_lat.data(), r);
  }
  res.logits_deviation = max_relative_deviation(a_logits, n_logits);
  res.weights_deviation = max_relative_deviation(a_weights, n_weights);
  res.output_deviation = max_relative_deviation(a_out, n_out);
  res.passed = res.logits_deviation <= res.tolerance && res.weights_deviation <= res.tolerance &&
               res.output_deviation <= res.tolerance;
  return res;
}

// ------------------------------------------------------------------------------------------
// 5. End-to-end decode loop
// ------------------------------------------------------------------------------------------

namespace {

constexpr uint32_t kPoisonBits = 0x7fc0dead;  // a quiet NaN with a payload no kernel produces

bool is_poison(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  return bits == kPoisonBits;
}

// Wraps the model the engine runs: poisons a fresh cache before its first step, and per step
// counts the cache elements written in every layer and keeps the last logits row.
class ObservedModel final : public CausalLM {
 public:
  explicit ObservedModel(CausalLM& inner) : inner_(inner) {}
  const ModelConfig& config() const override { return inner_.config(); }
  AttentionSpec attention_spec() const override { return inner_.attention_spec(); }

  void begin_run(bool record) {
    poison_next_ = true;
    record_ = record;
    last_logits.clear();
    if (record) {
      steps.clear();
      step_logits.clear();
    }
  }

  void forward(const ForwardBatch& batch, KvCacheMemory& kv_memory, float* logits) override {
    cpu::CpuKvCache& kv = cpu::as_cpu_kv_cache(kv_memory);
    const int64_t slots = kv.n_blocks() * kv.block_size_tokens(), row = kv.k_row_elements();
    if (poison_next_) {
      float poison;
      std::memcpy(&poison, &kPoisonBits, 4);
      for (int64_t l = 0; l < n_layer(); ++l) std::fill_n(kv.k(l), slots * row, poison);
      poison_next_ = false;
      cache_rows = row;
      cache_v_rows = kv.v_row_elements();
      cache_bytes = kv.bytes();
      cache_slots = slots;
    }
    std::vector<int64_t> before(static_cast<size_t>(n_layer()));
    if (record_)
      for (int64_t l = 0; l < n_layer(); ++l) before[size_t(l)] = count_written(kv.k(l), slots * row);
    inner_.forward(batch, kv, logits);
    const int64_t vocab = vocab_size(), n_rows = int64_t(batch.logits_indices.size());
    DecodeStepRecord step;
    step.n_tokens = batch.n_tokens();
    for (int64_t i = 0; i < n_rows * vocab; ++i) step.finite = step.finite && std::isfinite(logits[i]);
    if (n_rows > 0) last_logits.assign(logits + (n_rows - 1) * vocab, logits + n_rows * vocab);
    if (record_) {
      for (int64_t l = 0; l < n_layer(); ++l)
        step.elements_written.push_back(count_written(kv.k(l), slots * row) - before[size_t(l)]);
      steps.push_back(step);
      step_logits.push_back(last_logits);
    }
    all_finite = all_finite && step.finite;
  }

  static int64_t count_written(const float* x, int64_t n) {
    int64_t written = 0;
    for (int64_t i = 0; i < n; ++i) written += !is_poison(x[i]);
    return written;
  }

  std::vector<DecodeStepRecord> steps;
  std::vector<std::vector<float>> step_logits;  // last logits row of each recorded step
  std::vector<float> last_logits;
  int64_t cache_rows = 0, cache_v_rows = 0, cache_bytes = 0, cache_slots = 0;
  bool all_finite = true;

 private:
  CausalLM& inner_;
  bool poison_next_ = false, record_ = false;
};

double relative_deviation(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, ref = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::abs(double(a[i]) - double(b[i])));
    ref = std::max(ref, std::abs(double(b[i])));
  }
  return ref > 0 ? diff / ref : diff;
}

const char* path_name(MlaPath p) { return p == MlaPath::Naive ? "naive" : "absorbed"; }

}  // namespace

DecodeLoopResult check_decode_loop(const MlaModelFactory& make_model, const std::string& model_name, ThreadPool& pool,
                                   int64_t prompt_tokens, int64_t decode_steps) {
  DecodeLoopResult res;
  res.prompt_tokens = prompt_tokens;
  res.decode_steps = decode_steps;
  res.model = model_name;
  std::vector<std::vector<float>> decode_logits[2];
  for (MlaPath path : {MlaPath::Naive, MlaPath::Absorbed}) {
    std::unique_ptr<CausalLM> model = make_model(path);
    ObservedModel observed(*model);
    const AttentionSpec spec = model->attention_spec();
    res.n_layer = model->n_layer();
    DecodeLoopPathResult pr;
    pr.path = path;
    pr.expected_elements_per_token = spec.kv_lora_rank + spec.qk_rope_head_dim;
    if (spec.kind != AttentionKind::MLA) pr.problems.push_back("the model's attention is not MLA");

    std::vector<int32_t> prompt;
    for (int64_t i = 0; i < prompt_tokens; ++i) prompt.push_back(int32_t((i * 131 + 7) % model->vocab_size()));
    OfflineRunner runner(observed, RunnerOptions{}, pool);
    observed.begin_run(true);
    // max_new_tokens = decode_steps + 1: the prefill yields the first token, each decode step one more.
    const auto out = runner.run({{prompt, decode_steps + 1, false}}, false);
    pr.generated = out[0].generated;
    pr.steps = observed.steps;
    pr.cache_row_elements = observed.cache_rows;
    pr.v_row_elements = observed.cache_v_rows;
    if (int64_t(pr.steps.size()) != decode_steps + 1)
      pr.problems.push_back(fmt::format("{} engine steps, expected 1 prefill + {} decode", pr.steps.size(), decode_steps));

    // Cache growth: every step wrote exactly n_tokens * (kv_lora_rank + qk_rope) elements in every layer.
    pr.growth_exact = pr.cache_row_elements == pr.expected_elements_per_token && pr.v_row_elements == 0 &&
                      observed.cache_bytes == spec.kv_bytes_per_token(DType::F32, res.n_layer) * observed.cache_slots;
    if (pr.cache_row_elements != pr.expected_elements_per_token || pr.v_row_elements != 0)
      pr.problems.push_back(fmt::format("cache rows hold {} (+{} V) elements, expected {}", pr.cache_row_elements,
                                        pr.v_row_elements, pr.expected_elements_per_token));
    if (observed.cache_bytes != spec.kv_bytes_per_token(DType::F32, res.n_layer) * observed.cache_slots)
      pr.problems.push_back(fmt::format("the cache holds {} bytes for {} slots, expected {} (f32 latent rows)",
                                        observed.cache_bytes, observed.cache_slots,
                                        spec.kv_bytes_per_token(DType::F32, res.n_layer) * observed.cache_slots));
    for (size_t i = 0; i < pr.steps.size(); ++i)
      for (size_t l = 0; l < pr.steps[i].elements_written.size(); ++l) {
        const int64_t want = pr.steps[i].n_tokens * pr.expected_elements_per_token;
        if (pr.steps[i].elements_written[l] != want) {
          pr.growth_exact = false;
          pr.problems.push_back(fmt::format("step {} layer {}: {} cache elements written for {} tokens, expected {}", i,
                                            l, pr.steps[i].elements_written[l], pr.steps[i].n_tokens, want));
        }
      }

    // Each decode step vs a full recompute (one prefill of prompt + generated so far).
    for (int64_t k = 1; k < int64_t(pr.steps.size()); ++k) {
      std::vector<int32_t> seq = prompt;
      seq.insert(seq.end(), pr.generated.begin(), pr.generated.begin() + k);
      OfflineRunner fresh(observed, RunnerOptions{}, pool);
      observed.begin_run(false);
      const auto full = fresh.run({{seq, 0, false}}, true);
      const int64_t vocab = model->vocab_size();
      const std::vector<float> last(full[0].prompt_logits.end() - vocab, full[0].prompt_logits.end());
      const double dev = relative_deviation(observed.step_logits[size_t(k)], last);
      pr.steps[size_t(k)].recompute_relative_deviation = dev;
      pr.max_recompute_deviation = std::max(pr.max_recompute_deviation, dev);
      if (!(dev <= res.tolerance))
        pr.problems.push_back(fmt::format("decode step {}: logits differ from the full recompute by {:.3g} (relative)", k, dev));
    }
    pr.all_finite = observed.all_finite;
    if (!pr.all_finite) pr.problems.push_back("NaN or inf in the logits");
    pr.passed = pr.problems.empty();
    decode_logits[path == MlaPath::Naive ? 0 : 1] = observed.step_logits;
    res.paths.push_back(std::move(pr));
  }
  // The two paths against each other (informational; each already matched its recompute).
  for (size_t k = 0; k < decode_logits[0].size() && k < decode_logits[1].size(); ++k)
    res.naive_vs_absorbed_deviation =
        std::max(res.naive_vs_absorbed_deviation, relative_deviation(decode_logits[1][k], decode_logits[0][k]));
  res.passed = std::all_of(res.paths.begin(), res.paths.end(), [](const auto& p) { return p.passed; });
  return res;
}

// ------------------------------------------------------------------------------------------
// Summaries and the suite
// ------------------------------------------------------------------------------------------

namespace {
std::string thousands(int64_t v) {
  std::string s = std::to_string(v), out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i && (s.size() - i) % 3 == 0) out += ',';
    out += s[i];
  }
  return out;
}
}  // namespace

MlaCheckSummary summarize(const KvFootprintResult& r) {
  MlaCheckSummary s{"kv_footprint", "KV footprint", r.passed, "", {}, {}};
  const auto& mla = r.rows.back();
  s.figure = fmt::format("MLA {} B/token/layer (bf16), saving {:.2f}% vs MHA", thousands(mla.bytes_per_token),
                         r.saving_vs_mha_percent);
  if (r.saving_vs_gqa8_percent) s.figure += fmt::format(", {:.2f}% vs GQA-8", *r.saving_vs_gqa8_percent);
  s.figure += fmt::format("; {}K context per layer: MHA {:g} MiB, MLA {:g} MiB", r.context_tokens / 1024,
                          double(r.rows.front().cache_bytes_at_context) / (1024.0 * 1024.0),
                          double(mla.cache_bytes_at_context) / (1024.0 * 1024.0));
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& row : r.rows) {
    const double bytes = double(row.cache_bytes_at_context);
    s.details.push_back(fmt::format("{:<6} {:>7} B/token/layer{}   {}K context: {:>9} bytes = {:.1f} MB = {:g} MiB",
                                    row.name, thousands(row.bytes_per_token),
                                    row.published_bytes_per_token
                                        ? fmt::format(" (published {})", thousands(*row.published_bytes_per_token))
                                        : std::string(),
                                    r.context_tokens / 1024, thousands(row.cache_bytes_at_context), bytes / 1e6,
                                    bytes / (1024.0 * 1024.0)));
    nlohmann::json jr = {{"kind", row.name}, {"bytes_per_token_per_layer", row.bytes_per_token},
                         {"cache_bytes_per_layer_at_context", row.cache_bytes_at_context}};
    if (row.n_head_kv) jr["n_head_kv"] = row.n_head_kv;
    if (row.published_bytes_per_token) jr["published_bytes_per_token"] = *row.published_bytes_per_token;
    rows.push_back(jr);
  }
  for (const auto& m : r.mismatches) s.details.push_back("mismatch: " + m);
  s.json = {{"kv_dtype", "bf16"}, {"context_tokens", r.context_tokens}, {"rows", rows},
            {"saving_vs_mha_percent", r.saving_vs_mha_percent}, {"compared_with_published", r.compared_with_published},
            {"mismatches", r.mismatches}};
  if (r.saving_vs_gqa8_percent) s.json["saving_vs_gqa8_percent"] = *r.saving_vs_gqa8_percent;
  return s;
}

MlaCheckSummary summarize(const LowRankResult& r) {
  MlaCheckSummary s{"low_rank", "Low rank", r.passed, "", {}, {}};
  s.figure = fmt::format("numerical rank {} <= d_c {} (K_nope [{} x {}])", r.numerical_rank, r.rank_bound, r.rows, r.cols);
  if (!r.passed) s.figure = fmt::format("numerical rank {} > d_c {} (K_nope [{} x {}])", r.numerical_rank, r.rank_bound, r.rows, r.cols);
  s.details.push_back(fmt::format("sigma_max {:.4g}, smallest kept sigma_{} {:.4g} ({:.2e} sigma_max), first dropped {:.3g} "
                                  "({:.2e} sigma_max); cut at {:.1e} sigma_max",
                                  r.sigma_max, r.numerical_rank, r.sigma_min_kept, r.sigma_min_kept / r.sigma_max,
                                  r.sigma_first_dropped, r.sigma_first_dropped / r.sigma_max, r.relative_tolerance));
  s.json = {{"rows", r.rows}, {"cols", r.cols}, {"rank_bound", r.rank_bound}, {"numerical_rank", r.numerical_rank},
            {"relative_tolerance", r.relative_tolerance}, {"sigma_max", r.sigma_max},
            {"sigma_min_kept", r.sigma_min_kept}, {"sigma_first_dropped", r.sigma_first_dropped}};
  return s;
}

MlaCheckSummary summarize(const DecoupledRopeResult& r) {
  MlaCheckSummary s{"decoupled_rope", "Decoupled RoPE", r.passed, "", {}, {}};
  s.figure = fmt::format("max deviation {:.2e} (split), {:.2e} (relative position); tolerance {:.0e}",
                         r.max_split_deviation, r.max_relative_deviation, r.tolerance);
  std::string deltas;
  for (int64_t d : r.deltas) deltas += (deltas.empty() ? "" : ", ") + std::to_string(d);
  s.details.push_back(fmt::format("{} random (q, k) pairs at positions s <= t < 4096, shifted by Δ in {{{}}}; f64 angles",
                                  r.n_pairs, deltas));
  s.details.push_back(fmt::format("(with the angle rounded to f32 as transformers and the kernels compute it: {:.2e}; "
                                  "informational)",
                                  r.max_relative_deviation_f32_angles));
  s.json = {{"n_pairs", r.n_pairs}, {"deltas", r.deltas}, {"max_split_deviation", r.max_split_deviation},
            {"max_relative_position_deviation", r.max_relative_deviation},
            {"max_relative_position_deviation_f32_angles", r.max_relative_deviation_f32_angles},
            {"tolerance", r.tolerance}};
  return s;
}

MlaCheckSummary summarize(const AbsorptionResult& r) {
  MlaCheckSummary s{"absorption", "Absorption equivalence", r.passed, "", {}, {}};
  const double worst = std::max({r.logits_deviation, r.weights_deviation, r.output_deviation});
  s.figure = fmt::format("max relative deviation {:.2e} (f64, tolerance {:.0e})", worst, r.tolerance);
  s.details.push_back(fmt::format("1 query x {} context tokens x {} heads: logits {:.2e}, softmax weights {:.2e}, outputs {:.2e}",
                                  r.context_tokens, r.n_head, r.logits_deviation, r.weights_deviation, r.output_deviation));
  s.json = {{"context_tokens", r.context_tokens}, {"n_head", r.n_head}, {"logits_deviation", r.logits_deviation},
            {"weights_deviation", r.weights_deviation}, {"output_deviation", r.output_deviation},
            {"tolerance", r.tolerance}};
  return s;
}

MlaCheckSummary summarize(const DecodeLoopResult& r) {
  MlaCheckSummary s{"decode_loop", "End-to-end decode loop", r.passed, "", {}, {}};
  double worst = 0;
  for (const auto& p : r.paths) worst = std::max(worst, p.max_recompute_deviation);
  const int64_t per_token = r.paths.empty() ? 0 : r.paths[0].expected_elements_per_token;
  s.figure = fmt::format("cache +{} elements/token/layer, decode vs recompute {:.2e} (tolerance {:.0e})", per_token,
                         worst, r.tolerance);
  s.details.push_back(fmt::format("{}: prefill {} tokens + {} decode steps, {} layers", r.model, r.prompt_tokens,
                                  r.decode_steps, r.n_layer));
  nlohmann::json paths = nlohmann::json::array();
  for (const auto& p : r.paths) {
    std::string written;
    for (const auto& st : p.steps)
      written += fmt::format("{}{}", written.empty() ? "" : ", ",
                             st.elements_written.empty() ? 0 : st.elements_written[0]);
    s.details.push_back(fmt::format("{:<8} {}: elements written per step (layer 0) [{}], growth {}, finite {}, "
                                    "max decode-vs-recompute {:.2e}",
                                    path_name(p.path), p.passed ? "pass" : "FAIL", written,
                                    p.growth_exact ? "exact" : "WRONG", p.all_finite ? "yes" : "NO",
                                    p.max_recompute_deviation));
    for (const auto& problem : p.problems) s.details.push_back("  " + problem);
    nlohmann::json steps = nlohmann::json::array();
    for (const auto& st : p.steps) {
      nlohmann::json js = {{"n_tokens", st.n_tokens}, {"elements_written_per_layer", st.elements_written},
                           {"finite", st.finite}};
      if (st.recompute_relative_deviation >= 0) js["recompute_relative_deviation"] = st.recompute_relative_deviation;
      steps.push_back(js);
    }
    paths.push_back({{"path", path_name(p.path)}, {"passed", p.passed}, {"generated", p.generated},
                     {"cache_row_elements", p.cache_row_elements}, {"v_row_elements", p.v_row_elements},
                     {"expected_elements_per_token", p.expected_elements_per_token}, {"growth_exact", p.growth_exact},
                     {"all_finite", p.all_finite}, {"max_recompute_deviation", p.max_recompute_deviation},
                     {"steps", steps}, {"problems", p.problems}});
  }
  s.details.push_back(fmt::format("naive vs absorbed logits (every step): {:.2e} relative", r.naive_vs_absorbed_deviation));
  s.json = {{"model", r.model}, {"prompt_tokens", r.prompt_tokens}, {"decode_steps", r.decode_steps},
            {"n_layer", r.n_layer}, {"tolerance", r.tolerance}, {"paths", paths},
            {"naive_vs_absorbed_deviation", r.naive_vs_absorbed_deviation}};
  return s;
}

bool MlaVerifyReport::passed() const {
  return std::all_of(checks.begin(), checks.end(), [](const auto& c) { return c.passed; });
}

nlohmann::json MlaVerifyReport::to_json() const {
  nlohmann::json cs = nlohmann::json::array();
  for (const auto& c : checks)
    cs.push_back({{"name", c.name}, {"title", c.title}, {"passed", c.passed}, {"figure", c.figure}, {"data", c.json}});
  return {{"subject", subject}, {"passed", passed()}, {"checks", cs}};
}

std::string MlaVerifyReport::to_text() const {
  std::string out = subject + "\n";
  for (size_t i = 0; i < checks.size(); ++i) {
    const auto& c = checks[i];
    out += fmt::format("  {} {}. {:<24} {}\n", c.passed ? "[pass]" : "[FAIL]", i + 1, c.title, c.figure);
    for (const auto& d : c.details) out += "           " + d + "\n";
  }
  out += fmt::format("  {}\n", passed() ? "all checks passed" : "SOME CHECKS FAILED");
  return out;
}

namespace {

std::string dims_text(const MlaShape& s) {
  return fmt::format("n_h={}, d_nope={}, d_c={}, d_R={}, d_v={}", s.n_head, s.qk_nope_head_dim, s.kv_lora_rank,
                     s.qk_rope_head_dim, s.v_head_dim);
}

// A WeightSource that hands every tensor out once and remembers it, so several models
// (one per MlaPath) share one set of weights.
class SharedWeights final : public WeightSource {
 public:
  explicit SharedWeights(std::shared_ptr<WeightSource> inner, std::shared_ptr<std::map<std::string, TensorView>> cache)
      : inner_(std::move(inner)), cache_(std::move(cache)) {}
  TensorView get(const std::string& name, std::initializer_list<int64_t> shape) override {
    auto it = cache_->find(name);
    if (it == cache_->end()) it = cache_->emplace(name, inner_->get(name, shape)).first;
    return it->second;
  }
  bool has(const std::string& name) const override { return inner_->has(name); }

 private:
  std::shared_ptr<WeightSource> inner_;
  std::shared_ptr<std::map<std::string, TensorView>> cache_;
};

void run_attention_checks(MlaVerifyReport& rep, const MlaLayerWeights& w, const MlaVerifyOptions& o,
                          const std::optional<KvFootprintPublished>& published) {
  rep.checks.push_back(summarize(check_kv_footprint(w.shape, o.context_tokens, published)));
  rep.checks.push_back(summarize(check_low_rank(w, o.low_rank_tokens, o.seed)));
  rep.checks.push_back(summarize(check_decoupled_rope(w, o.seed)));
  rep.checks.push_back(summarize(check_absorption(w, o.absorption_tokens, o.seed)));
}

int64_t safetensors_bytes(const std::filesystem::path& dir) {
  int64_t total = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.is_regular_file() && e.path().extension() == ".safetensors") total += int64_t(e.file_size());
  return total;
}

}  // namespace

MlaModelFactory synthetic_mla_model_factory(const ModelConfig& config, uint64_t seed, ThreadPool& pool) {
  auto source = std::make_shared<SyntheticWeights>(DType::BF16, seed);
  auto cache = std::make_shared<std::map<std::string, TensorView>>();
  return [config, source, cache, &pool](MlaPath path) {
    ModelOptions o;
    o.mla_path = path;
    return build_causal_lm(config, std::make_unique<SharedWeights>(source, cache), pool, o);
  };
}

MlaVerifyReport verify_mla_random(const MlaVerifyOptions& o, ThreadPool& pool) {
  const ModelConfig v3 = ModelConfig::from_json(deepseek_v3_config_json(), "DeepSeek-V3 config");
  const MlaLayerWeights w = random_mla_layer_weights(v3, o.seed);
  MlaVerifyReport rep;
  rep.subject = fmt::format("DeepSeek-V3 attention dims ({}), {} weights", dims_text(w.shape), w.source);
  run_attention_checks(rep, w, o, KvFootprintPublished{});
  const nlohmann::json small = small_backbone_config_json(deepseek_v3_config_json());
  const ModelConfig sc = ModelConfig::from_json(small, "DeepSeek-V3 attention, small backbone");
  rep.checks.push_back(summarize(check_decode_loop(
      synthetic_mla_model_factory(sc, o.seed, pool),
      fmt::format("DeepSeek-V3 attention on a small backbone (hidden {}, {} dense layers, vocab {}), bf16 random weights",
                  sc.hidden_size, sc.n_layer, sc.vocab_size),
      pool, o.prompt_tokens, o.decode_steps)));
  return rep;
}

MlaVerifyReport verify_mla_checkpoint(const std::filesystem::path& model_dir, const MlaVerifyOptions& o,
                                      ThreadPool& pool, int64_t max_e2e_checkpoint_bytes) {
  const MlaLayerWeights w = load_mla_layer_weights(model_dir, 0);
  const ModelConfig config = ModelConfig::load(model_dir);
  MlaVerifyReport rep;
  rep.subject = fmt::format("checkpoint {} ({}, {}), layer 0 weights", model_dir.string(), config.model_type,
                            dims_text(w.shape));
  const bool is_v3_dims = w.shape.n_head == 128 && w.shape.kv_lora_rank == 512 && w.shape.qk_nope_head_dim == 128 &&
                          w.shape.qk_rope_head_dim == 64 && w.shape.v_head_dim == 128;
  run_attention_checks(rep, w, o, is_v3_dims ? std::optional(KvFootprintPublished{}) : std::nullopt);
  const int64_t bytes = safetensors_bytes(model_dir);
  if (bytes <= max_e2e_checkpoint_bytes) {
    MlaModelFactory factory = [&model_dir, &pool](MlaPath path) {
      ModelOptions mo;
      mo.mla_path = path;
      return load_causal_lm(model_dir, pool, mo);
    };
    rep.checks.push_back(summarize(check_decode_loop(factory, "the checkpoint itself", pool, o.prompt_tokens, o.decode_steps)));
  } else {
    std::ifstream in(model_dir / "config.json");
    const nlohmann::json small = small_backbone_config_json(nlohmann::json::parse(in));
    const ModelConfig sc = ModelConfig::from_json(small, (model_dir / "config.json").string() + " (small backbone)");
    rep.checks.push_back(summarize(check_decode_loop(
        synthetic_mla_model_factory(sc, o.seed, pool),
        fmt::format("its attention config on a small backbone with random weights (the checkpoint is {:.1f} GB, "
                    "above the {:.1f} GB end-to-end limit)",
                    double(bytes) / 1e9, double(max_e2e_checkpoint_bytes) / 1e9),
        pool, o.prompt_tokens, o.decode_steps)));
  }
  return rep;
}

}  // namespace latentserve
