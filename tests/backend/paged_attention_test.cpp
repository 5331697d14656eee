// The paged, ragged attention kernel against the f64 reference over contiguous K/V.
// Each case scatters every sequence's K/V into randomly chosen blocks of a shared
// cache, so a wrong block-table or slot computation reads another sequence's data.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "backend/cpu/paged_attention.h"
#include "backend/reference/attention_reference.h"
#include "common/tolerance.h"
#include "core/thread_pool.h"

namespace latentserve {
namespace {

struct Case {
  int64_t n_head, n_head_kv, head_dim_qk, head_dim_v, block_size, sliding_window;
  std::vector<std::pair<int64_t, int64_t>> seqs;  // (seq_len after this step, new tokens this step)
  bool latent_row = false;  // MLA absorbed: V is the first head_dim_v elements of the K row (one cache row)
};

std::vector<float> random_vector(std::mt19937& rng, int64_t n) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = dist(rng);
  return v;
}

void run_case(const Case& c, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t dk = c.head_dim_qk, dv = c.head_dim_v, bs = c.block_size;
  const int64_t n_seqs = int64_t(c.seqs.size());
  int64_t max_blocks = 0, total_blocks = 0, n_tokens = 0;
  for (auto [len, n_new] : c.seqs) {
    max_blocks = std::max(max_blocks, (len + bs - 1) / bs);
    total_blocks += (len + bs - 1) / bs;
    n_tokens += n_new;
  }
  const int64_t n_blocks = total_blocks + 3;  // a few spare blocks that nobody owns
  std::vector<int32_t> block_ids(static_cast<size_t>(n_blocks));
  std::iota(block_ids.begin(), block_ids.end(), 0);
  std::shuffle(block_ids.begin(), block_ids.end(), rng);

  std::vector<float> k_cache = random_vector(rng, n_blocks * bs * c.n_head_kv * dk);  // garbage in unowned slots
  std::vector<float> v_cache = random_vector(rng, n_blocks * bs * c.n_head_kv * dv);
  std::vector<int32_t> tables(size_t(n_seqs * max_blocks), -1), query_start{0}, seq_lens;
  std::vector<float> q_all, expected;
  size_t next_block = 0;
  for (int64_t s = 0; s < n_seqs; ++s) {
    auto [len, n_new] = c.seqs[size_t(s)];
    std::vector<float> k = random_vector(rng, len * c.n_head_kv * dk), v = random_vector(rng, len * c.n_head_kv * dv);
    if (c.latent_row)  // [len, 1, dk] -> V = K[:, :, :dv]
      for (int64_t pos = 0; pos < len; ++pos) std::copy_n(&k[size_t(pos * dk)], dv, &v[size_t(pos * dv)]);
    std::vector<float> q = random_vector(rng, n_new * c.n_head * dk);
    for (int64_t b = 0; b < (len + bs - 1) / bs; ++b) tables[size_t(s * max_blocks + b)] = block_ids[next_block++];
    for (int64_t pos = 0; pos < len; ++pos) {
      int64_t slot = int64_t(tables[size_t(s * max_blocks + pos / bs)]) * bs + pos % bs;
      std::copy_n(&k[size_t(pos * c.n_head_kv * dk)], c.n_head_kv * dk, &k_cache[size_t(slot * c.n_head_kv * dk)]);
      std::copy_n(&v[size_t(pos * c.n_head_kv * dv)], c.n_head_kv * dv, &v_cache[size_t(slot * c.n_head_kv * dv)]);
    }
    std::vector<float> ref(size_t(n_new * c.n_head * dv));
    reference::causal_attention(q.data(), k.data(), v.data(), ref.data(), n_new, len, c.n_head, c.n_head_kv, dk, dv,
                                1.0 / std::sqrt(double(dk)), c.sliding_window);
    q_all.insert(q_all.end(), q.begin(), q.end());
    expected.insert(expected.end(), ref.begin(), ref.end());
    query_start.push_back(query_start.back() + int32_t(n_new));
    seq_lens.push_back(int32_t(len));
  }

  std::vector<float> out(size_t(n_tokens * c.n_head * dv), std::nanf(""));  // poisoned
  cpu::PagedAttentionParams p{};
  p.q = q_all.data();
  p.q_token_stride = c.n_head * dk;
  p.k_cache = k_cache.data();
  p.v_cache = c.latent_row ? k_cache.data() : v_cache.data();
  p.k_slot_stride = c.n_head_kv * dk;
  p.v_slot_stride = c.latent_row ? c.n_head_kv * dk : c.n_head_kv * dv;
  p.out = out.data();
  p.query_start_loc = query_start.data();
  p.seq_lens = seq_lens.data();
  p.block_tables = tables.data();
  p.n_seqs = n_seqs;
  p.max_blocks_per_seq = max_blocks;
  p.block_size = bs;
  p.n_head = c.n_head;
  p.n_head_kv = c.n_head_kv;
  p.head_dim_qk = dk;
  p.head_dim_v = dv;
  p.softmax_scale = float(1.0 / std::sqrt(double(dk)));
  p.sliding_window = c.sliding_window;
  ThreadPool pool(2);
  cpu::paged_attention(p, pool);

  double max_err = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    ASSERT_FALSE(std::isnan(out[i])) << "output element " << i << " was not written";
    max_err = std::max(max_err, std::abs(double(out[i]) - double(expected[i])));
  }
  EXPECT_LT(max_err, testing::kF32KernelRelTol) << "max |paged - reference| over " << out.size() << " outputs";
}

TEST(PagedAttention, RaggedMixOfPrefillAndDecodeMHA) {
  run_case({4, 4, 16, 16, 16, 0, {{1, 1}, {37, 37}, {70, 1}, {33, 5}}}, 1);
}

TEST(PagedAttention, GQAWithDifferentKAndVHeadDims) {
  run_case({8, 2, 24, 40, 16, 0, {{100, 1}, {17, 17}, {129, 64}}}, 2);
}

TEST(PagedAttention, MQALargeBlocks) {
  run_case({6, 1, 20, 20, 128, 0, {{300, 1}, {5, 5}, {260, 3}}}, 3);
}

TEST(PagedAttention, EveryBlockSize) {
  for (int64_t bs : {16, 32, 64, 128}) {
    SCOPED_TRACE(bs);
    run_case({4, 2, 32, 32, bs, 0, {{bs + 1, 1}, {2 * bs, bs}, {3, 3}}}, uint32_t(10 + bs));
  }
}

// MLA's absorbed form: 6 heads share one 40-wide latent row [c_kv(32) | k_pe(8)] that
// serves as the key, and its first 32 elements as the value.
TEST(PagedAttention, LatentRowSharedByKeyAndValue) {
  Case c{6, 1, 40, 32, 64, 0, {{130, 1}, {70, 70}, {65, 2}}};
  c.latent_row = true;
  run_case(c, 5);
}

TEST(PagedAttention, SlidingWindow) {
  run_case({4, 2, 16, 16, 16, 7, {{50, 1}, {40, 40}, {20, 9}}}, 4);
}

}  // namespace
}  // namespace latentserve
