#include "backend/cpu/cpu_kv_cache.h"

namespace latentserve::cpu {

CpuKvCache::CpuKvCache(const AttentionSpec& spec, int64_t n_layer, int64_t n_blocks, int64_t block_size_tokens)
    : n_blocks_(n_blocks), block_size_tokens_(block_size_tokens) {
  const bool latent = spec.kind == AttentionKind::MLA;
  k_row_elements_ = latent ? spec.kv_lora_rank + spec.qk_rope_head_dim : spec.n_head_kv * spec.head_dim_qk;
  v_row_elements_ = latent ? 0 : spec.n_head_kv * spec.head_dim_v;
  const int64_t slots = n_blocks * block_size_tokens;
  k_.resize(size_t(n_layer));
  v_.resize(size_t(n_layer));
  for (int64_t l = 0; l < n_layer; ++l) {
    k_[size_t(l)].assign(size_t(slots * k_row_elements_), 0.0f);
    v_[size_t(l)].assign(size_t(slots * v_row_elements_), 0.0f);
  }
  bytes_ = spec.kv_bytes_per_token(DType::F32, n_layer) * slots;
}

}  // namespace latentserve::cpu
