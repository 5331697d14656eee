#include "kv/kv_cache_manager.h"

#include <gtest/gtest.h>

#include <numeric>

#include "core/error.h"

namespace latentserve {
namespace {

constexpr int64_t kBs = 16;

// n tokens counting up from `first`: distinct lists for distinct `first`s.
std::vector<int32_t> tokens(int64_t n, int32_t first = 1000) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), first);
  return t;
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

KvCacheManager make(int64_t n_blocks, BlockHashFn hash = xxhash_block, bool caching = true) {
  KvCacheConfig c;
  c.n_usable_blocks = n_blocks;
  c.block_size_tokens = kBs;
  c.enable_prefix_caching = caching;
  c.cache_salt = "test-model|bf16";
  c.hash = std::move(hash);
  return KvCacheManager(std::move(c));
}

// Allocates `seq` for its whole prompt and commits all of it (as if prefilled in one step).
int64_t prefill(KvCacheManager& m, SeqId seq, const std::vector<int32_t>& prompt, std::string_view salt = {}) {
  const auto cached = m.allocate_for(seq, prompt, int64_t(prompt.size()), salt);
  EXPECT_TRUE(cached.has_value());
  m.commit_full_blocks(seq, prompt, int64_t(prompt.size()));
  m.check_consistency();
  return cached.value_or(-1);
}

TEST(KvCacheManager, PrefixHitsAreCountedInTokensAndShareBlocks) {
  KvCacheManager m = make(16);
  const auto prompt = tokens(40);  // 2 full blocks + 8 tokens
  EXPECT_EQ(prefill(m, 1, prompt), 0);
  EXPECT_EQ(m.stats().n_blocks_cached, 2);
  EXPECT_EQ(prefill(m, 2, prompt), 32);
  const auto& a = m.block_table(1).blocks();
  const auto& b = m.block_table(2).blocks();
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(a[0], b[0]);
  EXPECT_EQ(a[1], b[1]);
  EXPECT_NE(a[2], b[2]);  // the partial block is never shared
  EXPECT_EQ(m.pool().ref_count(a[0]), 2);
  EXPECT_EQ(m.pool().ref_count(a[2]), 1);
  const KvCacheStats s = m.stats();
  EXPECT_EQ(s.prefix_queried_tokens, 80);
  EXPECT_EQ(s.prefix_hit_tokens, 32);
  EXPECT_EQ(s.n_blocks_used, 4);
  EXPECT_EQ(s.n_blocks_free, 12);
  EXPECT_DOUBLE_EQ(s.hit_rate(), 32.0 / 80.0);
}

TEST(KvCacheManager, NeverCachesTheWholePrompt) {
  KvCacheManager m = make(16);
  const auto prompt = tokens(32);  // exactly 2 full blocks
  prefill(m, 1, prompt);
  EXPECT_EQ(m.cached_prefix_tokens(prompt), 16);  // the last token must be computed for its logits
  EXPECT_EQ(prefill(m, 2, prompt), 16);
  EXPECT_EQ(m.cached_prefix_tokens(tokens(33)), 32);
}

TEST(KvCacheManager, CachedBlocksAreReusedAfterFree) {
  KvCacheManager m = make(8);
  const auto prompt = tokens(40);
  prefill(m, 1, prompt);
  const std::vector<BlockId> first(m.block_table(1).blocks());
  m.free(1);
  m.check_consistency();
  EXPECT_EQ(m.stats().n_blocks_free, 8);
  EXPECT_EQ(m.stats().n_blocks_cached, 2);  // free, yet still findable
  EXPECT_EQ(prefill(m, 2, prompt), 32);
  EXPECT_EQ(m.block_table(2).blocks()[0], first[0]);
  EXPECT_EQ(m.block_table(2).blocks()[1], first[1]);
}

