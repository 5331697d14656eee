#pragma once
// Sequence: one stream of tokens in the engine and where its KV lives.
#include <cstdint>
#include <vector>

#include "kv/block_table.h"

namespace latentserve {

struct Sequence {
  Sequence(int64_t id, std::vector<int32_t> prompt, int64_t block_size_tokens)
      : id(id), tokens(std::move(prompt)), n_prompt_tokens(int64_t(tokens.size())), block_table(block_size_tokens) {}

  int64_t id;
  std::vector<int32_t> tokens;   // prompt, then generated tokens
  int64_t n_prompt_tokens;
  int64_t n_computed_tokens = 0;  // tokens whose K/V is already in the cache
  BlockTable block_table;

  int64_t n_uncomputed_tokens() const { return int64_t(tokens.size()) - n_computed_tokens; }
  int64_t n_generated_tokens() const { return int64_t(tokens.size()) - n_prompt_tokens; }
};

}  // namespace latentserve
