#include "kv/kv_cache_manager.h"

#include <algorithm>
#include <cassert>

#include "core/error.h"

namespace latentserve {

KvCacheManager::KvCacheManager(KvCacheConfig config)
    : pool_(config.n_usable_blocks, config.block_size_tokens), cache_salt_(std::move(config.cache_salt)) {
  if (config.enable_prefix_caching) {
    if (!config.hash) fail("KvCacheConfig: prefix caching needs a hash function");
    cache_.emplace(pool_.n_blocks(), std::move(config.hash));
  }
}

int64_t KvCacheManager::blocks_for(int64_t n_tokens) const {
  const int64_t bs = pool_.block_size_tokens();
  return (std::max<int64_t>(n_tokens, 0) + bs - 1) / bs;
}

KvCacheManager::SeqState& KvCacheManager::state(SeqId seq, const char* op) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) fail("KvCacheManager::{}: unknown sequence {}", op, seq);
  return it->second;
}

const KvCacheManager::SeqState& KvCacheManager::state(SeqId seq, const char* op) const {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) fail("KvCacheManager::{}: unknown sequence {}", op, seq);
  return it->second;
}

// Walks the chain block by block while the exact prefix is cached. At most
// (tokens - 1) / block_size blocks: the last token is always left to compute.
KvCacheManager::PrefixMatch KvCacheManager::match_prefix(std::span<const int32_t> tokens,
                                                         std::string_view request_salt) const {
  PrefixMatch m;
  if (!cache_ || tokens.empty()) return m;
  const int64_t bs = pool_.block_size_tokens();
  const int64_t max_blocks = (int64_t(tokens.size()) - 1) / bs;
  uint64_t parent_hash = xxhash_root(cache_salt_, request_salt), parent_serial = 0;
  for (int64_t i = 0; i < max_blocks; ++i) {
    const auto block_tokens = tokens.subspan(size_t(i * bs), size_t(bs));
    const uint64_t h = cache_->hash_block(parent_hash, block_tokens);
    const auto hit = cache_->find(h, parent_serial, block_tokens, request_salt);
    if (!hit) break;
    m.hits.push_back(*hit);
    m.hashes.push_back(h);
    parent_hash = h;
    parent_serial = hit->serial;
  }
  return m;
}

int64_t KvCacheManager::cached_prefix_tokens(std::span<const int32_t> tokens, std::string_view request_salt) const {
  return int64_t(match_prefix(tokens, request_salt).hits.size()) * pool_.block_size_tokens();
}

// Fresh blocks from the pool; any prefix-cache entry they still carry is evicted.
bool KvCacheManager::take_fresh_blocks(int64_t n, BlockTable& table) {
  if (n <= 0) return true;
  std::vector<BlockId> fresh;
  if (!pool_.allocate(n, fresh)) return false;
  for (BlockId b : fresh) {
    if (cache_) cache_->evict(b);
    table.append(b);
  }
  return true;
}

std::optional<int64_t> KvCacheManager::allocate_for(SeqId seq, std::span<const int32_t> tokens, int64_t n_total_tokens,
                                                    std::string_view request_salt) {
  if (seqs_.count(seq)) fail("KvCacheManager::allocate_for: sequence {} already has blocks", seq);
  if (n_total_tokens < 0) fail("KvCacheManager::allocate_for: n_total_tokens must be >= 0, got {}", n_total_tokens);
  PrefixMatch m = match_prefix(tokens, request_salt);
  const int64_t n_cached = int64_t(m.hits.size()) * pool_.block_size_tokens();
  const int64_t n_cover = std::max(n_total_tokens, n_cached);
  const int64_t n_fresh = blocks_for(n_cover) - int64_t(m.hits.size());
  // Hits on free blocks take them off the free list too.
  int64_t n_revived = 0;
  for (const auto& h : m.hits) n_revived += pool_.ref_count(h.block) == 0;
  if (pool_.n_free() - n_revived < n_fresh) return std::nullopt;

  SeqState st(pool_.block_size_tokens());
  for (const auto& h : m.hits) {
    pool_.retain(h.block);
    st.table.append(h.block);
    st.serials.push_back(h.serial);
  }
  const bool ok = take_fresh_blocks(n_fresh, st.table);
  assert(ok);
  (void)ok;
  st.hashes = std::move(m.hashes);
  st.n_slots = n_cover;
  st.n_computed = n_cached;
  st.request_salt = std::string(request_salt);
  seqs_.emplace(seq, std::move(st));
  if (cache_) {
    queried_tokens_ += int64_t(tokens.size());
    hit_tokens_ += n_cached;
  }
  return n_cached;
}

