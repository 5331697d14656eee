#include "attention/attention_spec.h"

#include "core/error.h"

namespace latentserve {

std::string attention_kind_name(AttentionKind kind) {
  switch (kind) {
    case AttentionKind::MHA: return "MHA";
    case AttentionKind::GQA: return "GQA";
    case AttentionKind::MQA: return "MQA";
    case AttentionKind::MLA: return "MLA";
  }
  return "?";
}

AttentionSpec AttentionSpec::standard(int64_t n_head, int64_t n_head_kv, int64_t head_dim_qk, int64_t head_dim_v) {
  if (n_head <= 0 || n_head_kv <= 0 || head_dim_qk <= 0 || head_dim_v <= 0)
    fail("attention shape must be positive: n_head={} n_head_kv={} head_dim_qk={} head_dim_v={}", n_head, n_head_kv,
         head_dim_qk, head_dim_v);
  if (n_head % n_head_kv != 0)
    fail("n_head ({}) must be a multiple of n_head_kv ({})", n_head, n_head_kv);
  AttentionSpec s;
  s.kind = n_head_kv == n_head ? AttentionKind::MHA : n_head_kv == 1 ? AttentionKind::MQA : AttentionKind::GQA;
  s.n_head = n_head;
  s.n_head_kv = n_head_kv;
  s.head_dim_qk = head_dim_qk;
  s.head_dim_v = head_dim_v;
  return s;
}

AttentionSpec AttentionSpec::latent(int64_t n_head, int64_t kv_lora_rank, int64_t qk_nope_head_dim,
                                    int64_t qk_rope_head_dim, int64_t v_head_dim) {
  if (n_head <= 0 || kv_lora_rank <= 0 || qk_nope_head_dim <= 0 || qk_rope_head_dim <= 0 || v_head_dim <= 0)
    fail("MLA shape must be positive: n_head={} kv_lora_rank={} qk_nope_head_dim={} qk_rope_head_dim={} v_head_dim={}",
         n_head, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim);
  AttentionSpec s;
  s.kind = AttentionKind::MLA;
  s.n_head = n_head;
  s.n_head_kv = 1;
  s.head_dim_qk = qk_nope_head_dim + qk_rope_head_dim;
  s.head_dim_v = v_head_dim;
  s.kv_lora_rank = kv_lora_rank;
  s.qk_rope_head_dim = qk_rope_head_dim;
  return s;
}

int64_t AttentionSpec::kv_elements_per_token() const {
  if (kind == AttentionKind::MLA) return kv_lora_rank + qk_rope_head_dim;
  return n_head_kv * (head_dim_qk + head_dim_v);
}

int64_t AttentionSpec::kv_bytes_per_token(DType kv_dtype, int64_t n_layer) const {
  return kv_elements_per_token() * int64_t(dtype_size_bytes(kv_dtype)) * n_layer;
}

KvHeadSplit split_kv_heads(int64_t n_head, int64_t n_head_kv, int64_t tp, std::string_view flag) {
  if (n_head % tp != 0) fail("{} {} does not divide the {} attention heads", flag, tp, n_head);
  if (tp > n_head_kv && tp % n_head_kv != 0)
    fail("{} {} is larger than and not a multiple of the {} KV heads", flag, tp, n_head_kv);
  if (tp <= n_head_kv && n_head_kv % tp != 0) fail("{} {} does not divide the {} KV heads", flag, tp, n_head_kv);
  if (tp > n_head_kv) return {1, tp / n_head_kv};
  return {n_head_kv / tp, 1};
}

}  // namespace latentserve
