#pragma once
// Multi-head latent attention (DeepSeek-V2/V3) on the CPU.
//
// Per token: c_kv = kv_a_layernorm(x W_DKV) [kv_lora_rank], k_pe = RoPE(x W_KR) [qk_rope_head_dim];
// only [c_kv | k_pe] is cached. Per head h, kv_b_proj holds W_UK[h] [qk_nope, kv_lora_rank]
// and W_UV[h] [v_head_dim, kv_lora_rank].
//  naive:    K_h = [c_kv W_UK[h]ᵀ | k_pe], V_h = c_kv W_UV[h]ᵀ, then standard attention
//            (K and V materialised for every context token, as transformers does);
//  absorbed: q_lat_h = q_nope_h W_UK[h] [kv_lora_rank]; score = q_lat_h·c_kv + q_pe_h·k_pe,
//            i.e. MQA over the cached rows with one (kv_lora_rank + rope)-wide key whose
//            first kv_lora_rank elements are the value; o_h = (Σ p c_kv) W_UV[h]ᵀ.
//            Nothing per token is materialised beyond the cache.
#include <cstdint>
#include <vector>

#include "attention/attention_metadata.h"
#include "backend/cpu/kv_quant.h"
#include "core/tensor_view.h"
#include "core/thread_pool.h"

namespace latentserve {

// Auto: naive for a batch of short prefills (every sequence's context <= kMlaNaiveMaxContext
// and no decode token), absorbed otherwise — decode always runs absorbed.
enum class MlaPath { Auto, Naive, Absorbed };

// Crossover measured by bench_mla_decode on the 2-vCPU CPU (docs/mla.md): since the absorbed
// path runs its per-head projections in one parallel_for, one prefill from scratch ties up to
// 64 tokens and absorbed wins from 128 (1.27x; it was naive up to 128 before). Naive's cost
// grows with the context already cached, so the rule uses seq_len.
inline constexpr int64_t kMlaNaiveMaxContext = 64;
MlaPath choose_mla_path(MlaPath requested, const AttentionMetadata& meta);

struct MlaShape {
  int64_t n_head = 0;
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
  int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  int64_t latent_row() const { return kv_lora_rank + qk_rope_head_dim; }
};

class MlaAttention {
 public:
  // kv_b_proj: [n_head * (qk_nope + v_head_dim), kv_lora_rank] as stored (F32/BF16/F16).
  MlaAttention(const MlaShape& shape, const TensorView& kv_b_proj, float softmax_scale);

  // q:      [T, n_head, qk_nope + qk_rope] with RoPE already applied to the rope part
  // latent: the layer's cache rows, [n_slots, kv_lora_rank + qk_rope] (this step's rows already
  //         written), in any KV element type: the absorbed path dequantises inside the paged
  //         kernel, the naive path dequantises the rows it gathers
  // out:    [T, n_head, v_head_dim]
  void forward(MlaPath path, const float* q, const AttentionMetadata& meta, const cpu::KvRows& latent, float* out,
               ThreadPool& pool);
  // An f32 latent cache [n_slots, kv_lora_rank + qk_rope].
  void forward(MlaPath path, const float* q, const AttentionMetadata& meta, const float* latent, float* out,
               ThreadPool& pool);

 private:
  void forward_absorbed(const float* q, const AttentionMetadata& meta, const cpu::KvRows& latent, float* out,
                        ThreadPool& pool);
  void forward_naive(const float* q, const AttentionMetadata& meta, const cpu::KvRows& latent, float* out,
                     ThreadPool& pool);

  MlaShape shape_;
  TensorView kv_b_proj_;
  float softmax_scale_;
  std::vector<float> w_uk_t_;  // [n_head, kv_lora_rank, qk_nope]: W_UK[h]ᵀ, so q_lat = linear(q_nope, W_UK[h]ᵀ)
  // scratch; head_scratch_: pool.n_threads() slots of [T, max(dn, r)] in + [T, max(r, dv)] out
  std::vector<float> head_scratch_, q_abs_, o_lat_, k_tmp_, v_tmp_, c_tmp_, pe_tmp_, kv_tmp_;
};

}  // namespace latentserve