bool KvCacheManager::append_slots(SeqId seq, int64_t n_new_tokens) {
  SeqState& st = state(seq, "append_slots");
  if (n_new_tokens < 0) fail("KvCacheManager::append_slots: n_new_tokens must be >= 0, got {}", n_new_tokens);
  if (!take_fresh_blocks(blocks_for(st.n_slots + n_new_tokens) - st.table.n_blocks(), st.table)) return false;
  st.n_slots += n_new_tokens;
  return true;
}

void KvCacheManager::commit_full_blocks(SeqId seq, std::span<const int32_t> tokens, int64_t n_computed) {
  SeqState& st = state(seq, "commit_full_blocks");
  if (n_computed < 0 || n_computed > int64_t(tokens.size()) || n_computed > st.table.capacity_tokens())
    fail("KvCacheManager::commit_full_blocks: sequence {}: n_computed {} exceeds its {} tokens or {} slots", seq,
         n_computed, tokens.size(), st.table.capacity_tokens());
  if (n_computed < st.n_computed)
    fail("KvCacheManager::commit_full_blocks: sequence {}: n_computed went back from {} to {}", seq, st.n_computed,
         n_computed);
  st.n_computed = n_computed;
  if (!cache_) return;
  const int64_t bs = pool_.block_size_tokens();
  for (int64_t i = int64_t(st.hashes.size()); i < n_computed / bs; ++i) {
    const auto block_tokens = tokens.subspan(size_t(i * bs), size_t(bs));
    const uint64_t parent_hash = i == 0 ? xxhash_root(cache_salt_, st.request_salt) : st.hashes[size_t(i - 1)];
    const uint64_t parent_serial = i == 0 ? 0 : st.serials[size_t(i - 1)];
    const uint64_t h = cache_->hash_block(parent_hash, block_tokens);
    const BlockId block = st.table.blocks()[size_t(i)];
    uint64_t serial = 0;
    if (cache_->contains(block)) {  // shared with a sequence that committed it first (fork)
      const auto cached = cache_->tokens(block);
      if (!std::equal(cached.begin(), cached.end(), block_tokens.begin(), block_tokens.end()))
        fail("KvCacheManager::commit_full_blocks: sequence {} block {} holds other tokens than it shares", seq, i);
      serial = cache_->serial(block);
    } else if (const auto twin = cache_->find(h, parent_serial, block_tokens, st.request_salt)) {
      serial = twin->serial;  // computed twice (same prefix, different blocks): keep the first
    } else {
      serial = cache_->insert(block, h, parent_serial, block_tokens, st.request_salt);
    }
    st.hashes.push_back(h);
    st.serials.push_back(serial);
  }
}

void KvCacheManager::free(SeqId seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  const auto& blocks = it->second.table.blocks();
  // Tail first, so that a prefix outlives its tail; uncached blocks go to the front of the
  // free list, so cached ones are evicted only when no worthless block is left.
  for (auto b = blocks.rbegin(); b != blocks.rend(); ++b)
    pool_.release(*b, cache_ && cache_->contains(*b) ? BlockPool::Reuse::Last : BlockPool::Reuse::First);
  seqs_.erase(it);
}

std::optional<int64_t> KvCacheManager::fork(SeqId parent, SeqId child, int64_t n_child_tokens) {
  const SeqState& p = state(parent, "fork");
  if (seqs_.count(child)) fail("KvCacheManager::fork: sequence {} already has blocks", child);
  if (n_child_tokens < 0) fail("KvCacheManager::fork: n_child_tokens must be >= 0, got {}", n_child_tokens);
  const int64_t bs = pool_.block_size_tokens();
  const int64_t n_shared =
      n_child_tokens == 0 ? 0 : std::min({p.n_computed / bs, (n_child_tokens - 1) / bs, p.table.n_blocks()});
  const int64_t n_fresh = blocks_for(n_child_tokens) - n_shared;
  if (n_fresh > pool_.n_free()) return std::nullopt;

  SeqState c(bs);
  for (int64_t i = 0; i < n_shared; ++i) {
    pool_.retain(p.table.blocks()[size_t(i)]);
    c.table.append(p.table.blocks()[size_t(i)]);
  }
  const size_t n_committed = std::min(size_t(n_shared), p.hashes.size());
  c.hashes.assign(p.hashes.begin(), p.hashes.begin() + ptrdiff_t(n_committed));
  c.serials.assign(p.serials.begin(), p.serials.begin() + ptrdiff_t(n_committed));
  c.request_salt = p.request_salt;
  const bool ok = take_fresh_blocks(n_fresh, c.table);
  assert(ok);
  (void)ok;
  c.n_slots = std::max(n_child_tokens, n_shared * bs);
  c.n_computed = n_shared * bs;
  seqs_.emplace(child, std::move(c));
  return n_shared * bs;
}

