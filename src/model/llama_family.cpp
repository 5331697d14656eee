// Llama-family decoder (llama, mistral, qwen2, qwen3): pre-norm blocks of
// {RMSNorm, GQA attention with RoPE, RMSNorm, SwiGLU MLP}. qwen2 adds q/k/v biases;
// qwen3 adds a per-head RMSNorm on q and k before RoPE.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/activation.h"
#include "backend/cpu/linear.h"
#include "backend/cpu/norm.h"
#include "attention/paged_attention_call.h"
#include "backend/cpu/rope.h"
#include "core/convert.h"
#include "core/error.h"
#include "model/architectures.h"
#include "model/linear_weight.h"
#include "model/tensor_parallel.h"

namespace latentserve {
namespace {

struct Layer {
  TensorView input_norm, post_attention_norm, q_norm, k_norm;
  LinearWeight q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj;
};

class LlamaFamilyModel final : public CausalLM {
 public:
  // A tensor-parallel rank (tp.size > 1) holds its query and KV heads, its slice of the MLP
  // columns and of the vocabulary (model/tensor_parallel.h).
  LlamaFamilyModel(ModelConfig config, std::unique_ptr<WeightSource> weights, const TpRank& tp, ThreadPool& pool)
      : config_(std::move(config)), weights_(std::move(weights)), pool_(pool), tp_(tp) {
    const ModelConfig& c = config_;
    if (c.hidden_act != "silu") fail("hidden_act '{}' is not supported (expected silu)", c.hidden_act);
    heads_ = tp_heads(c.n_head, c.n_head_kv, tp);
    inter_ = tp_split(c.intermediate_size, tp);
    vocab_ = tp_split(c.vocab_size, tp);
    spec_ = AttentionSpec::standard(heads_.q.size(), heads_.kv.size(), c.head_dim, c.head_dim);  // what this rank caches and attends
    const int64_t H = c.hidden_size, I = c.intermediate_size, hd = c.head_dim, dq = c.n_head * hd,
                  dkv = c.n_head_kv * hd;
    WeightSource& w = *weights_;
    embed_ = w.get("model.embed_tokens.weight", {c.vocab_size, H});
    final_norm_ = w.get("model.norm.weight", {H});
    if (c.tie_word_embeddings) {
      lm_head_.weight = embed_.slice(0, vocab_.begin, vocab_.end);
    } else {
      lm_head_.load_rows(w, "lm_head", c.vocab_size, H, false, vocab_.begin, vocab_.end);
    }
    const bool rank0 = tp.rank == 0;
    layers_.resize(size_t(c.n_layer));
    for (int64_t l = 0; l < c.n_layer; ++l) {
      Layer& L = layers_[size_t(l)];
      const std::string p = "model.layers." + std::to_string(l);
      L.input_norm = w.get(p + ".input_layernorm.weight", {H});
      L.post_attention_norm = w.get(p + ".post_attention_layernorm.weight", {H});
      const std::string a = p + ".self_attn";
      L.q_proj.load_rows(w, a + ".q_proj", dq, H, c.attention_bias, heads_.q.begin * hd, heads_.q.end * hd);
      L.k_proj.load_rows(w, a + ".k_proj", dkv, H, c.attention_bias, heads_.kv.begin * hd, heads_.kv.end * hd);
      L.v_proj.load_rows(w, a + ".v_proj", dkv, H, c.attention_bias, heads_.kv.begin * hd, heads_.kv.end * hd);
      L.o_proj.load_columns(w, a + ".o_proj", H, dq, c.o_proj_bias, heads_.q.begin * hd, heads_.q.end * hd, rank0);
      if (c.qk_norm) {
        L.q_norm = w.get(p + ".self_attn.q_norm.weight", {c.head_dim});
        L.k_norm = w.get(p + ".self_attn.k_norm.weight", {c.head_dim});
      }
      L.gate_proj.load_rows(w, p + ".mlp.gate_proj", I, H, c.mlp_bias, inter_.begin, inter_.end);
      L.up_proj.load_rows(w, p + ".mlp.up_proj", I, H, c.mlp_bias, inter_.begin, inter_.end);
      L.down_proj.load_columns(w, p + ".mlp.down_proj", H, I, c.mlp_bias, inter_.begin, inter_.end, rank0);
    }
    if (c.rope.type != RopeType::DynamicNtk)  // static tables: seq_len plays no part
      rope_ = compute_rope_tables(c.rope, c.head_dim, c.max_position_embeddings, c.max_position_embeddings);
  }

