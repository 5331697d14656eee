#pragma once
// BlockPool: hands out ids of fixed-size KV blocks. Pure host bookkeeping: the
// backend owns the memory behind the ids (size it by n_blocks()).
//
// - Id 0 is the null block: never handed out, never freed; usable as padding in block
//   tables. So ids run over [0, n_blocks()) and n_blocks() = n_usable_blocks() + 1.
// - Blocks carry a reference count (sequences share blocks: prefix caching, n > 1).
// - Free blocks sit in a list in LRU order: allocate() takes the block freed longest
//   ago. A free block may still hold a cached prefix block (the PrefixCache knows which);
//   retain() on such a block takes it back out of the free list (a cache hit), and
//   allocate() reusing it is its eviction.
// - allocate() is all-or-nothing and never throws for lack of blocks.
#include <cstdint>
#include <vector>

namespace latentserve {

using BlockId = int32_t;
inline constexpr BlockId kNullBlock = 0;

class BlockPool {
 public:
  // n_usable_blocks blocks can be handed out; one more (id 0, the null block) exists.
  BlockPool(int64_t n_usable_blocks, int64_t block_size_tokens);

  int64_t n_blocks() const { return int64_t(ref_counts_.size()); }  // ids [0, n_blocks()), null included
  int64_t n_usable_blocks() const { return n_blocks() - 1; }
  int64_t block_size_tokens() const { return block_size_tokens_; }
  int64_t n_free() const { return n_free_; }
  int64_t n_used() const { return n_usable_blocks() - n_free_; }

  // Takes n blocks from the LRU end of the free list (ref count 1 each) and appends their
  // ids to `out`. When fewer than n are free nothing is taken and false is returned.
  bool allocate(int64_t n, std::vector<BlockId>& out);
  // Adds a reference. A free block (ref count 0) leaves the free list: a prefix-cache hit.
  void retain(BlockId id);
  // Where a block whose last reference goes lands in the free list.
  enum class Reuse {
    Last,   // most-recently-used end: reused after every block freed before it (LRU)
    First,  // reused before any other free block (it holds nothing worth keeping)
  };
  // Drops one reference; at zero the block returns to the free list.
  void release(BlockId id, Reuse when = Reuse::Last);

  int32_t ref_count(BlockId id) const;
  bool is_free(BlockId id) const;  // on the free list
  // The free list, next-to-be-reused first (tests and consistency checks; O(n_free)).
  std::vector<BlockId> free_blocks_in_reuse_order() const;

 private:
  void check_id(BlockId id, const char* what) const;
  void unlink(BlockId id);
  void link_before(BlockId id, int32_t next);

  int64_t block_size_tokens_;
  std::vector<int32_t> ref_counts_;
  // Intrusive doubly linked free list over the ids; index n_blocks() is the sentinel.
  // prev_[id] == -1 marks a block that is not on the list.
  std::vector<int32_t> prev_, next_;
  int64_t n_free_ = 0;
};

// Valid block sizes for the paged cache (the --block-size flag).
bool is_supported_block_size(int64_t block_size_tokens);

}  // namespace latentserve
