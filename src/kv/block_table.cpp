#include "kv/block_table.h"

#include <cassert>
#include <cstddef>

namespace latentserve {

bool BlockTable::reserve(int64_t n_tokens, BlockPool& pool) {
  assert(pool.block_size_tokens() == block_size_tokens_);
  int64_t needed = (n_tokens + block_size_tokens_ - 1) / block_size_tokens_ - int64_t(blocks_.size());
  if (needed <= 0) return true;
  return pool.allocate(needed, blocks_);
}

void BlockTable::release_all(BlockPool& pool) {
  for (auto it = blocks_.rbegin(); it != blocks_.rend(); ++it) pool.release(*it);
  blocks_.clear();
}

int64_t BlockTable::slot(int64_t position) const {
  assert(position >= 0 && position < capacity_tokens());
  return int64_t(blocks_[size_t(position / block_size_tokens_)]) * block_size_tokens_ + position % block_size_tokens_;
}

}  // namespace latentserve
