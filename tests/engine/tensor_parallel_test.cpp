// Tensor parallelism on the CPU (ranks as threads): how heads and columns are split, what
// the KV cache holds per rank, and the errors for sizes a model cannot be split by. The
// outputs themselves are checked against transformers in hf_fixture_test.cpp and against
// the one-rank engine in engine_test.cpp.
#include <gtest/gtest.h>

#include <filesystem>
#include <utility>
#include <vector>

#include "core/error.h"
#include "model/architectures.h"
#include "model/tensor_parallel.h"
#include "perf/kv_calculator.h"

namespace latentserve {
namespace {

namespace fs = std::filesystem;

std::unique_ptr<CausalLM> load(const std::string& name, ThreadPool& pool, int tp, std::string device = "cpu") {
  ModelOptions options;
  options.tensor_parallel_size = tp;
  options.device = device;
  return load_causal_lm(fs::path(LATENTSERVE_FIXTURES_DIR) / name, pool, options);
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(TensorParallel, HeadsSplitEvenlyOrReplicateTheKvHeads) {
  // 32 query heads, 8 KV heads (Llama-3-8B) at tp 4: 8 and 2 per rank.
  TpHeads h = tp_heads(32, 8, {1, 4});
  EXPECT_EQ(h.q.begin, 8);
  EXPECT_EQ(h.q.end, 16);
  EXPECT_EQ(h.kv.begin, 2);
  EXPECT_EQ(h.kv.end, 4);
  // tp 8 over 2 KV heads: ranks 0-3 hold KV head 0, ranks 4-7 KV head 1; each rank's 4 query
  // heads are exactly the ones that read it (group of 16 query heads per KV head).
  for (int r = 0; r < 8; ++r) {
    h = tp_heads(32, 2, {r, 8});
    EXPECT_EQ(h.q.size(), 4);
    EXPECT_EQ(h.kv.size(), 1);
    EXPECT_EQ(h.kv.begin, r / 4) << "rank " << r;
    EXPECT_EQ(h.q.begin / 16, h.kv.begin) << "rank " << r << "'s query heads read its KV head";
    EXPECT_EQ((h.q.end - 1) / 16, h.kv.begin);
  }
  // Columns and vocabulary need not divide: tp_split tiles the range.
  int64_t covered = 0;
  for (int r = 0; r < 3; ++r) {
    const TpRange v = tp_split(256, {r, 3});
    EXPECT_EQ(v.begin, covered);
    covered = v.end;
  }
  EXPECT_EQ(covered, 256);
}

// The planner's cache figures (perf::tp_kv_layout) and the model's sharding (tp_heads) follow
// one rule: counted from the ranks' actual KV ranges, each rank holds kv_heads_per_gpu heads
// and each KV head sits on kv_head_replication ranks.
TEST(TensorParallel, RanksHoldWhatThePlannerCounts) {
  for (auto [n_head, n_kv] : {std::pair<int64_t, int64_t>{32, 8}, {32, 2}, {48, 6}, {64, 8}, {16, 1}, {8, 8}})
    for (int64_t tp : {1, 2, 4, 8, 16}) {
      if (n_head % tp != 0 || (tp > n_kv ? tp % n_kv : n_kv % tp) != 0) continue;
      const perf::TpKvLayout layout =
          perf::tp_kv_layout(AttentionSpec::standard(n_head, n_kv, 64, 64), 1, DType::BF16, tp);
      std::vector<int64_t> ranks_per_kv_head(size_t(n_kv), 0);
      for (int r = 0; r < tp; ++r) {
        const TpHeads h = tp_heads(n_head, n_kv, {r, int(tp)});
        EXPECT_EQ(h.kv.size(), layout.kv_heads_per_gpu) << n_head << "/" << n_kv << " heads, tp " << tp;
        for (int64_t kv = h.kv.begin; kv < h.kv.end; ++kv) ++ranks_per_kv_head[size_t(kv)];
      }
      for (int64_t kv = 0; kv < n_kv; ++kv)
        EXPECT_EQ(ranks_per_kv_head[size_t(kv)], layout.kv_head_replication)
            << "KV head " << kv << " of " << n_kv << ", tp " << tp;
    }
}

TEST(TensorParallel, SizesAModelCannotBeSplitByAreNamed) {
  EXPECT_NE(error_of([] { tp_heads(32, 8, {0, 3}); }).find("--tensor-parallel-size 3 does not divide the 32 attention heads"),
            std::string::npos);
  EXPECT_NE(error_of([] { tp_heads(48, 6, {0, 16}); }).find("larger than and not a multiple of the 6 KV heads"),
            std::string::npos);
  EXPECT_NE(error_of([] { tp_heads(48, 6, {0, 4}); }).find("--tensor-parallel-size 4 does not divide the 6 KV heads"),
            std::string::npos);
  EXPECT_EQ(error_of([] { tp_heads(48, 6, {0, 12}); }), "");  // more ranks than KV heads, a multiple: replicated
  ThreadPool pool(1);
  EXPECT_NE(error_of([&] { load("llama_gqa_f32", pool, 3); }).find("does not divide the 8 attention heads"),
            std::string::npos);
  EXPECT_NE(error_of([&] { load("deepseek_v3_f32", pool, 8); }).find("does not divide the 4 attention heads"),
            std::string::npos);
  EXPECT_NE(error_of([&] { load("llama_gqa_f32", pool, 0); }).find("--tensor-parallel-size must be >= 1"),
            std::string::npos);
  EXPECT_NE(error_of([&] { load("llama_gqa_f32", pool, 2, "cuda"); }).find("--tensor-parallel-size 2 on cuda"),
            std::string::npos);
}

// What every rank caches: its KV heads (one each, replicated, when tp > n_head_kv), or for MLA
// the whole latent. The model's kv_block_bytes counts all ranks.
TEST(TensorParallel, KvCacheBytesCountEveryRanksSlice) {
  ThreadPool pool(2);
  struct Case {
    const char* fixture;
    int tp;
    int64_t times_tp1;
  };
  for (const Case c : {Case{"llama_gqa_f32", 2, 1}, Case{"llama_gqa_f32", 4, 2}, Case{"llama_mqa_f32", 4, 4},
                       Case{"llama_mha_f32", 4, 1}, Case{"deepseek_v3_f32", 2, 2}, Case{"deepseek_v3_f32", 4, 4}}) {
    SCOPED_TRACE(std::string(c.fixture) + " tp " + std::to_string(c.tp));
    auto one = load(c.fixture, pool, 1), ranks = load(c.fixture, pool, c.tp);
    EXPECT_EQ(ranks->attention_spec().n_head, one->attention_spec().n_head) << "the engine sees the whole model";
    EXPECT_EQ(ranks->attention_spec().n_head_kv, one->attention_spec().n_head_kv);
    const cpu::KvCacheOptions options;
    EXPECT_EQ(ranks->kv_block_bytes(16, options), c.times_tp1 * one->kv_block_bytes(16, options));
    auto kv_one = one->make_kv_cache(5, 16, options), kv_ranks = ranks->make_kv_cache(5, 16, options);
    EXPECT_EQ(kv_ranks->n_blocks(), 5);
    EXPECT_EQ(kv_ranks->bytes(), c.times_tp1 * kv_one->bytes());
  }
}

TEST(TensorParallel, SummaryNamesHeadsPerRankAndReplication) {
  ThreadPool pool(1);
  auto gqa = load("llama_gqa_f32", pool, 1);
  EXPECT_EQ(tensor_parallel_summary(gqa->config(), 4),
            "tensor parallel 4 (ranks as threads): 2 query heads per rank, 1 KV head per rank, each KV head on 2 "
            "ranks (the KV cache is 2x that of tp 1)");
  EXPECT_EQ(tensor_parallel_summary(gqa->config(), 2),
            "tensor parallel 2 (ranks as threads): 4 query heads per rank, 1 KV head per rank");
  auto mla = load("deepseek_v3_f32", pool, 1);
  EXPECT_EQ(tensor_parallel_summary(mla->config(), 2),
            "tensor parallel 2 (ranks as threads): 2 query heads per rank, the whole latent on every rank (the KV "
            "cache is 2x that of tp 1)");
}

// A rank that fails (here: a token id outside the vocabulary, which every rank checks before
// its first collective) surfaces as one Error; the model keeps working afterwards.
TEST(TensorParallel, AFailedStepThrowsOnceAndTheRanksRecover) {
  ThreadPool pool(2);
  auto model = load("llama_gqa_f32", pool, 4);
  auto kv = model->make_kv_cache(2, 16, {});
  ForwardBatch batch;
  batch.token_ids = {3, 999};
  batch.positions = {0, 1};
  batch.prompt_lens = {2};
  AttentionMetadata& m = batch.attention;
  m.query_start_loc = {0, 2};
  m.seq_lens = {2};
  m.block_tables = {0};
  m.max_blocks_per_seq = 1;
  m.block_size_tokens = 16;
  m.slot_mapping = {0, 1};
  batch.logits_indices = {1};
  std::vector<float> logits(256);
  EXPECT_NE(error_of([&] { model->forward(batch, *kv, logits.data()); }).find("token id 999"), std::string::npos);
  batch.token_ids = {3, 99};
  model->forward(batch, *kv, logits.data());
  auto one = load("llama_gqa_f32", pool, 1);
  auto kv_one = one->make_kv_cache(2, 16, {});
  std::vector<float> expected(256);
  one->forward(batch, *kv_one, expected.data());
  for (size_t v = 0; v < 256; ++v) EXPECT_NEAR(logits[v], expected[v], 1e-5) << "logit " << v;
}

}  // namespace
}  // namespace latentserve
