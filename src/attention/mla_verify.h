#pragma once
// The five MLA verification checks of `latentserve verify-mla` (issue 3, part 5), as library
// functions that return structured results. docs/mla.md explains each one and its tolerance.
//
//   1. KV footprint      bytes per token per layer of MHA / GQA-8 / MQA / MLA on one backbone,
//                        through AttentionSpec::kv_bytes_per_token, against published figures.
//   2. Low rank          K_nope rebuilt from the latent ([L > d_c tokens, n_head * qk_nope]) has
//                        numerical rank <= kv_lora_rank (f64 singular values).
//   3. Decoupled RoPE    content + rope score == score of the concatenated vectors, and the rope
//                        score depends only on t - s (f64, the model's inv_freq).
//   4. Absorption        naive (materialised K, V) vs absorbed (W_UK into q, W_UV after the
//                        weighted sum) logits, softmax weights, outputs in f64: <= 1e-12 relative.
//   5. Decode loop       the real engine (OfflineRunner + the model): prefill, then decode steps;
//                        the latent cache grows by exactly kv_lora_rank + qk_rope_head_dim elements
//                        per token per layer, no NaN, each step's logits equal a full recompute.
//
// Each check takes its inputs explicitly, so a test can hand it a broken input and see it fail.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "attention/mla_attention.h"
#include "core/thread_pool.h"
#include "model/causal_lm.h"
#include "model/model_config.h"

namespace latentserve {

// DeepSeek-V3's attention dimensions: 128 heads, kv_lora_rank 512, qk_nope 128, qk_rope 64, v 128.
MlaShape deepseek_v3_mla_shape();
// deepseek-ai/DeepSeek-V3 config.json (published values; YaRN factor 40, rope_interleave default).
nlohmann::json deepseek_v3_config_json();
// A small model with the attention of `base` (a deepseek config.json): hidden_size 1024,
// 2 layers, dense SwiGLU MLP of 2048 (no MoE layer), vocab 512, everything else kept.
nlohmann::json small_backbone_config_json(const nlohmann::json& base);

// One MLA layer's attention weights in f64, and the RoPE / softmax numbers of its model.
struct MlaLayerWeights {
  MlaShape shape;
  std::vector<double> kv_b_proj;  // [n_head * (qk_nope + v_head_dim), kv_lora_rank], as stored
  std::vector<double> inv_freq;   // [qk_rope / 2], the model's f32 values widened
  double rope_attention_factor = 1.0;
  bool rope_interleaved = true;
  double softmax_scale = 0;
  std::string source;  // "random (seed 1234)", "DIR: model.layers.0.self_attn.kv_b_proj.weight"

