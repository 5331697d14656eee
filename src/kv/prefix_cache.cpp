#include "kv/prefix_cache.h"

#include <xxhash.h>

#include <algorithm>
#include <cassert>

namespace latentserve {

uint64_t xxhash_block(uint64_t parent_hash, std::span<const int32_t> block_tokens) {
  return XXH3_64bits_withSeed(block_tokens.data(), block_tokens.size_bytes(), parent_hash);
}

uint64_t xxhash_root(std::string_view cache_salt, std::string_view request_salt) {
  // Length-prefixed so that ("ab", "c") and ("a", "bc") differ.
  const uint64_t seed = XXH3_64bits_withSeed(cache_salt.data(), cache_salt.size(), uint64_t(cache_salt.size()));
  return XXH3_64bits_withSeed(request_salt.data(), request_salt.size(), seed ^ uint64_t(request_salt.size()));
}

PrefixCache::PrefixCache(int64_t n_blocks, BlockHashFn hash) : hash_(std::move(hash)), entries_(size_t(n_blocks)) {}

bool PrefixCache::matches(const Entry& e, uint64_t parent_serial, std::span<const int32_t> tokens,
                          std::string_view salt) const {
  return e.parent_serial == parent_serial && std::equal(e.tokens.begin(), e.tokens.end(), tokens.begin(), tokens.end()) &&
         (parent_serial != 0 || e.salt == salt);
}

std::optional<PrefixCache::Hit> PrefixCache::find(uint64_t hash, uint64_t parent_serial,
                                                  std::span<const int32_t> block_tokens, std::string_view salt) const {
  auto [it, end] = by_hash_.equal_range(hash);
  for (; it != end; ++it) {
    const Entry& e = entries_[size_t(it->second)];
    if (matches(e, parent_serial, block_tokens, salt)) return Hit{it->second, e.serial};
  }
  return std::nullopt;
}

uint64_t PrefixCache::insert(BlockId block, uint64_t hash, uint64_t parent_serial,
                             std::span<const int32_t> block_tokens, std::string_view salt) {
  Entry& e = entries_[size_t(block)];
  assert(e.serial == 0 && block != kNullBlock);
  e.serial = next_serial_++;
  e.hash = hash;
  e.parent_serial = parent_serial;
  e.tokens.assign(block_tokens.begin(), block_tokens.end());
  e.salt = parent_serial == 0 ? std::string(salt) : std::string();
  by_hash_.emplace(hash, block);
  return e.serial;
}

void PrefixCache::evict(BlockId block) {
  Entry& e = entries_[size_t(block)];
  if (e.serial == 0) return;
  auto [it, end] = by_hash_.equal_range(e.hash);
  for (; it != end; ++it)
    if (it->second == block) {
      by_hash_.erase(it);
      break;
    }
  e = Entry{};
}

}  // namespace latentserve
