#include "kv/block_pool.h"

#include <cassert>

#include "core/error.h"

namespace latentserve {

bool is_supported_block_size(int64_t b) { return b == 16 || b == 32 || b == 64 || b == 128; }

BlockPool::BlockPool(int64_t n_usable_blocks, int64_t block_size_tokens) : block_size_tokens_(block_size_tokens) {
  if (!is_supported_block_size(block_size_tokens))
    fail("block size must be 16, 32, 64 or 128 tokens, got {}", block_size_tokens);
  if (n_usable_blocks <= 0) fail("the KV block pool needs at least one block, got {}", n_usable_blocks);
  if (n_usable_blocks >= (int64_t(1) << 31) - 2)
    fail("the KV block pool has at most 2^31 - 3 blocks, got {}", n_usable_blocks);
  const size_t n = size_t(n_usable_blocks) + 1, sentinel = n;
  ref_counts_.assign(n, 0);
  prev_.assign(n + 1, -1);
  next_.assign(n + 1, -1);
  prev_[sentinel] = next_[sentinel] = int32_t(sentinel);
  for (BlockId id = 1; id < BlockId(n); ++id) link_before(id, int32_t(sentinel));  // ascending ids first
}

void BlockPool::check_id(BlockId id, const char* what) const {
  if (id <= kNullBlock || id >= BlockId(ref_counts_.size()))
    fail("BlockPool::{}: block id {} outside [1, {})", what, id, ref_counts_.size());
}

void BlockPool::unlink(BlockId id) {
  assert(prev_[size_t(id)] != -1);
  next_[size_t(prev_[size_t(id)])] = next_[size_t(id)];
  prev_[size_t(next_[size_t(id)])] = prev_[size_t(id)];
  prev_[size_t(id)] = next_[size_t(id)] = -1;
  --n_free_;
}

void BlockPool::link_before(BlockId id, int32_t next) {
  assert(prev_[size_t(id)] == -1);
  const int32_t prev = prev_[size_t(next)];
  prev_[size_t(id)] = prev;
  next_[size_t(id)] = next;
  next_[size_t(prev)] = id;
  prev_[size_t(next)] = id;
  ++n_free_;
}

bool BlockPool::allocate(int64_t n, std::vector<BlockId>& out) {
  assert(n >= 0);
  if (n > n_free_) return false;
  const size_t sentinel = ref_counts_.size();
  for (int64_t i = 0; i < n; ++i) {
    const BlockId id = next_[sentinel];
    unlink(id);
    assert(ref_counts_[size_t(id)] == 0);
    ref_counts_[size_t(id)] = 1;
    out.push_back(id);
  }
  return true;
}

void BlockPool::retain(BlockId id) {
  check_id(id, "retain");
  if (ref_counts_[size_t(id)]++ == 0) unlink(id);
}

void BlockPool::release(BlockId id, Reuse when) {
  check_id(id, "release");
  if (ref_counts_[size_t(id)] <= 0) fail("BlockPool::release: block {} is already free (double free)", id);
  if (--ref_counts_[size_t(id)] > 0) return;
  const int32_t sentinel = int32_t(ref_counts_.size());
  link_before(id, when == Reuse::Last ? sentinel : next_[size_t(sentinel)]);
}

int32_t BlockPool::ref_count(BlockId id) const {
  assert(id >= 0 && id < BlockId(ref_counts_.size()));
  return ref_counts_[size_t(id)];
}

bool BlockPool::is_free(BlockId id) const {
  assert(id >= 0 && id < BlockId(ref_counts_.size()));
  return prev_[size_t(id)] != -1;
}

std::vector<BlockId> BlockPool::free_blocks_in_reuse_order() const {
  std::vector<BlockId> out;
  out.reserve(size_t(n_free_));
  const int32_t sentinel = int32_t(ref_counts_.size());
  for (int32_t id = next_[size_t(sentinel)]; id != sentinel; id = next_[size_t(id)]) out.push_back(id);
  return out;
}

}  // namespace latentserve
