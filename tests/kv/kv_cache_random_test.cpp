// Thousands of random allocate / step (chunked prefill, decode) / commit / fork / free
// operations, checking after every one that the pool, the tables and the cache agree,
// and that every shared block really holds the KV of the sharer's prefix.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include "kv/kv_cache_manager.h"

namespace latentserve {
namespace {

constexpr int64_t kBs = 16;

struct Seq {
  std::vector<int32_t> tokens;
  int64_t n_computed = 0;
  int64_t n_slots = 0;
};

class RandomKvTest {
 public:
  RandomKvTest(uint32_t seed, BlockHashFn hash, bool caching)
      : rng_(seed), m_([&] {
          KvCacheConfig c;
          c.n_usable_blocks = 40;
          c.block_size_tokens = kBs;
          c.enable_prefix_caching = caching;
          c.cache_salt = "random";
          c.hash = std::move(hash);
          return c;
        }()) {
    // Prompts are made of a few fixed 16-token pieces, so that full blocks repeat.
    for (int p = 0; p < 3; ++p) {
      std::vector<int32_t> piece(kBs);
      for (auto& t : piece) t = int32_t(rng_() % 4);
      pieces_.push_back(piece);
    }
  }

  void run(int n_ops) {
    for (int op = 0; op < n_ops; ++op) {
      const uint32_t r = rng_() % 100;
      if (r < 30 || seqs_.empty()) add();
      else if (r < 75) step(pick());
      else if (r < 85) fork(pick());
      else drop(pick());
      check();
    }
    while (!seqs_.empty()) drop(seqs_.begin()->first);
    check();
    EXPECT_EQ(m_.stats().n_blocks_free, 40);
    EXPECT_EQ(m_.stats().n_blocks_used, 0);
  }

  int64_t n_hits = 0, n_adds = 0, n_forks = 0, n_full = 0;

 private:
  std::vector<int32_t> prompt() {
    std::vector<int32_t> t;
    const int n_pieces = int(rng_() % 4);
    for (int i = 0; i < n_pieces; ++i) {
      const auto& p = pieces_[rng_() % pieces_.size()];
      t.insert(t.end(), p.begin(), p.end());
    }
    const int tail = 1 + int(rng_() % 20);
    for (int i = 0; i < tail; ++i) t.push_back(int32_t(rng_() % 4));
    return t;
  }

  SeqId pick() {
    auto it = seqs_.begin();
    std::advance(it, rng_() % seqs_.size());
    return it->first;
  }

  void add() {
    Seq s;
    s.tokens = prompt();
    const int64_t n = int64_t(s.tokens.size());
    const int64_t first_chunk = 1 + int64_t(rng_() % uint32_t(n));  // allocate the whole prompt or a first chunk
    const SeqId id = next_id_++;
    const auto cached = m_.allocate_for(id, s.tokens, first_chunk);
    if (!cached) {
      ++n_full;
      return;
    }
    ++n_adds;
    ASSERT_EQ(*cached % kBs, 0);
    ASSERT_LT(*cached, n);
    n_hits += *cached > 0;
    s.n_computed = *cached;
    s.n_slots = std::max(first_chunk, *cached);
    verify_shared_prefix(id, s, *cached);
    seqs_.emplace(id, std::move(s));
  }

  // One scheduler step for `id`: a prefill chunk, or (prompt done) a new token + its decode.
  void step(SeqId id) {
    Seq& s = seqs_.at(id);
    if (s.n_computed == int64_t(s.tokens.size())) s.tokens.push_back(int32_t(rng_() % 4));  // "sampled"
    const int64_t left = int64_t(s.tokens.size()) - s.n_computed;
    const int64_t n = 1 + int64_t(rng_() % uint32_t(std::min<int64_t>(left, 40)));
    const int64_t need = s.n_computed + n - s.n_slots;
    if (need > 0) {
      const size_t before = m_.block_table(id).blocks().size();
      if (!m_.append_slots(id, need)) {
        drop(id);  // preempted: recompute later (its committed blocks stay cached)
        return;
      }
      s.n_slots += need;
      const auto& blocks = m_.block_table(id).blocks();
      for (size_t i = before; i < blocks.size(); ++i) content_.erase(blocks[i]);  // fresh: holds nothing yet
    }
    // "Compute" the KV of positions [n_computed, n_computed + n): full blocks now hold it.
    const int64_t full_before = s.n_computed / kBs;
    s.n_computed += n;
    const auto& blocks = m_.block_table(id).blocks();
    for (int64_t i = full_before; i < s.n_computed / kBs; ++i) {
      const BlockId b = blocks[size_t(i)];
      ASSERT_EQ(m_.pool().ref_count(b), 1) << "a sequence writes KV into a shared block";
      content_[b].assign(s.tokens.begin(), s.tokens.begin() + (i + 1) * kBs);
    }
    m_.commit_full_blocks(id, s.tokens, s.n_computed);
  }

