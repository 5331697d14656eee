#include "backend/cpu/cpu_kv_cache.h"

#include "core/error.h"

namespace latentserve::cpu {

CpuKvCache::CpuKvCache(const AttentionSpec& spec, int64_t n_layer, int64_t n_blocks, int64_t block_size_tokens)
    : n_blocks_(n_blocks), block_size_tokens_(block_size_tokens) {
  if (spec.kind == AttentionKind::MLA) fail("the CPU KV cache does not hold MLA latents yet");
  const int64_t slots = n_blocks * block_size_tokens;
  k_.resize(size_t(n_layer));
  v_.resize(size_t(n_layer));
  for (int64_t l = 0; l < n_layer; ++l) {
    k_[size_t(l)].assign(size_t(slots * spec.n_head_kv * spec.head_dim_qk), 0.0f);
    v_[size_t(l)].assign(size_t(slots * spec.n_head_kv * spec.head_dim_v), 0.0f);
  }
  bytes_ = spec.kv_bytes_per_token(DType::F32, n_layer) * slots;
}

int64_t CpuKvCache::blocks_for_budget(const AttentionSpec& spec, int64_t n_layer, int64_t block_size_tokens,
                                      int64_t budget_bytes) {
  return budget_bytes / (spec.kv_bytes_per_token(DType::F32, n_layer) * block_size_tokens);
}

}  // namespace latentserve::cpu