  // W_UK[h] = rows [h (dn + dv), h (dn + dv) + dn); W_UV[h] = the next dv rows.
  const double* w_uk(int64_t head) const;  // [qk_nope, kv_lora_rank]
  const double* w_uv(int64_t head) const;  // [v_head_dim, kv_lora_rank]
};

// kv_b_proj ~ U(-a, a), a = 1/sqrt(kv_lora_rank) (as SyntheticWeights); RoPE and softmax scale
// from `config` (a deepseek ModelConfig).
MlaLayerWeights random_mla_layer_weights(const ModelConfig& config, uint64_t seed);
// Layer `layer`'s kv_b_proj of a checkpoint folder (F32/BF16/F16, or F8_E4M3 with DeepSeek's
// 128x128 block weight_scale_inv), with the RoPE and softmax scale of its config.json.
MlaLayerWeights load_mla_layer_weights(const std::filesystem::path& model_dir, int64_t layer = 0);

// ---- 1. KV footprint ----
struct KvFootprintRow {
  std::string name;  // "MHA", "GQA-8", "MQA", "MLA"
  int64_t n_head_kv = 0;  // standard kinds; 0 for MLA
  int64_t bytes_per_token = 0;         // per layer, kv dtype
  int64_t cache_bytes_at_context = 0;  // per layer, at `context_tokens`
  std::optional<int64_t> published_bytes_per_token;
};
struct KvFootprintPublished {  // DeepSeek-V3 in bf16 (the figures quoted in issue 3)
  int64_t mha = 65536, gqa8 = 4096, mqa = 512, mla = 1152;
  double saving_vs_mha_percent = 98.24, saving_vs_gqa8_percent = 71.88;  // rounded to 0.01
  double mha_cache_mib_at_8k = 512, mla_cache_mib_at_8k = 9;
};
struct KvFootprintResult {
  bool passed = false;
  int64_t context_tokens = 0;
  std::vector<KvFootprintRow> rows;  // MHA, GQA-8 (when n_head % 8 == 0 and n_head > 8), MQA, MLA
  double saving_vs_mha_percent = 0;
  std::optional<double> saving_vs_gqa8_percent;
  bool compared_with_published = false;
  std::vector<std::string> mismatches;  // what differed from the published figures / the formula
};
// The "same backbone": n_head heads of qk_nope_head_dim (K) and v_head_dim (V); bf16.
KvFootprintResult check_kv_footprint(const MlaShape& shape, int64_t context_tokens = 8192,
                                     const std::optional<KvFootprintPublished>& published = std::nullopt);

// ---- 2. Low rank ----
struct LowRankResult {
  bool passed = false;
  int64_t rows = 0, cols = 0, rank_bound = 0;
  int64_t numerical_rank = 0;
  double relative_tolerance = 0;  // sigma_i counts when sigma_i > relative_tolerance * sigma_max
  double sigma_max = 0, sigma_min_kept = 0;
  double sigma_first_dropped = 0;  // 0 when nothing was dropped
};
// Singular values of keys [rows, cols] (row-major) in f64 from the eigenvalues of the rows x rows
// Gram matrix K Kᵀ (LAPACK dsyev). The Gram route squares the condition number, so the
// tolerance is sqrt(rows * eps_f64) * 10 relative to sigma_max (about 4e-6 for 640 rows);
// the kept/dropped singular values printed show the gap the rank rests on.
LowRankResult measure_key_rank(const std::vector<double>& keys, int64_t rows, int64_t cols, int64_t rank_bound);
// K_nope[L, n_head * qk_nope] = C W_UKᵀ from random latents C [L, kv_lora_rank] (L > kv_lora_rank).
std::vector<double> reconstruct_keys_from_latent(const MlaLayerWeights& w, int64_t n_tokens, uint64_t seed);
LowRankResult check_low_rank(const MlaLayerWeights& w, int64_t n_tokens, uint64_t seed);

// ---- 3. Decoupled RoPE ----
// Rotates x [qk_rope] in place to position `pos`, in f64.
using RopeRotation = std::function<void(double* x, int64_t pos)>;
// The model's rotation: angle = pos * inv_freq[i] in f64, cos/sin times attention_factor,
// interleaved pairs (2i, 2i+1) or neox pairs (i, i + d/2) as the model lays them out.
RopeRotation model_rope_rotation(const MlaLayerWeights& w);
struct DecoupledRopeResult {
  bool passed = false;
  int64_t n_pairs = 0;
  std::vector<int64_t> deltas;
  double max_split_deviation = 0;     // |concat score - (content + rope)| / max |score|
  double max_relative_deviation = 0;  // |rope(t, s) - rope(t + Δ, s + Δ)| / (|q_pe| |k_pe| factor²)
  // The same with the angle rounded to f32 (float(pos) * inv_freq), as transformers and the
  // engine's kernels compute it: informational, not part of the pass criterion (the rounding of a
  // large angle breaks exact relativity by ~1e-4 of the score at 32K; the model was trained so).
  double max_relative_deviation_f32_angles = 0;
  double tolerance = 1e-12;  // f64 angles are exact (an integer times an f32), so only cos/sin round
};
// rotate_q / rotate_k: the rotation under test for queries and keys (default: the model's).
DecoupledRopeResult check_decoupled_rope(const MlaLayerWeights& w, uint64_t seed, const RopeRotation& rotate_q = {},
                                         const RopeRotation& rotate_k = {});

// ---- 4. Absorption equivalence ----
struct AbsorptionResult {
  bool passed = false;
  int64_t context_tokens = 0, n_head = 0;
  double logits_deviation = 0;   // max |naive - absorbed| / max |naive|, over all heads
  double weights_deviation = 0;  // softmax weights
  double output_deviation = 0;   // [n_head, v_head_dim] outputs
  double tolerance = 1e-12;
};
// One query over `context_tokens` cached latent rows, all heads, in f64. The naive path uses
// `naive`'s kv_b_proj, the absorbed path folds `absorbed`'s (the same weights unless a test
// hands it a broken copy); queries, latents and scale come from the seed and `naive`.
AbsorptionResult check_absorption(const MlaLayerWeights& naive, const MlaLayerWeights& absorbed,
                                  int64_t context_tokens, uint64_t seed);
inline AbsorptionResult check_absorption(const MlaLayerWeights& w, int64_t context_tokens, uint64_t seed) {
  return check_absorption(w, w, context_tokens, seed);
}

// ---- 5. End-to-end decode loop ----
struct DecodeStepRecord {
  int64_t n_tokens = 0;                        // tokens in this forward
  std::vector<int64_t> elements_written;       // per layer: cache elements newly written
  double recompute_relative_deviation = -1;    // decode steps: max |decode - recompute| / max |recompute|
  bool finite = true;                          // logits free of NaN/inf
};
struct DecodeLoopPathResult {
  MlaPath path = MlaPath::Absorbed;
  bool passed = false;
  std::vector<DecodeStepRecord> steps;  // [0] is the prefill
  std::vector<int32_t> generated;
  int64_t expected_elements_per_token = 0;  // kv_lora_rank + qk_rope_head_dim
  int64_t cache_row_elements = 0;           // CpuKvCache::k_row_elements(); no V rows
  int64_t v_row_elements = 0;
  bool growth_exact = false, all_finite = false;
  double max_recompute_deviation = 0;
  std::vector<std::string> problems;
};
struct DecodeLoopResult {
  bool passed = false;
  int64_t prompt_tokens = 0, decode_steps = 0, n_layer = 0;
  std::string model;  // what ran
  std::vector<DecodeLoopPathResult> paths;  // naive, absorbed
  double naive_vs_absorbed_deviation = 0;   // logits of every step (prefill and decode), max relative
  double tolerance = 1e-4;
};
using MlaModelFactory = std::function<std::unique_ptr<CausalLM>(MlaPath path)>;
// Models of `config` with bf16 random weights (SyntheticWeights(seed)), made once and shared by
// every model the factory builds.
MlaModelFactory synthetic_mla_model_factory(const ModelConfig& config, uint64_t seed, ThreadPool& pool);
// Runs prompt_tokens of prefill and decode_steps decode steps through OfflineRunner for each
// path. The cache is poisoned (a NaN pattern) before the first step, so unwritten rows are
// counted exactly and any read of one shows up as NaN; each decode step's logits are compared
// with a fresh prefill of the whole sequence so far.
DecodeLoopResult check_decode_loop(const MlaModelFactory& make_model, const std::string& model_name,
                                   ThreadPool& pool, int64_t prompt_tokens = 8, int64_t decode_steps = 4);

// ---- the whole suite ----
struct MlaCheckSummary {
  std::string name;    // "kv_footprint", "low_rank", "decoupled_rope", "absorption", "decode_loop"
  std::string title;   // "KV footprint"
  bool passed = false;
  std::string figure;               // one line: the headline number(s)
  std::vector<std::string> details; // further lines for the text report
  nlohmann::json json;              // every figure of the check
};
struct MlaVerifyReport {
  std::string subject;  // "DeepSeek-V3 attention dims, random weights (seed 1234)"
  std::vector<MlaCheckSummary> checks;
  bool passed() const;
  nlohmann::json to_json() const;
  std::string to_text() const;
};
MlaCheckSummary summarize(const KvFootprintResult& r);
MlaCheckSummary summarize(const LowRankResult& r);
MlaCheckSummary summarize(const DecoupledRopeResult& r);
MlaCheckSummary summarize(const AbsorptionResult& r);
MlaCheckSummary summarize(const DecodeLoopResult& r);

struct MlaVerifyOptions {
  uint64_t seed = 1234;
  int64_t low_rank_tokens = 640;     // > kv_lora_rank (at least kv_lora_rank + 128 is used)
  int64_t absorption_tokens = 64;
  int64_t context_tokens = 8192;     // check 1's per-layer cache size
  int64_t prompt_tokens = 8, decode_steps = 4;
};
// DeepSeek-V3 attention dims with random weights; check 5 on a synthetic model of
// small_backbone_config_json(deepseek_v3_config_json()) with bf16 random weights.
MlaVerifyReport verify_mla_random(const MlaVerifyOptions& options, ThreadPool& pool);
// A checkpoint's layer-0 weights; check 5 runs the checkpoint itself when its weight files are
// at most `max_e2e_checkpoint_bytes`, else a small backbone with its attention config.
MlaVerifyReport verify_mla_checkpoint(const std::filesystem::path& model_dir, const MlaVerifyOptions& options,
                                      ThreadPool& pool, int64_t max_e2e_checkpoint_bytes = int64_t(4) << 30);

}  // namespace latentserve
