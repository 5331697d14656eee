// DeepSeek-V2 / V2-Lite / V3 (and Kimi-K2, DeepSeek-R1: the V3 layout): pre-norm blocks
// of {RMSNorm, multi-head latent attention, RMSNorm, dense SwiGLU MLP for the first
// first_k_dense_replace layers and MoE after}. The KV cache holds only the latent
// [c_kv | k_pe] per token per layer. Checkpoint layers >= num_hidden_layers (V3's MTP
// layer) are not loaded.
#include <algorithm>
#include <cstring>
#include <optional>
#include <vector>

#include "attention/mla_attention.h"
#include "backend/cpu/activation.h"
#include "backend/cpu/norm.h"
#include "backend/cpu/rope.h"
#include "core/convert.h"
#include "core/error.h"
#include "model/architectures.h"
#include "model/linear_weight.h"
#include "model/moe.h"
#include "model/tensor_parallel.h"

namespace latentserve {
namespace {

struct DeepseekLayer {
  TensorView input_norm, post_attention_norm;
  // attention
  LinearWeight q_proj;                 // q_lora_rank == 0
  LinearWeight q_a_proj, q_b_proj;     // q_lora_rank > 0
  TensorView q_a_norm;
  LinearWeight kv_a_proj;              // [kv_lora_rank + qk_rope, hidden]
  TensorView kv_a_norm;                // [kv_lora_rank]
  TensorView kv_b_proj;                // [n_head * (qk_nope + v_head_dim), kv_lora_rank]
  LinearWeight o_proj;                 // [hidden, n_head * v_head_dim]
  std::optional<MlaAttention> mla;
  // feed-forward: dense or MoE
  bool is_moe = false;
  LinearWeight gate_proj, up_proj, down_proj;
  MoeWeights moe;
};

// An expert's SwiGLU MLP, of which this rank holds the intermediate columns `cols` (all of
// them at tp 1): gate/up rows, down columns.
ExpertWeights load_expert(WeightSource& w, const std::string& prefix, int64_t inter, int64_t hidden, TpRange cols) {
  return {w.get(prefix + ".gate_proj.weight", {inter, hidden}).slice(0, cols.begin, cols.end),
          w.get(prefix + ".up_proj.weight", {inter, hidden}).slice(0, cols.begin, cols.end),
          w.get(prefix + ".down_proj.weight", {hidden, inter}).slice(1, cols.begin, cols.end)};
}

class DeepseekModel final : public CausalLM {
 public:
  DeepseekModel(ModelConfig config, std::unique_ptr<WeightSource> weights, const ModelOptions& options,
                ThreadPool& pool)
      : config_(std::move(config)),
        weights_(std::move(weights)),
        pool_(pool),
        path_(options.mla_path),
        tp_(options.tp_rank) {
    const ModelConfig& c = config_;
    if (!c.mla) fail("model_type '{}' needs the MLA fields (kv_lora_rank, ...)", c.model_type);
    const MlaConfig& m = *c.mla;
    // A tensor-parallel rank holds its heads (q_b / q, kv_b, o columns), its slice of every
    // MLP's columns and of the vocabulary; the latent projections and the router are
    // replicated, so every rank caches the whole latent (model/tensor_parallel.h).
    const TpRange heads = tp_query_heads(c.n_head, tp_);
    vocab_ = tp_split(c.vocab_size, tp_);
    const bool rank0 = tp_.rank == 0;
    shape_ = {heads.size(), m.kv_lora_rank, m.qk_nope_head_dim, m.qk_rope_head_dim, m.v_head_dim};
    spec_ = AttentionSpec::latent(heads.size(), m.kv_lora_rank, m.qk_nope_head_dim, m.qk_rope_head_dim, m.v_head_dim);
    const int64_t H = c.hidden_size, nh = c.n_head, dq = shape_.qk_head_dim(), dkvb = m.qk_nope_head_dim + m.v_head_dim;
    WeightSource& w = *weights_;
    embed_ = w.get("model.embed_tokens.weight", {c.vocab_size, H});
    final_norm_ = w.get("model.norm.weight", {H});
    if (c.tie_word_embeddings)
      lm_head_.weight = embed_.slice(0, vocab_.begin, vocab_.end);
    else
      lm_head_.load_rows(w, "lm_head", c.vocab_size, H, false, vocab_.begin, vocab_.end);

    layers_.resize(size_t(c.n_layer));
    for (int64_t l = 0; l < c.n_layer; ++l) {
      DeepseekLayer& L = layers_[size_t(l)];
      const std::string p = "model.layers." + std::to_string(l);
      L.input_norm = w.get(p + ".input_layernorm.weight", {H});
      L.post_attention_norm = w.get(p + ".post_attention_layernorm.weight", {H});
      const std::string a = p + ".self_attn";
      if (m.q_lora_rank > 0) {
        L.q_a_proj.load(w, a + ".q_a_proj", m.q_lora_rank, H, c.attention_bias);
        L.q_a_norm = w.get(a + ".q_a_layernorm.weight", {m.q_lora_rank});
        L.q_b_proj.load_rows(w, a + ".q_b_proj", nh * dq, m.q_lora_rank, false, heads.begin * dq, heads.end * dq);
      } else {
        L.q_proj.load_rows(w, a + ".q_proj", nh * dq, H, false, heads.begin * dq, heads.end * dq);
      }
      L.kv_a_proj.load(w, a + ".kv_a_proj_with_mqa", shape_.latent_row(), H, c.attention_bias);
      L.kv_a_norm = w.get(a + ".kv_a_layernorm.weight", {m.kv_lora_rank});
      L.kv_b_proj = w.get(a + ".kv_b_proj.weight", {nh * dkvb, m.kv_lora_rank}).slice(0, heads.begin * dkvb, heads.end * dkvb);
      L.o_proj.load_columns(w, a + ".o_proj", H, nh * m.v_head_dim, c.attention_bias, heads.begin * m.v_head_dim,
                            heads.end * m.v_head_dim, rank0);
      L.mla.emplace(shape_, L.kv_b_proj, float(c.softmax_scale));

      L.is_moe = c.moe && c.moe->is_moe_layer(l);
      if (L.is_moe) {
        const MoeConfig& moe = *c.moe;
        const std::string g = p + ".mlp";
        L.moe.router = w.get(g + ".gate.weight", {moe.n_routed_experts, H});
        if (moe.topk_method == MoeTopk::NoauxTc)
          L.moe.e_score_correction_bias = w.get_f32(g + ".gate.e_score_correction_bias", moe.n_routed_experts);
        const int64_t inter = moe.moe_intermediate_size, shared_inter = inter * moe.n_shared_experts;
        for (int64_t e = 0; e < moe.n_routed_experts; ++e)
          L.moe.experts.push_back(load_expert(w, g + ".experts." + std::to_string(e), inter, H, tp_split(inter, tp_)));
        if (moe.n_shared_experts > 0) {
          L.moe.has_shared = true;
          L.moe.shared = load_expert(w, g + ".shared_experts", shared_inter, H, tp_split(shared_inter, tp_));
        }
      } else {
        const int64_t I = c.intermediate_size;
        const TpRange cols = tp_split(I, tp_);
        L.gate_proj.load_rows(w, p + ".mlp.gate_proj", I, H, false, cols.begin, cols.end);
        L.up_proj.load_rows(w, p + ".mlp.up_proj", I, H, false, cols.begin, cols.end);
        L.down_proj.load_columns(w, p + ".mlp.down_proj", H, I, false, cols.begin, cols.end, rank0);
      }
    }
    rope_ = compute_rope_tables(c.rope, m.qk_rope_head_dim, c.max_position_embeddings, c.max_position_embeddings);
  }