  const ModelConfig& config() const override { return config_; }
  AttentionSpec attention_spec() const override { return spec_; }

  void forward(const ForwardBatch& batch, KvCacheMemory& kv_memory, float* logits) override {
    cpu::CpuKvCache& kv = cpu::as_cpu_kv_cache(kv_memory);
    const ModelConfig& c = config_;
    const int64_t T = batch.n_tokens(), H = c.hidden_size, I = inter_.size(), nh = heads_.q.size(), nkv = heads_.kv.size(),
                  hd = c.head_dim;
    const AttentionMetadata& meta = batch.attention;
    if (int64_t(batch.positions.size()) != T || meta.n_tokens() != T)
      fail("forward batch: {} tokens but {} positions and {} slots", T, batch.positions.size(), meta.n_tokens());
    if (T == 0) return;
    residual_.resize(size_t(T * H));
    x_.resize(size_t(T * H));
    q_.resize(size_t(T * nh * hd));
    k_.resize(size_t(T * nkv * hd));
    v_.resize(size_t(T * nkv * hd));
    attn_.resize(size_t(T * nh * hd));
    gate_.resize(size_t(T * I));
    up_.resize(size_t(T * I));

    // residual[T, H] = embed_tokens[token_ids]
    const size_t row_bytes = size_t(H) * dtype_size_bytes(embed_.dtype);
    for (int64_t t = 0; t < T; ++t) {
      const int32_t id = batch.token_ids[size_t(t)];
      if (id < 0 || id >= c.vocab_size) fail("token id {} at batch row {} is outside the vocabulary [0, {})", id, t, c.vocab_size);
      convert_to_f32(static_cast<const char*>(embed_.data) + size_t(id) * row_bytes, embed_.dtype, &residual_[size_t(t * H)], H);
    }

    for (int64_t l = 0; l < c.n_layer; ++l) {
      const Layer& L = layers_[size_t(l)];
      // x = norm(residual), folding in the previous layer's MLP output
      if (l == 0)
        cpu::rms_norm(residual_.data(), T, H, L.input_norm, c.rms_norm_eps, x_.data(), pool_);
      else
        cpu::add_rms_norm(residual_.data(), x_.data(), T, H, L.input_norm, c.rms_norm_eps, x_.data(), pool_);
      attention(l, L, batch, kv);  // x_ -> x_ ([T, H] attention output)
      cpu::add_rms_norm(residual_.data(), x_.data(), T, H, L.post_attention_norm, c.rms_norm_eps, x_.data(), pool_);
      // [T, I] gate, up -> silu(gate) * up -> [T, H]
      L.gate_proj(x_.data(), T, gate_.data(), pool_);
      L.up_proj(x_.data(), T, up_.data(), pool_);
      cpu::silu_mul(gate_.data(), up_.data(), gate_.data(), T * I);
      L.down_proj(gate_.data(), T, x_.data(), pool_);
      tp_all_reduce(tp_, x_.data(), T * H);  // the ranks' partial sums over their MLP columns
    }

    // Final norm and LM head on the rows that need logits only.
    const int64_t n_out = int64_t(batch.logits_indices.size());
    std::vector<float> last(size_t(n_out * H));
    for (int64_t i = 0; i < n_out; ++i) {
      const int64_t row = batch.logits_indices[size_t(i)];
      if (row < 0 || row >= T) fail("logits index {} is outside the batch of {} tokens", row, T);
      for (int64_t d = 0; d < H; ++d) last[size_t(i * H + d)] = residual_[size_t(row * H + d)] + x_[size_t(row * H + d)];
    }
    cpu::rms_norm(last.data(), n_out, H, final_norm_, c.rms_norm_eps, last.data(), pool_);
    tp_lm_head(tp_, lm_head_, vocab_, last.data(), n_out, c.vocab_size, logits, pool_);  // [n_out, vocab]
  }

