#pragma once
// BlockTable: the blocks one sequence's KV lives in, in order. Token at position p
// lives in block blocks[p / block_size] at offset p % block_size; its slot (the row
// in the flat [n_blocks * block_size] cache) is block * block_size + offset.
#include <cstdint>
#include <vector>

#include "kv/block_pool.h"

namespace latentserve {

class BlockTable {
 public:
  explicit BlockTable(int64_t block_size_tokens) : block_size_tokens_(block_size_tokens) {}

  const std::vector<BlockId>& blocks() const { return blocks_; }
  int64_t n_blocks() const { return int64_t(blocks_.size()); }
  int64_t block_size_tokens() const { return block_size_tokens_; }
  int64_t capacity_tokens() const { return int64_t(blocks_.size()) * block_size_tokens_; }

  // Grows the table so that n_tokens fit; false (and nothing taken) when the pool is short.
  bool reserve(int64_t n_tokens, BlockPool& pool);
  // Appends a block the caller already holds a reference for (its reference moves here).
  void append(BlockId id) { blocks_.push_back(id); }
  // Returns every block to the pool, last block first (so that a prefix outlives its tail
  // in the LRU free list).
  void release_all(BlockPool& pool);

  int64_t slot(int64_t position) const;

 private:
  int64_t block_size_tokens_;
  std::vector<BlockId> blocks_;
};

}  // namespace latentserve