TEST(KvCacheManager, EvictsInLruOrderTailFirstAndUncachedBeforeCached) {
  KvCacheManager m = make(8);
  const auto a = tokens(33, 100), b = tokens(33, 200);
  prefill(m, 1, a);  // blocks 1 2 3 (1, 2 cached)
  prefill(m, 2, b);  // blocks 4 5 6 (4, 5 cached)
  m.free(1);
  m.free(2);
  m.check_consistency();
  // Uncached partial blocks first (last freed first), then never-used, then the cached
  // ones in the order they were freed, each sequence's tail before its head.
  EXPECT_EQ(m.pool().free_blocks_in_reuse_order(), (std::vector<BlockId>{6, 3, 7, 8, 2, 1, 5, 4}));
  ASSERT_TRUE(m.allocate_for(3, tokens(80, 300), 80));  // 5 blocks: evicts a's second block
  EXPECT_EQ(m.cached_prefix_tokens(a), 16);
  EXPECT_EQ(m.cached_prefix_tokens(b), 32);
  ASSERT_TRUE(m.allocate_for(4, tokens(10, 400), 10));  // evicts a's first block
  EXPECT_EQ(m.cached_prefix_tokens(a), 0);
  EXPECT_EQ(m.cached_prefix_tokens(b), 32);
  EXPECT_EQ(m.stats().n_blocks_cached, 2);
  m.check_consistency();
}

TEST(KvCacheManager, AllocationIsAllOrNothing) {
  KvCacheManager m = make(4);
  EXPECT_FALSE(m.can_allocate(65));
  EXPECT_FALSE(m.allocate_for(1, tokens(65), 65));
  EXPECT_FALSE(m.contains(1));
  EXPECT_EQ(m.stats().n_blocks_free, 4);
  EXPECT_EQ(m.stats().prefix_queried_tokens, 0);

  const auto a = tokens(33);
  prefill(m, 1, a);  // 3 blocks, 2 cached
  ASSERT_TRUE(m.append_slots(1, 15));  // 48 slots: still 3 blocks
  EXPECT_EQ(m.block_table(1).n_blocks(), 3);
  EXPECT_FALSE(m.can_append_slots(1, 32));
  EXPECT_FALSE(m.append_slots(1, 32));  // would need 2 more, 1 is free
  EXPECT_EQ(m.block_table(1).n_blocks(), 3);
  EXPECT_EQ(m.n_slots(1), 48);
  m.free(1);

  // 2 hits that sit on the free list + 3 fresh blocks > 4 free: nothing is revived either.
  const auto longer = concat(std::vector<int32_t>(a.begin(), a.begin() + 32), tokens(40, 5000));
  EXPECT_EQ(m.cached_prefix_tokens(longer), 32);
  EXPECT_FALSE(m.allocate_for(2, longer, int64_t(longer.size())));
  EXPECT_EQ(m.stats().n_blocks_free, 4);
  EXPECT_EQ(m.stats().n_blocks_cached, 2);
  EXPECT_EQ(m.cached_prefix_tokens(longer), 32);
  m.check_consistency();
  // Allocating only the first chunk fits: the hits cover 32 positions, one fresh block more.
  EXPECT_EQ(m.allocate_for(2, longer, 40), 32);
  EXPECT_EQ(m.block_table(2).n_blocks(), 3);
  m.check_consistency();
}

// Every block hashes to the same value: only the exact comparison stands between a
// lookup and the wrong KV.
TEST(KvCacheManager, ForcedHashCollisionsNeverShareWrongKv) {
  KvCacheManager m = make(32, [](uint64_t, std::span<const int32_t>) { return uint64_t(42); });
  const auto p1 = tokens(33, 100), p2 = tokens(33, 200);
  prefill(m, 1, p1);
  EXPECT_EQ(prefill(m, 2, p2), 0);  // same hash, other tokens
  // Same tokens as p1's second block, but after p2's first block: only p2's block is shared.
  const auto mixed = concat(concat(std::vector<int32_t>(p2.begin(), p2.begin() + 16),
                                   std::vector<int32_t>(p1.begin() + 16, p1.begin() + 32)),
                            tokens(5, 900));
  EXPECT_EQ(m.cached_prefix_tokens(mixed), 16);
  EXPECT_EQ(prefill(m, 3, mixed), 16);
  EXPECT_EQ(m.block_table(3).blocks()[0], m.block_table(2).blocks()[0]);
  EXPECT_NE(m.block_table(3).blocks()[1], m.block_table(1).blocks()[1]);
  // Collisions cost nothing when the tokens are equal.
  EXPECT_EQ(prefill(m, 4, p1), 32);
  EXPECT_EQ(prefill(m, 5, mixed), 32);
}