  void fork(SeqId parent) {
    const Seq& p = seqs_.at(parent);
    if (p.n_computed < int64_t(p.tokens.size())) return;  // fork after the prompt is computed
    Seq c;
    c.tokens = p.tokens;
    c.tokens.push_back(int32_t(rng_() % 4));  // the child's own first token
    const SeqId id = next_id_++;
    const auto shared = m_.fork(parent, id, int64_t(c.tokens.size()));
    if (!shared) return;
    ++n_forks;
    ASSERT_EQ(*shared % kBs, 0);
    ASSERT_LT(*shared, int64_t(c.tokens.size()));
    c.n_computed = *shared;
    c.n_slots = int64_t(c.tokens.size());
    verify_shared_prefix(id, c, *shared);
    seqs_.emplace(id, std::move(c));
  }

  void drop(SeqId id) {
    m_.free(id);
    seqs_.erase(id);
  }

  // Blocks a sequence got without computing them must hold exactly its prefix's KV.
  void verify_shared_prefix(SeqId id, const Seq& s, int64_t n_shared) {
    const auto& blocks = m_.block_table(id).blocks();
    for (int64_t i = 0; i < n_shared / kBs; ++i) {
      const auto it = content_.find(blocks[size_t(i)]);
      ASSERT_NE(it, content_.end()) << "shared a block whose KV was never computed";
      ASSERT_TRUE(std::equal(it->second.begin(), it->second.end(), s.tokens.begin(), s.tokens.begin() + (i + 1) * kBs))
          << "shared the KV of another prefix";
    }
    // Fresh blocks hold nothing yet.
    for (size_t i = size_t(n_shared / kBs); i < blocks.size(); ++i) content_.erase(blocks[i]);
  }

  // Independent of check_consistency: recount everything from the tables.
  void check() {
    m_.check_consistency();
    const BlockPool& pool = m_.pool();
    std::map<BlockId, int32_t> refs;
    for (const auto& [id, s] : seqs_) {
      ASSERT_EQ(m_.n_slots(id), s.n_slots);
      const auto& blocks = m_.block_table(id).blocks();
      ASSERT_EQ(int64_t(blocks.size()), (s.n_slots + kBs - 1) / kBs);
      for (BlockId b : blocks) {
        ASSERT_NE(b, kNullBlock);
        ++refs[b];
      }
    }
    const auto free_list = pool.free_blocks_in_reuse_order();
    const std::set<BlockId> free_set(free_list.begin(), free_list.end());
    ASSERT_EQ(free_set.size(), free_list.size()) << "a block is on the free list twice";
    for (BlockId b = 1; b < BlockId(pool.n_blocks()); ++b) {
      const int32_t want = refs.count(b) ? refs[b] : 0;
      ASSERT_EQ(pool.ref_count(b), want) << "block " << b;
      ASSERT_EQ(free_set.count(b) == 1, want == 0) << "block " << b;
    }
    ASSERT_EQ(int64_t(refs.size()) + int64_t(free_set.size()), pool.n_usable_blocks());
    ASSERT_EQ(pool.n_free() + pool.n_used(), pool.n_usable_blocks());
  }

  std::mt19937 rng_;
  KvCacheManager m_;
  std::vector<std::vector<int32_t>> pieces_;
  std::map<SeqId, Seq> seqs_;
  std::map<BlockId, std::vector<int32_t>> content_;  // the prefix whose KV each full block holds
  SeqId next_id_ = 1;
};

TEST(KvCacheRandom, InvariantsHoldAfterEveryOperation) {
  for (uint32_t seed : {1u, 2u, 3u}) {
    RandomKvTest t(seed, xxhash_block, true);
    t.run(4000);
    EXPECT_GT(t.n_hits, 100) << "prefixes should repeat";
    EXPECT_GT(t.n_forks, 50);
    EXPECT_GT(t.n_full, 10) << "the pool should run out now and then";
  }
}

TEST(KvCacheRandom, InvariantsHoldWithAWeakHash) {
  // Two hash values for everything: collisions everywhere, sharing must stay exact.
  RandomKvTest t(7, [](uint64_t parent, std::span<const int32_t> b) { return (parent + uint64_t(b[0])) & 1; }, true);
  t.run(4000);
  EXPECT_GT(t.n_hits, 100);
}

TEST(KvCacheRandom, InvariantsHoldWithCachingOff) {
  RandomKvTest t(11, xxhash_block, false);
  t.run(3000);
  EXPECT_EQ(t.n_hits, 0);
}

}  // namespace
}  // namespace latentserve