  const ModelConfig& config() const override { return config_; }
  AttentionSpec attention_spec() const override { return spec_; }

  void forward(const ForwardBatch& batch, KvCacheMemory& kv_memory, float* logits) override {
    cpu::CpuKvCache& kv = cpu::as_cpu_kv_cache(kv_memory);
    const ModelConfig& c = config_;
    const int64_t T = batch.n_tokens(), H = c.hidden_size;
    if (T == 0) return;
    if (kv.k_row_elements() != shape_.latent_row())
      fail("KV cache rows hold {} elements, MLA needs {}", kv.k_row_elements(), shape_.latent_row());
    residual_.resize(size_t(T * H));
    x_.resize(size_t(T * H));
    const size_t row_bytes = size_t(H) * dtype_size_bytes(embed_.dtype);
    for (int64_t t = 0; t < T; ++t) {
      const int32_t id = batch.token_ids[size_t(t)];
      if (id < 0 || id >= c.vocab_size)
        fail("token id {} at batch row {} is outside the vocabulary [0, {})", id, t, c.vocab_size);
      convert_to_f32(static_cast<const char*>(embed_.data) + size_t(id) * row_bytes, embed_.dtype,
                     &residual_[size_t(t * H)], H);
    }
    for (int64_t l = 0; l < c.n_layer; ++l) {
      DeepseekLayer& L = layers_[size_t(l)];
      if (l == 0)
        cpu::rms_norm(residual_.data(), T, H, L.input_norm, c.rms_norm_eps, x_.data(), pool_);
      else
        cpu::add_rms_norm(residual_.data(), x_.data(), T, H, L.input_norm, c.rms_norm_eps, x_.data(), pool_);
      attention(L, batch, kv, l);  // x_ -> x_
      cpu::add_rms_norm(residual_.data(), x_.data(), T, H, L.post_attention_norm, c.rms_norm_eps, x_.data(), pool_);
      feed_forward(L, T);  // x_ -> x_
    }
    const int64_t n_out = int64_t(batch.logits_indices.size());
    std::vector<float> last(static_cast<size_t>(n_out * H));
    for (int64_t i = 0; i < n_out; ++i) {
      const int64_t row = batch.logits_indices[size_t(i)];
      for (int64_t d = 0; d < H; ++d) last[size_t(i * H + d)] = residual_[size_t(row * H + d)] + x_[size_t(row * H + d)];
    }
    cpu::rms_norm(last.data(), n_out, H, final_norm_, c.rms_norm_eps, last.data(), pool_);
    tp_lm_head(tp_, lm_head_, vocab_, last.data(), n_out, c.vocab_size, logits, pool_);  // [n_out, vocab]
  }

