#include "kv/block_pool.h"

#include <cassert>

#include "core/error.h"

namespace latentserve {

bool is_supported_block_size(int64_t b) { return b == 16 || b == 32 || b == 64 || b == 128; }

BlockPool::BlockPool(int64_t n_blocks, int64_t block_size_tokens) : block_size_tokens_(block_size_tokens) {
  if (!is_supported_block_size(block_size_tokens))
    fail("block size must be 16, 32, 64 or 128 tokens, got {}", block_size_tokens);
  if (n_blocks <= 0) fail("the KV block pool needs at least one block, got {}", n_blocks);
  ref_counts_.assign(size_t(n_blocks), 0);
  for (BlockId id = 0; id < BlockId(n_blocks); ++id) free_list_.push_back(id);
}

bool BlockPool::allocate(int64_t n, std::vector<BlockId>& out) {
  assert(n >= 0);
  if (n > n_free()) return false;
  for (int64_t i = 0; i < n; ++i) {
    BlockId id = free_list_.front();
    free_list_.pop_front();
    assert(ref_counts_[size_t(id)] == 0);
    ref_counts_[size_t(id)] = 1;
    out.push_back(id);
  }
  return true;
}

void BlockPool::retain(BlockId id) {
  assert(id >= 0 && id < BlockId(ref_counts_.size()) && ref_counts_[size_t(id)] > 0);
  ++ref_counts_[size_t(id)];
}

void BlockPool::release(BlockId id) {
  assert(id >= 0 && id < BlockId(ref_counts_.size()) && ref_counts_[size_t(id)] > 0);
  if (--ref_counts_[size_t(id)] == 0) free_list_.push_back(id);
}

int32_t BlockPool::ref_count(BlockId id) const {
  assert(id >= 0 && id < BlockId(ref_counts_.size()));
  return ref_counts_[size_t(id)];
}

}  // namespace latentserve
