#pragma once
// KvCacheManager: the KV block operations a scheduler needs, per sequence id, over one
// BlockPool and (optionally) a PrefixCache. Pure host bookkeeping.
//
// Life of a sequence:
//   allocate_for(seq, tokens, n)   -> cached prefix length, or nullopt (nothing taken)
//   [step computes tokens]         -> commit_full_blocks(seq, tokens, n_computed)
//   append_slots(seq, k)           -> room for k more tokens (chunks, decode), or false
//   free(seq)                      -> blocks return; cached full blocks stay findable
// Nothing here throws for lack of blocks: allocation is all-or-nothing and reports
// failure. Error is thrown only for misuse (unknown / duplicate sequence ids, counts
// that contradict earlier calls): bugs in the caller, not load.
//
// Sharing is only ever of FULL blocks whose tokens are fixed (prefix hits, fork), and a
// sequence only writes KV at positions past its shared blocks, so no copy-on-write is
// needed.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kv/block_pool.h"
#include "kv/block_table.h"
#include "kv/prefix_cache.h"

namespace latentserve {

using SeqId = int64_t;

struct KvCacheConfig {
  int64_t n_usable_blocks = 0;     // the backend allocates n_usable_blocks + 1 (the null block, id 0)
  int64_t block_size_tokens = 16;  // 16, 32, 64 or 128
  bool enable_prefix_caching = true;
  // Everything besides the tokens that changes the KV: model id, kv dtype, KV scale mode,
  // ... Two engines with different salts never share (the salt roots every hash chain).
  std::string cache_salt;
  BlockHashFn hash = xxhash_block;  // tests inject a colliding one
};

struct KvCacheStats {
  int64_t n_blocks_total = 0;   // usable blocks (the null block excluded)
  int64_t n_blocks_used = 0;    // ref count > 0
  int64_t n_blocks_free = 0;    // ref count 0 (some still hold cached prefixes)
  int64_t n_blocks_cached = 0;  // registered in the prefix cache, in use or free
  int64_t prefix_queried_tokens = 0;  // prompt tokens looked up by successful allocate_for calls
  int64_t prefix_hit_tokens = 0;      // of those, tokens found cached
  double usage() const { return n_blocks_total ? double(n_blocks_used) / double(n_blocks_total) : 0.0; }
  double hit_rate() const { return prefix_queried_tokens ? double(prefix_hit_tokens) / double(prefix_queried_tokens) : 0.0; }
};

class KvCacheManager {
 public:
  explicit KvCacheManager(KvCacheConfig config);

  int64_t block_size_tokens() const { return pool_.block_size_tokens(); }
  int64_t n_blocks() const { return pool_.n_blocks(); }  // ids [0, n_blocks()): size the KV memory by this
  bool prefix_caching_enabled() const { return cache_.has_value(); }

  // Starts `seq`: takes the longest cached prefix of FULL blocks of `tokens` (never all of
  // them: at least one token is left to compute so that its logits exist), then fresh
  // blocks so that the table covers max(n_total_tokens, cached) positions. Returns the
  // number of cached tokens (the sequence's n_computed starts there), or nullopt with
  // nothing taken when the pool is short. `request_salt` isolates requests that must not
  // share (per-user cache_salt); empty for none.
  std::optional<int64_t> allocate_for(SeqId seq, std::span<const int32_t> tokens, int64_t n_total_tokens,
                                      std::string_view request_salt = {});
  // Cached prefix allocate_for would find now, without taking anything (for token budgets).
  int64_t cached_prefix_tokens(std::span<const int32_t> tokens, std::string_view request_salt = {}) const;
  // Room for n_new_tokens more positions past n_slots(seq). false (nothing taken) when short.
  bool append_slots(SeqId seq, int64_t n_new_tokens);
  // After a step: the first n_computed tokens of `tokens` (the sequence's prompt + output
  // so far) have their KV written. Registers the newly completed full blocks in the prefix
  // cache. Call it for every sequence that computed tokens, caching on or off (fork needs it).
  void commit_full_blocks(SeqId seq, std::span<const int32_t> tokens, int64_t n_computed);
  // Ends `seq` (finished, aborted or preempted): its blocks return to the pool, tail first;
  // committed full blocks stay findable until evicted. Unknown ids are ignored.
  void free(SeqId seq);
  // Starts `child` (n > 1) sharing the parent's committed full blocks, at most
  // (n_child_tokens - 1) / block_size of them, plus fresh blocks covering n_child_tokens
  // positions. The child's tokens must begin with the parent's shared ones. Returns the
  // shared token count (the child's n_computed starts there), or nullopt, nothing taken.
  std::optional<int64_t> fork(SeqId parent, SeqId child, int64_t n_child_tokens);

  // Whether a new sequence of n_tokens positions fits, ignoring cache hits (which only help).
  bool can_allocate(int64_t n_tokens) const;
  bool can_append_slots(SeqId seq, int64_t n_new_tokens) const;

  bool contains(SeqId seq) const { return seqs_.count(seq) != 0; }
  const BlockTable& block_table(SeqId seq) const;  // blocks() is the std::vector<int32_t>
  int64_t n_slots(SeqId seq) const;                // positions the table was asked to cover

  KvCacheStats stats() const;
  const BlockPool& pool() const { return pool_; }
  // Walks every table, the pool and the cache; throws Error naming the first broken
  // invariant (ref count != table references, a block leaked / double-freed / both free
  // and used, a cached entry on a missing block). O(blocks + table entries): for tests.
  void check_consistency() const;

 private:
  struct SeqState {
    explicit SeqState(int64_t block_size_tokens) : table(block_size_tokens) {}
    BlockTable table;
    int64_t n_slots = 0;
    int64_t n_computed = 0;
    std::vector<uint64_t> hashes;   // chained hash of each committed full block
    std::vector<uint64_t> serials;  // cache serial of the equal-content entry of each
    std::string request_salt;
  };
  struct PrefixMatch {
    std::vector<PrefixCache::Hit> hits;
    std::vector<uint64_t> hashes;
  };

  PrefixMatch match_prefix(std::span<const int32_t> tokens, std::string_view request_salt) const;
  int64_t blocks_for(int64_t n_tokens) const;
  bool take_fresh_blocks(int64_t n, BlockTable& table);
  SeqState& state(SeqId seq, const char* op);
  const SeqState& state(SeqId seq, const char* op) const;

  BlockPool pool_;
  std::optional<PrefixCache> cache_;
  std::string cache_salt_;
  std::unordered_map<SeqId, SeqState> seqs_;
  int64_t queried_tokens_ = 0;
  int64_t hit_tokens_ = 0;
};

}  // namespace latentserve
