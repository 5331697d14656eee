#include "model/causal_lm.h"

#include <algorithm>

#include "core/error.h"

namespace latentserve {

std::unique_ptr<KvCacheMemory> CausalLM::make_kv_cache(int64_t n_blocks, int64_t block_size_tokens,
                                                       const cpu::KvCacheOptions& options) const {
  return std::make_unique<cpu::CpuKvCache>(attention_spec(), n_layer(), n_blocks, block_size_tokens, options);
}

int64_t CausalLM::kv_block_bytes(int64_t block_size_tokens, const cpu::KvCacheOptions& options) const {
  const cpu::CpuKvCache one_block(attention_spec(), n_layer(), 1, block_size_tokens, options);
  return int64_t(one_block.bytes_per_token() * double(block_size_tokens) + 0.5);
}

void CausalLM::check_choices(const ForwardBatch& batch, std::span<const TokenChoice> choices) {
  if (!choices.empty() && choices.size() != batch.logits_indices.size())
    fail("forward_choose: {} token choices for {} logits rows", choices.size(), batch.logits_indices.size());
}

void CausalLM::forward_choose(const ForwardBatch& batch, KvCacheMemory& kv, std::span<const TokenChoice> choices,
                              int32_t* next_tokens) {
  check_choices(batch, choices);
  const int64_t n_rows = int64_t(batch.logits_indices.size()), vocab = vocab_size();
  for (const TokenChoice& c : choices)
    if (c.temperature > 0)
      fail("forward_choose: a {} model takes greedy rows only (temperature 0, found {}); sample with the Sampler",
           device(), c.temperature);
  std::vector<float> logits(size_t(n_rows * vocab));
  forward(batch, kv, logits.data());
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* row = logits.data() + r * vocab;
    next_tokens[r] = int32_t(std::max_element(row, row + vocab) - row);  // first maximum: lowest id on ties
  }
}

}  // namespace latentserve