TEST(KvCacheManager, SaltsSeparate) {
  for (const bool colliding : {false, true}) {
    BlockHashFn hash = xxhash_block;
    if (colliding) hash = [](uint64_t, std::span<const int32_t>) { return uint64_t(7); };
    KvCacheManager m = make(32, hash);
    const auto p = tokens(40);
    EXPECT_EQ(prefill(m, 1, p, "alice"), 0);
    EXPECT_EQ(prefill(m, 2, p, "bob"), 0) << "colliding hash: " << colliding;
    EXPECT_EQ(prefill(m, 3, p, ""), 0);
    EXPECT_EQ(prefill(m, 4, p, "alice"), 32);
    EXPECT_EQ(prefill(m, 5, p, ""), 32);
  }
  // The engine-wide salt (model, kv dtype, ...) roots every chain.
  EXPECT_NE(xxhash_root("llama|bf16", ""), xxhash_root("llama|fp8_e4m3", ""));
  EXPECT_NE(xxhash_root("ab", "c"), xxhash_root("a", "bc"));
  const auto t = tokens(16);
  EXPECT_NE(xxhash_block(xxhash_root("llama|bf16", ""), t), xxhash_block(xxhash_root("llama|fp8_e4m3", ""), t));
}

TEST(KvCacheManager, ForkSharesCommittedFullBlocks) {
  KvCacheManager m = make(16);
  const auto prompt = tokens(40);
  ASSERT_EQ(m.allocate_for(1, prompt, 40), 0);
  EXPECT_EQ(m.fork(1, 2, 41), 0);  // nothing computed yet: nothing to share
  m.free(2);
  m.commit_full_blocks(1, prompt, 40);
  const auto shared = m.fork(1, 2, 41);  // prompt + the child's first token
  ASSERT_EQ(shared, 32);
  const auto& p = m.block_table(1).blocks();
  const auto& c = m.block_table(2).blocks();
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[0], p[0]);
  EXPECT_EQ(c[1], p[1]);
  EXPECT_NE(c[2], p[2]);  // the partial block the child writes into is its own
  EXPECT_EQ(m.pool().ref_count(p[0]), 2);
  EXPECT_EQ(m.pool().ref_count(p[2]), 1);
  EXPECT_EQ(m.fork(1, 3, 32), 16);  // never the child's last token
  m.check_consistency();
  m.free(1);
  EXPECT_EQ(m.pool().ref_count(c[0]), 2);
  m.free(2);
  m.free(3);
  m.check_consistency();
  EXPECT_EQ(m.stats().n_blocks_used, 0);
  EXPECT_THROW(m.fork(1, 4, 10), Error);
}

TEST(KvCacheManager, BlocksComputedTwiceAreCachedOnceAndChainsContinue) {
  KvCacheManager m = make(32);
  const auto p = tokens(50);
  ASSERT_EQ(m.allocate_for(1, p, 50), 0);
  ASSERT_EQ(m.allocate_for(2, p, 50), 0);  // both miss: computed twice
  m.commit_full_blocks(1, p, 32);
  m.commit_full_blocks(2, p, 48);
  EXPECT_EQ(m.stats().n_blocks_cached, 3);  // 1's first two, 2's third
  EXPECT_EQ(prefill(m, 3, p), 48);
  EXPECT_EQ(m.block_table(3).blocks()[0], m.block_table(1).blocks()[0]);
  EXPECT_EQ(m.block_table(3).blocks()[2], m.block_table(2).blocks()[2]);
}

TEST(KvCacheManager, DisabledCachingNeverHits) {
  KvCacheManager m = make(16, xxhash_block, false);
  const auto p = tokens(40);
  EXPECT_EQ(prefill(m, 1, p), 0);
  EXPECT_EQ(prefill(m, 2, p), 0);
  EXPECT_EQ(m.stats().n_blocks_cached, 0);
  EXPECT_EQ(m.stats().prefix_queried_tokens, 0);
  EXPECT_EQ(m.fork(1, 3, 41), 32);  // fork shares without the cache
  m.check_consistency();
}

TEST(KvCacheManager, MisuseThrows) {
  KvCacheManager m = make(16);
  ASSERT_TRUE(m.allocate_for(1, tokens(20), 20));
  EXPECT_THROW(m.allocate_for(1, tokens(20), 20), Error);
  EXPECT_THROW(m.append_slots(9, 1), Error);
  EXPECT_THROW(m.block_table(9), Error);
  EXPECT_THROW(m.commit_full_blocks(1, tokens(20), 40), Error);  // more than its slots
  m.commit_full_blocks(1, tokens(20), 20);
  EXPECT_THROW(m.commit_full_blocks(1, tokens(20), 10), Error);  // computed count went back
  m.free(9);                                                     // unknown: ignored
  m.check_consistency();
}

}  // namespace
}  // namespace latentserve