bool KvCacheManager::can_allocate(int64_t n_tokens) const { return blocks_for(n_tokens) <= pool_.n_free(); }

bool KvCacheManager::can_append_slots(SeqId seq, int64_t n_new_tokens) const {
  const SeqState& st = state(seq, "can_append_slots");
  return blocks_for(st.n_slots + n_new_tokens) - st.table.n_blocks() <= pool_.n_free();
}

const BlockTable& KvCacheManager::block_table(SeqId seq) const { return state(seq, "block_table").table; }

int64_t KvCacheManager::n_slots(SeqId seq) const { return state(seq, "n_slots").n_slots; }

KvCacheStats KvCacheManager::stats() const {
  KvCacheStats s;
  s.n_blocks_total = pool_.n_usable_blocks();
  s.n_blocks_used = pool_.n_used();
  s.n_blocks_free = pool_.n_free();
  s.n_blocks_cached = cache_ ? cache_->n_cached_blocks() : 0;
  s.prefix_queried_tokens = queried_tokens_;
  s.prefix_hit_tokens = hit_tokens_;
  return s;
}

void KvCacheManager::check_consistency() const {
  const int64_t n = pool_.n_blocks();
  std::vector<int64_t> refs(size_t(n), 0);
  for (const auto& [id, st] : seqs_) {
    if (st.table.capacity_tokens() < st.n_slots || st.table.n_blocks() != blocks_for(st.n_slots))
      fail("kv consistency: sequence {} covers {} slots with {} blocks", id, st.n_slots, st.table.n_blocks());
    if (st.hashes.size() != st.serials.size() || int64_t(st.hashes.size()) * pool_.block_size_tokens() > st.n_computed)
      fail("kv consistency: sequence {} has {} committed blocks but {} computed tokens", id, st.hashes.size(),
           st.n_computed);
    for (BlockId b : st.table.blocks()) {
      if (b <= kNullBlock || b >= n) fail("kv consistency: sequence {} holds block id {}", id, b);
      ++refs[size_t(b)];
    }
  }
  if (pool_.ref_count(kNullBlock) != 0 || pool_.is_free(kNullBlock)) fail("kv consistency: the null block is in use");
  int64_t n_free = 0;
  for (BlockId b = 1; b < n; ++b) {
    if (pool_.ref_count(b) != refs[size_t(b)])
      fail("kv consistency: block {} has ref count {} but {} table references", b, pool_.ref_count(b), refs[size_t(b)]);
    if (pool_.is_free(b) != (refs[size_t(b)] == 0))
      fail("kv consistency: block {} is {} with {} references", b, pool_.is_free(b) ? "free" : "not free",
           refs[size_t(b)]);
    n_free += refs[size_t(b)] == 0;
  }
  const auto free_list = pool_.free_blocks_in_reuse_order();
  if (int64_t(free_list.size()) != n_free || pool_.n_free() != n_free || pool_.n_used() + n_free != n - 1)
    fail("kv consistency: {} blocks free by reference, {} on the free list, pool counts {} free / {} used of {}",
         n_free, free_list.size(), pool_.n_free(), pool_.n_used(), n - 1);
  if (cache_) {
    int64_t n_cached = 0;
    for (BlockId b = 1; b < n; ++b) n_cached += cache_->contains(b);
    if (n_cached != cache_->n_cached_blocks())
      fail("kv consistency: {} blocks carry cache entries but the hash index has {}", n_cached,
           cache_->n_cached_blocks());
  }
}

}  // namespace latentserve
