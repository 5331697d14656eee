#pragma once
// BlockPool: hands out ids of fixed-size KV blocks. Pure host bookkeeping: the
// backend owns the memory behind the ids. Blocks carry a reference count so that
// sequences can later share blocks (prefix caching, n > 1).
#include <cstdint>
#include <deque>
#include <vector>

namespace latentserve {

using BlockId = int32_t;

class BlockPool {
 public:
  BlockPool(int64_t n_blocks, int64_t block_size_tokens);

  int64_t n_blocks() const { return int64_t(ref_counts_.size()); }
  int64_t block_size_tokens() const { return block_size_tokens_; }
  int64_t n_free() const { return int64_t(free_list_.size()); }

  // Takes n blocks (ref count 1 each) and appends their ids to `out`. When fewer than
  // n are free nothing is taken and false is returned: allocation never fails halfway.
  bool allocate(int64_t n, std::vector<BlockId>& out);
  // Adds a reference to a block that is in use.
  void retain(BlockId id);
  // Drops one reference; the block returns to the free list when none are left.
  void release(BlockId id);
  int32_t ref_count(BlockId id) const;

 private:
  int64_t block_size_tokens_;
  std::vector<int32_t> ref_counts_;
  std::deque<BlockId> free_list_;  // oldest-freed first (LRU order, for prefix-cache eviction later)
};

// Valid block sizes for the paged cache (the --block-size flag).
bool is_supported_block_size(int64_t block_size_tokens);

}  // namespace latentserve
