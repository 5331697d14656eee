#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>

#include "attention/attention_spec.h"
#include "core/error.h"
#include "kv/block_pool.h"
#include "kv/block_table.h"

namespace latentserve {
namespace {

TEST(BlockPool, RejectsUnsupportedBlockSizes) {
  for (int64_t bad : {0, 8, 15, 48, 256}) EXPECT_THROW(BlockPool(4, bad), Error) << bad;
  for (int64_t good : {16, 32, 64, 128}) EXPECT_NO_THROW(BlockPool(4, good));
}

TEST(BlockPool, AllocationIsAllOrNothing) {
  BlockPool pool(5, 16);
  std::vector<BlockId> a, b;
  ASSERT_TRUE(pool.allocate(3, a));
  EXPECT_EQ(pool.n_free(), 2);
  EXPECT_FALSE(pool.allocate(3, b));  // only 2 left
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(pool.n_free(), 2);
  ASSERT_TRUE(pool.allocate(2, b));
  std::set<BlockId> all(a.begin(), a.end());
  all.insert(b.begin(), b.end());
  EXPECT_EQ(all.size(), 5u) << "a block was handed out twice";
}

TEST(BlockPool, ReferenceCountsReturnBlocksWhenTheLastHolderLeaves) {
  BlockPool pool(2, 16);
  std::vector<BlockId> ids;
  ASSERT_TRUE(pool.allocate(1, ids));
  pool.retain(ids[0]);
  EXPECT_EQ(pool.ref_count(ids[0]), 2);
  pool.release(ids[0]);
  EXPECT_EQ(pool.n_free(), 1);
  pool.release(ids[0]);
  EXPECT_EQ(pool.n_free(), 2);
}

TEST(BlockPool, NullBlockIsNeverHandedOut) {
  BlockPool pool(5, 16);
  EXPECT_EQ(pool.n_blocks(), 6);  // the backend sizes its memory by this: null block included
  EXPECT_EQ(pool.n_usable_blocks(), 5);
  for (int round = 0; round < 3; ++round) {
    std::vector<BlockId> ids;
    ASSERT_TRUE(pool.allocate(5, ids));
    for (BlockId id : ids) EXPECT_NE(id, kNullBlock);
    EXPECT_FALSE(pool.allocate(1, ids));
    for (BlockId id : ids) pool.release(id);
  }
  EXPECT_FALSE(pool.is_free(kNullBlock));
  EXPECT_THROW(pool.retain(kNullBlock), Error);
  EXPECT_THROW(pool.release(kNullBlock), Error);
}

TEST(BlockPool, FreeListIsLeastRecentlyFreedFirst) {
  BlockPool pool(4, 16);
  std::vector<BlockId> ids;
  ASSERT_TRUE(pool.allocate(4, ids));
  EXPECT_EQ(ids, (std::vector<BlockId>{1, 2, 3, 4}));
  for (BlockId id : {3, 1, 4, 2}) pool.release(id);
  EXPECT_EQ(pool.free_blocks_in_reuse_order(), (std::vector<BlockId>{3, 1, 4, 2}));
  std::vector<BlockId> again;
  ASSERT_TRUE(pool.allocate(2, again));
  EXPECT_EQ(again, (std::vector<BlockId>{3, 1}));
  // Reuse::First jumps the queue; a retained free block leaves it (a prefix-cache hit).
  pool.release(3, BlockPool::Reuse::First);
  EXPECT_EQ(pool.free_blocks_in_reuse_order(), (std::vector<BlockId>{3, 4, 2}));
  pool.retain(4);
  EXPECT_EQ(pool.ref_count(4), 1);
  EXPECT_FALSE(pool.is_free(4));
  EXPECT_EQ(pool.free_blocks_in_reuse_order(), (std::vector<BlockId>{3, 2}));
  EXPECT_EQ(pool.n_free(), 2);
  EXPECT_EQ(pool.n_used(), 2);
}

TEST(BlockPool, DoubleFreeThrows) {
  BlockPool pool(2, 16);
  std::vector<BlockId> ids;
  ASSERT_TRUE(pool.allocate(1, ids));
  pool.release(ids[0]);
  EXPECT_THROW(pool.release(ids[0]), Error);
  EXPECT_EQ(pool.n_free(), 2);
}

TEST(BlockTable, SlotsFollowTheBlockOrder) {
  for (int64_t bs : {16, 32, 64, 128}) {
    BlockPool pool(64, bs);
    // Take some blocks first so the table's blocks are not 0, 1, 2...
    std::vector<BlockId> other;
    ASSERT_TRUE(pool.allocate(5, other));
    BlockTable table(bs);
    std::mt19937 rng{static_cast<uint32_t>(bs)};
    int64_t n = 0;
    for (int step = 0; step < 6; ++step) {
      n += int64_t(rng() % uint32_t(2 * bs)) + 1;
      ASSERT_TRUE(table.reserve(n, pool));
      EXPECT_EQ(int64_t(table.blocks().size()), (n + bs - 1) / bs);
    }
    std::set<int64_t> seen;
    for (int64_t pos = 0; pos < n; ++pos) {
      const int64_t slot = table.slot(pos);
      EXPECT_EQ(slot / bs, table.blocks()[size_t(pos / bs)]);
      EXPECT_EQ(slot % bs, pos % bs);
      EXPECT_TRUE(seen.insert(slot).second);
      for (BlockId o : other) EXPECT_NE(slot / bs, o) << "slot inside a block the table does not own";
    }
    const int64_t free_before = pool.n_free();
    const int64_t owned = int64_t(table.blocks().size());
    table.release_all(pool);
    EXPECT_EQ(pool.n_free(), free_before + owned);
  }
}

TEST(BlockTable, ReserveFailsCleanlyWhenThePoolIsShort) {
  BlockPool pool(3, 16);
  BlockTable table(16);
  ASSERT_TRUE(table.reserve(20, pool));  // 2 blocks
  EXPECT_FALSE(table.reserve(100, pool));
  EXPECT_EQ(table.blocks().size(), 2u);
  EXPECT_EQ(pool.n_free(), 1);
}

// Published per-token KV sizes (bf16): Llama-3-8B 128 KiB, Llama-2-70B (MHA) 2.5 MiB,
// Llama-3-70B (GQA-8) 320 KiB, DeepSeek-V2/V3 MLA 576 elements per layer.
TEST(AttentionSpec, KvBytesPerTokenMatchesPublishedFigures) {
  EXPECT_EQ(AttentionSpec::standard(32, 8, 128, 128).kv_bytes_per_token(DType::BF16, 32), 131072);
  EXPECT_EQ(AttentionSpec::standard(64, 64, 128, 128).kv_bytes_per_token(DType::BF16, 80), 2621440);
  EXPECT_EQ(AttentionSpec::standard(64, 8, 128, 128).kv_bytes_per_token(DType::BF16, 80), 327680);
  const auto mla = AttentionSpec::latent(128, 512, 128, 64, 128);
  EXPECT_EQ(mla.kv_elements_per_token(), 576);
  EXPECT_EQ(mla.kv_bytes_per_token(DType::BF16, 61), 576 * 2 * 61);
  EXPECT_EQ(mla.kv_bytes_per_token(DType::F8_E4M3, 1), 576);
}

TEST(AttentionSpec, KindFollowsHeadCounts) {
  EXPECT_EQ(AttentionSpec::standard(8, 8, 64, 64).kind, AttentionKind::MHA);
  EXPECT_EQ(AttentionSpec::standard(8, 2, 64, 64).kind, AttentionKind::GQA);
  EXPECT_EQ(AttentionSpec::standard(8, 1, 64, 64).kind, AttentionKind::MQA);
  EXPECT_THROW(AttentionSpec::standard(8, 3, 64, 64), Error);
  EXPECT_THROW(AttentionSpec::standard(8, 0, 64, 64), Error);
}

}  // namespace
}  // namespace latentserve
