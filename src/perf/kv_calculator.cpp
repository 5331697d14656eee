#include "perf/kv_calculator.h"

#include <fmt/format.h>

#include "core/error.h"

namespace latentserve::perf {

KvSize kv_size(const AttentionSpec& spec, int64_t n_layer, DType kv_dtype, int64_t context_tokens, int64_t batch) {
  KvSize s;
  s.bytes_per_token_per_layer = spec.kv_bytes_per_token(kv_dtype, 1);
  s.bytes_per_token = spec.kv_bytes_per_token(kv_dtype, n_layer);
  s.bytes_per_sequence = s.bytes_per_token * context_tokens;
  s.bytes_batch = s.bytes_per_sequence * batch;
  return s;
}

AttentionSpec mha_equivalent(const AttentionSpec& spec) {
  if (spec.kind != AttentionKind::MLA) return AttentionSpec::standard(spec.n_head, spec.n_head, spec.head_dim_qk, spec.head_dim_v);
  return AttentionSpec::standard(spec.n_head, spec.n_head, spec.head_dim_v, spec.head_dim_v);
}

double mla_equivalent_kv_heads(const AttentionSpec& spec) {
  return double(spec.kv_elements_per_token()) / double(2 * spec.head_dim_v);
}

TpKvLayout tp_kv_layout(const AttentionSpec& spec, int64_t n_layer, DType kv_dtype, int64_t tp) {
  if (tp <= 0) fail("--tp must be a positive integer, got {}", tp);
  if (spec.n_head % tp != 0) fail("--tp {} does not divide the {} attention heads", tp, spec.n_head);  // MLA too
  TpKvLayout l;
  l.tp = tp;
  l.query_heads_per_gpu = spec.n_head / tp;
  const int64_t per_layer = spec.kv_bytes_per_token(kv_dtype, 1);
  if (spec.kind == AttentionKind::MLA) {
    // Heads split, but every head reads the one latent: each rank stores all of it.
    l.kv_heads_per_gpu = 1;
    l.kv_head_replication = tp;
    l.latent_duplicated = tp > 1;
    l.bytes_per_token_per_gpu = per_layer * n_layer;
    if (tp > 1)
      l.note = fmt::format(
          "MLA under TP {}: the latent ({} elements/token/layer) is duplicated on all {} ranks, so the cache does "
          "not shrink with TP; data-parallel attention (each rank attends for its own 1/{} of the sequences, "
          "TP or EP for the rest) stores each latent once",
          tp, spec.kv_elements_per_token(), tp, tp);
    return l;
  }
  const int64_t n_kv = spec.n_head_kv;
  const KvHeadSplit split = split_kv_heads(spec.n_head, n_kv, tp, "--tp");
  l.kv_heads_per_gpu = split.kv_heads_per_rank;
  l.kv_head_replication = split.replication;
  l.bytes_per_token_per_gpu = per_layer / n_kv * l.kv_heads_per_gpu * n_layer;
  if (l.kv_head_replication > 1)
    l.note = fmt::format("TP {} > {} KV heads: each KV head is replicated on {} ranks ({}x the cache of an even split)",
                         tp, n_kv, l.kv_head_replication, l.kv_head_replication);
  return l;
}

DType parse_kv_dtype(const std::string& name) {
  if (name == "bf16" || name == "bfloat16") return DType::BF16;
  if (name == "f16" || name == "fp16" || name == "float16") return DType::F16;
  if (name == "f32" || name == "fp32" || name == "float32") return DType::F32;
  if (name == "fp8_e4m3" || name == "fp8" || name == "f8_e4m3") return DType::F8_E4M3;
  if (name == "fp8_e5m2" || name == "f8_e5m2") return DType::F8_E5M2;
  fail("--kv-cache-dtype: unknown '{}', expected bf16, f16, f32, fp8_e4m3 or fp8_e5m2", name);
}

std::string kv_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::BF16: return "bf16";
    case DType::F16: return "f16";
    case DType::F32: return "f32";
    case DType::F8_E4M3: return "fp8_e4m3";
    case DType::F8_E5M2: return "fp8_e5m2";
    default: return std::string(dtype_name(dtype));
  }
}

}  // namespace latentserve::perf