 private:
  // x_[T, H] (normed) -> x_[T, H]; writes this step's latent rows into layer `layer` of `kv`.
  void attention(DeepseekLayer& L, const ForwardBatch& batch, cpu::CpuKvCache& kv, int64_t layer) {
    const ModelConfig& c = config_;
    const MlaConfig& m = *c.mla;
    const AttentionMetadata& meta = batch.attention;
    const int64_t T = batch.n_tokens(), nh = shape_.n_head, r = m.kv_lora_rank, dr = m.qk_rope_head_dim,
                  dn = m.qk_nope_head_dim, dq = shape_.qk_head_dim(), row = shape_.latent_row();
    q_.resize(size_t(T * nh * dq));
    if (m.q_lora_rank > 0) {  // q = q_b(norm(q_a(x)))
      q_a_.resize(size_t(T * m.q_lora_rank));
      L.q_a_proj(x_.data(), T, q_a_.data(), pool_);
      cpu::rms_norm(q_a_.data(), T, m.q_lora_rank, L.q_a_norm, c.rms_norm_eps, q_a_.data(), pool_);
      L.q_b_proj(q_a_.data(), T, q_.data(), pool_);  // [T, nh * dq]
    } else {
      L.q_proj(x_.data(), T, q_.data(), pool_);
    }
    // kv_a[T, r + dr] = [c_kv | k_pe]; c_kv <- kv_a_layernorm(c_kv)
    kv_a_.resize(size_t(T * row));
    L.kv_a_proj(x_.data(), T, kv_a_.data(), pool_);
    c_kv_.resize(size_t(T * r));
    for (int64_t t = 0; t < T; ++t) std::memcpy(&c_kv_[size_t(t * r)], &kv_a_[size_t(t * row)], size_t(r) * 4);
    cpu::rms_norm(c_kv_.data(), T, r, L.kv_a_norm, c.rms_norm_eps, c_kv_.data(), pool_);
    for (int64_t t = 0; t < T; ++t) std::memcpy(&kv_a_[size_t(t * row)], &c_kv_[size_t(t * r)], size_t(r) * 4);
    // Decoupled RoPE on q_pe (the last dr of every head) and on k_pe (one shared head).
    const auto layout = c.rope.interleaved ? cpu::RopeLayout::Interleaved : cpu::RopeLayout::Neox;
    cpu::apply_rope({q_.data() + dn, nh * dq, T, nh, dq, dr, batch.positions.data(), rope_.inv_freq.data(),
                     rope_.attention_factor, layout});
    cpu::apply_rope({kv_a_.data() + r, row, T, 1, dr, dr, batch.positions.data(), rope_.inv_freq.data(),
                     rope_.attention_factor, layout});
    // Cache the latent rows [c_kv | k_pe] of the new tokens (quantising).
    kv.write(layer, kv_a_.data(), row, nullptr, 0, meta.slot_mapping.data(), T);
    attn_.resize(size_t(T * nh * m.v_head_dim));
    L.mla->forward(path_, q_.data(), meta, kv.k_rows(layer), attn_.data(), pool_);  // [T, nh, dv]
    L.o_proj(attn_.data(), T, x_.data(), pool_);                          // [T, H]
    tp_all_reduce(tp_, x_.data(), T * c.hidden_size);  // the ranks' partial sums over their heads
  }

