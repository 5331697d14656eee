#pragma once
// KV cache sizes: per token per layer, per token (all layers), per sequence, for a batch,
// and how the cache spreads over tensor-parallel ranks. Every figure comes from
// AttentionSpec::kv_bytes_per_token, the formula the KV pool itself uses.
#include <cstdint>
#include <string>

#include "attention/attention_spec.h"
#include "core/dtype.h"

namespace latentserve::perf {

struct KvSize {
  int64_t bytes_per_token_per_layer = 0;
  int64_t bytes_per_token = 0;     // all layers
  int64_t bytes_per_sequence = 0;  // bytes_per_token * context_tokens
  int64_t bytes_batch = 0;         // bytes_per_sequence * batch
};
KvSize kv_size(const AttentionSpec& spec, int64_t n_layer, DType kv_dtype, int64_t context_tokens, int64_t batch);

// An MLA layer as MHA over the same heads, each head_dim_v wide for K and V: what the
// cache would hold without the latent (DeepSeek-V2: 128 heads x (128 + 128)).
AttentionSpec mha_equivalent(const AttentionSpec& spec);
// How many standard KV heads (each head_dim_v wide for K and V) hold as many bytes as one
// token's latent: (kv_lora_rank + qk_rope_head_dim) / (2 * head_dim_v); 2.25 for DeepSeek.
double mla_equivalent_kv_heads(const AttentionSpec& spec);

// How the cache is laid out over tp ranks that split the attention heads.
struct TpKvLayout {
  int64_t tp = 1;
  int64_t query_heads_per_gpu = 0;
  int64_t kv_heads_per_gpu = 0;  // MLA: 1 (the whole latent)
  int64_t kv_head_replication = 1;  // copies of each KV head across ranks (tp / n_head_kv when tp > n_head_kv)
  bool latent_duplicated = false;   // MLA: every rank keeps the full latent of every sequence
  int64_t bytes_per_token_per_gpu = 0;  // all layers
  std::string note;
};
// Errors name --tp: tp must divide n_head, and n_head_kv must divide tp or tp divide n_head_kv.
TpKvLayout tp_kv_layout(const AttentionSpec& spec, int64_t n_layer, DType kv_dtype, int64_t tp);

// "bf16", "f16"/"fp16", "f32", "fp8_e4m3", "fp8_e5m2" -> DType; error naming --kv-cache-dtype.
DType parse_kv_dtype(const std::string& name);
std::string kv_dtype_name(DType dtype);

}  // namespace latentserve::perf
