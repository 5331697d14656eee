#pragma once
// AttentionSpec: the shape of one attention layer and of what it keeps in the KV cache.
// kv_bytes_per_token is the one formula the KV pool, the planner and the benchmarks share.
#include <cstdint>
#include <string>
#include <string_view>

#include "core/dtype.h"

namespace latentserve {

enum class AttentionKind {
  MHA,  // n_head_kv == n_head
  GQA,  // 1 < n_head_kv < n_head
  MQA,  // n_head_kv == 1
  MLA,  // latent: c_kv (kv_lora_rank) + k_pe (qk_rope_head_dim) per token
};

std::string attention_kind_name(AttentionKind kind);

struct AttentionSpec {
  AttentionKind kind = AttentionKind::MHA;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;    // standard kinds; 1 for MLA (one shared latent "head")
  int64_t head_dim_qk = 0;  // per-head width of q and k (MLA: nope + rope)
  int64_t head_dim_v = 0;
  int64_t kv_lora_rank = 0;      // MLA only
  int64_t qk_rope_head_dim = 0;  // MLA only

  // MHA/GQA/MQA chosen from the head counts; errors if n_head is not a multiple of n_head_kv.
  static AttentionSpec standard(int64_t n_head, int64_t n_head_kv, int64_t head_dim_qk, int64_t head_dim_v);
  static AttentionSpec latent(int64_t n_head, int64_t kv_lora_rank, int64_t qk_nope_head_dim,
                              int64_t qk_rope_head_dim, int64_t v_head_dim);

  int64_t group_size() const { return n_head / n_head_kv; }  // query heads per KV head
  // Elements cached per token in one layer: n_head_kv * (d_k + d_v), or kv_lora_rank + qk_rope_head_dim.
  int64_t kv_elements_per_token() const;
  // Bytes cached per token over n_layer layers in the given KV dtype.
  int64_t kv_bytes_per_token(DType kv_dtype, int64_t n_layer = 1) const;
};

// How `tp` ranks that split the query heads evenly share n_head_kv KV heads: split evenly
// when tp <= n_head_kv, else each KV head is held by the tp / n_head_kv ranks whose query
// heads read it. The one rule behind the model's sharding (model/tensor_parallel.h) and the
// planner's cache figures (perf/kv_calculator.h). Errors name `flag` (--tp,
// --tensor-parallel-size): tp must divide n_head, and n_head_kv must divide tp or be
// divisible by it.
struct KvHeadSplit {
  int64_t kv_heads_per_rank = 0;
  int64_t replication = 1;  // ranks holding each KV head
};
KvHeadSplit split_kv_heads(int64_t n_head, int64_t n_head_kv, int64_t tp, std::string_view flag);

}  // namespace latentserve