  void feed_forward(DeepseekLayer& L, int64_t T) {
    const ModelConfig& c = config_;
    const int64_t H = c.hidden_size;
    ffn_out_.resize(size_t(T * H));
    if (L.is_moe) {
      moe_forward(*c.moe, L.moe, x_.data(), T, H, ffn_out_.data(), pool_);
    } else {  // [T, I] gate, up -> silu(gate) * up -> [T, H]
      const int64_t I = L.gate_proj.out_features();  // this rank's columns
      gate_.resize(size_t(T * I));
      up_.resize(size_t(T * I));
      L.gate_proj(x_.data(), T, gate_.data(), pool_);
      L.up_proj(x_.data(), T, up_.data(), pool_);
      cpu::silu_mul(gate_.data(), up_.data(), gate_.data(), T * I);
      L.down_proj(gate_.data(), T, ffn_out_.data(), pool_);
    }
    tp_all_reduce(tp_, ffn_out_.data(), T * H);  // the ranks' partial sums over their MLP columns
    std::swap(x_, ffn_out_);
  }

  ModelConfig config_;
  std::unique_ptr<WeightSource> weights_;
  ThreadPool& pool_;
  MlaPath path_;
  TpRank tp_;
  TpRange vocab_;  // this rank's LM-head rows
  MlaShape shape_;  // n_head: this rank's heads
  AttentionSpec spec_;
  TensorView embed_, final_norm_;
  LinearWeight lm_head_;
  std::vector<DeepseekLayer> layers_;
  RopeTables rope_;
  std::vector<float> residual_, x_, q_, q_a_, kv_a_, c_kv_, attn_, gate_, up_, ffn_out_;
};

}  // namespace

std::unique_ptr<CausalLM> make_deepseek(ModelConfig config, std::unique_ptr<WeightSource> weights,
                                        const ModelOptions& options, ThreadPool& pool) {
  return std::make_unique<DeepseekModel>(std::move(config), std::move(weights), options, pool);
}

}  // namespace latentserve
