#pragma once
// The memory behind the KV block ids on the CPU, per layer, slot-major
// ([n_blocks * block_size] slots, one row per slot):
//   standard attention: K rows of n_head_kv * head_dim_qk and V rows of n_head_kv * head_dim_v;
//   MLA: one latent row of kv_lora_rank + qk_rope_head_dim ([c_kv | k_pe]), no V.
// kv/ decides which slots a token uses; this only owns the bytes.
// Seam for later: an fp8/bf16 element type with scales beside the blocks.
#include <cstdint>
#include <vector>

#include "attention/attention_spec.h"

namespace latentserve::cpu {

class CpuKvCache {
 public:
  CpuKvCache(const AttentionSpec& spec, int64_t n_layer, int64_t n_blocks, int64_t block_size_tokens);

  float* k(int64_t layer) { return k_[size_t(layer)].data(); }  // MLA: the latent rows
  float* v(int64_t layer) { return v_[size_t(layer)].data(); }  // MLA: nullptr
  int64_t k_row_elements() const { return k_row_elements_; }
  int64_t v_row_elements() const { return v_row_elements_; }
  int64_t n_blocks() const { return n_blocks_; }
  int64_t block_size_tokens() const { return block_size_tokens_; }
  int64_t bytes() const { return bytes_; }

 private:
  int64_t n_blocks_, block_size_tokens_, k_row_elements_, v_row_elements_, bytes_;
  std::vector<std::vector<float>> k_, v_;
};

}  // namespace latentserve::cpu
