#pragma once
// PrefixCache: which blocks hold the KV of which full-block token prefix.
//
// A full block is keyed by a chained hash: h_i = hash(h_{i-1}, tokens of block i), with
// h_{-1} = the root hash of the salt (model id, kv dtype, anything else that changes the
// KV, plus an optional per-request salt). The hash only finds candidates: each entry also
// stores its own tokens, the salt (first blocks) and the serial number of the entry it
// extends, and a lookup compares them exactly. Serials are never reused, so a match
// proves the whole prefix equal by induction, whatever the hash function does (tests
// inject a colliding one). Entries only deal in block ids: any KV layout works.
//
// The cache holds no references. The KvCacheManager keeps it in step with the pool:
// a block's entry lives until the block is handed out again (evicted) by the pool.
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kv/block_pool.h"

namespace latentserve {

using BlockHashFn = std::function<uint64_t(uint64_t parent_hash, std::span<const int32_t> block_tokens)>;

// xxHash3-64 of the block's token ids, seeded with the parent's hash.
uint64_t xxhash_block(uint64_t parent_hash, std::span<const int32_t> block_tokens);
// xxHash3-64 of the salt strings: the chain's root (h_{-1}).
uint64_t xxhash_root(std::string_view cache_salt, std::string_view request_salt);

class PrefixCache {
 public:
  // What identifies a cached block's prefix exactly: its entry's serial.
  struct Hit {
    BlockId block;
    uint64_t serial;
  };

  explicit PrefixCache(int64_t n_blocks, BlockHashFn hash = xxhash_block);

  uint64_t hash_block(uint64_t parent_hash, std::span<const int32_t> block_tokens) const {
    return hash_(parent_hash, block_tokens);
  }

  // The cached block whose prefix is exactly (entry parent_serial, or `salt` when
  // parent_serial == 0 for a first block) followed by block_tokens.
  std::optional<Hit> find(uint64_t hash, uint64_t parent_serial, std::span<const int32_t> block_tokens,
                          std::string_view salt) const;
  // Registers `block` (not cached yet) and returns its new serial (> 0).
  uint64_t insert(BlockId block, uint64_t hash, uint64_t parent_serial, std::span<const int32_t> block_tokens,
                  std::string_view salt);
  // Forgets the block's entry (it is being reused); no-op when it has none.
  void evict(BlockId block);

  bool contains(BlockId block) const { return entries_[size_t(block)].serial != 0; }
  // Serial and tokens of a cached block (contains(block) must hold).
  uint64_t serial(BlockId block) const { return entries_[size_t(block)].serial; }
  std::span<const int32_t> tokens(BlockId block) const { return entries_[size_t(block)].tokens; }
  int64_t n_cached_blocks() const { return int64_t(by_hash_.size()); }

 private:
  struct Entry {
    uint64_t serial = 0;  // 0: not cached
    uint64_t hash = 0;
    uint64_t parent_serial = 0;
    std::vector<int32_t> tokens;
    std::string salt;  // request salt, first blocks only
  };
  bool matches(const Entry& e, uint64_t parent_serial, std::span<const int32_t> tokens, std::string_view salt) const;

  BlockHashFn hash_;
  std::vector<Entry> entries_;  // by block id
  std::unordered_multimap<uint64_t, BlockId> by_hash_;
  uint64_t next_serial_ = 1;
};

}  // namespace latentserve