 private:
  // x_[T, H] (normed hidden) -> x_[T, H] (o_proj of the attention output).
  void attention(int64_t layer, const Layer& L, const ForwardBatch& batch, cpu::CpuKvCache& kv) {
    const ModelConfig& c = config_;
    const int64_t T = batch.n_tokens(), nh = heads_.q.size(), nkv = heads_.kv.size(), hd = c.head_dim;
    const AttentionMetadata& meta = batch.attention;
    L.q_proj(x_.data(), T, q_.data(), pool_);  // [T, nh * hd]
    L.k_proj(x_.data(), T, k_.data(), pool_);  // [T, nkv * hd]
    L.v_proj(x_.data(), T, v_.data(), pool_);  // [T, nkv * hd]
    if (c.qk_norm) {  // per-head RMSNorm: rows of hd
      cpu::rms_norm(q_.data(), T * nh, hd, L.q_norm, c.rms_norm_eps, q_.data(), pool_);
      cpu::rms_norm(k_.data(), T * nkv, hd, L.k_norm, c.rms_norm_eps, k_.data(), pool_);
    }
    const auto layout = c.rope.interleaved ? cpu::RopeLayout::Interleaved : cpu::RopeLayout::Neox;
    for (int64_t seq = 0; seq < meta.n_seqs(); ++seq) {
      const int64_t begin = meta.query_start_loc[size_t(seq)], n = meta.query_start_loc[size_t(seq) + 1] - begin;
      const RopeTables& rope = rope_tables_for(batch, seq);
      for (auto [data, heads] : {std::pair{q_.data(), nh}, std::pair{k_.data(), nkv}})  // [n, heads, hd] in place
        cpu::apply_rope({data + begin * heads * hd, heads * hd, n, heads, hd, rope.rotary_dim,
                         batch.positions.data() + begin, rope.inv_freq.data(), rope.attention_factor, layout});
    }
    kv.write(layer, k_.data(), nkv * hd, v_.data(), nkv * hd, meta.slot_mapping.data(), T);  // quantises
    cpu::PagedAttentionParams p = paged_attention_params(meta);
    p.q = q_.data();
    p.q_token_stride = nh * hd;
    p.k_cache = kv.k_rows(layer);
    p.v_cache = kv.v_rows(layer);
    p.out = attn_.data();
    p.n_head = nh;
    p.n_head_kv = nkv;
    p.head_dim_qk = hd;
    p.head_dim_v = hd;
    p.softmax_scale = float(c.softmax_scale);
    p.sliding_window = c.sliding_window.value_or(0);
    cpu::paged_attention(p, pool_);
    L.o_proj(attn_.data(), T, x_.data(), pool_);  // [T, H]
    tp_all_reduce(tp_, x_.data(), T * c.hidden_size);  // the ranks' partial sums over their heads
  }

  // RoPE tables for one sequence of the batch. Dynamic NTK grows its base with the
  // sequence length as transformers does: a whole prompt uses its full length (even
  // when prefill is chunked), each decode token its position + 1.
  const RopeTables& rope_tables_for(const ForwardBatch& batch, int64_t seq) {
    if (config_.rope.type != RopeType::DynamicNtk) return rope_;
    const int64_t seq_len = std::max(batch.attention.seq_lens[size_t(seq)], batch.prompt_lens[size_t(seq)]);
    if (dynamic_rope_seq_len_ != seq_len) {
      rope_ = compute_rope_tables(config_.rope, config_.head_dim, config_.max_position_embeddings, seq_len);
      dynamic_rope_seq_len_ = seq_len;
    }
    return rope_;
  }

  ModelConfig config_;
  std::unique_ptr<WeightSource> weights_;  // owns the memory the views point into
  ThreadPool& pool_;
  TpRank tp_;
  TpHeads heads_;        // this rank's query and KV heads (all of them at tp 1)
  TpRange inter_, vocab_;  // this rank's MLP columns and LM-head rows
  AttentionSpec spec_;
  TensorView embed_, final_norm_;
  LinearWeight lm_head_;
  std::vector<Layer> layers_;
  RopeTables rope_;
  int64_t dynamic_rope_seq_len_ = -1;  // the seq_len rope_ was computed for (dynamic NTK only)
  // activations, reused across steps
  std::vector<float> residual_, x_, q_, k_, v_, attn_, gate_, up_;
};

}  // namespace

std::unique_ptr<CausalLM> make_llama_family(ModelConfig config, std::unique_ptr<WeightSource> weights,
                                            const ModelOptions& options, ThreadPool& pool) {
  return std::make_unique<LlamaFamilyModel>(std::move(config), std::move(weights), options.tp_rank, pool);
}

}  // namespace latentserve
