#pragma once
// The memory behind the KV block ids on the CPU: per layer, a K and a V array of
// [n_blocks * block_size, n_head_kv, head_dim] f32 rows (slot-major). kv/ decides
// which slots a token uses; this only owns the bytes.
// Seam for later: an fp8/bf16 element type with scales beside the blocks.
#include <cstdint>
#include <vector>

#include "attention/attention_spec.h"

namespace latentserve::cpu {

class CpuKvCache {
 public:
  CpuKvCache(const AttentionSpec& spec, int64_t n_layer, int64_t n_blocks, int64_t block_size_tokens);

  float* k(int64_t layer) { return k_[size_t(layer)].data(); }
  float* v(int64_t layer) { return v_[size_t(layer)].data(); }
  int64_t n_blocks() const { return n_blocks_; }
  int64_t block_size_tokens() const { return block_size_tokens_; }
  int64_t bytes() const { return bytes_; }

  // How many blocks fit in `budget_bytes` for this spec.
  static int64_t blocks_for_budget(const AttentionSpec& spec, int64_t n_layer, int64_t block_size_tokens,
                                   int64_t budget_bytes);

 private:
  int64_t n_blocks_, block_size_tokens_, bytes_;
  std::vector<std::vector<float>> k_, v_;
};

}  // namespace latentserve::cpu
