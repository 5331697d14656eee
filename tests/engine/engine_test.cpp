// The serving engine: continuous batching, chunked prefill, preemption by recompute,
// prefix caching, seeded sampling and abort, checked against the same requests run
// alone and against the KV manager's own invariants.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <random>

#include "core/error.h"
#include "engine/llm_engine.h"
#include "model/architectures.h"

namespace latentserve {
namespace {

namespace fs = std::filesystem;

struct Job {
  std::string id;
  std::vector<int32_t> prompt;
  SamplingParams params;
};

std::vector<Job> random_jobs(int n, int64_t vocab, uint32_t seed, bool sampled = false) {
  std::mt19937 rng(seed);
  std::vector<Job> jobs;
  for (int i = 0; i < n; ++i) {
    Job j;
    j.id = "r" + std::to_string(i);
    const int len = 1 + int(rng() % 40);
    for (int t = 0; t < len; ++t) j.prompt.push_back(int32_t(rng() % uint32_t(vocab)));
    j.params.max_tokens = 1 + int64_t(rng() % 12);
    j.params.ignore_eos = true;
    if (sampled) {
      j.params.temperature = 0.8;
      j.params.top_p = 0.9;
      j.params.seed = 1000 + uint64_t(i);
    } else {
      j.params.temperature = 0.0;
    }
    jobs.push_back(j);
  }
  return jobs;
}

// Runs every job to completion in one engine; returns id -> output tokens.
std::map<std::string, std::vector<int32_t>> run(CausalLM& model, ThreadPool& pool, const std::vector<Job>& jobs,
                                                EngineConfig config, EngineMetrics* metrics = nullptr) {
  LLMEngine engine(model, config, pool);
  for (const auto& j : jobs) engine.add_request(j.id, j.prompt, j.params);
  std::map<std::string, std::vector<int32_t>> out;
  for (int guard = 0; engine.has_unfinished(); ++guard) {
    if (guard > 100000) ADD_FAILURE() << "engine did not drain";
    for (auto& o : engine.step())
      if (o.finished) out[o.id] = o.output_tokens;
    engine.kv_manager().check_consistency();
  }
  EXPECT_EQ(engine.kv_manager().stats().n_blocks_used, 0) << "blocks still held after every request finished";
  if (metrics) *metrics = engine.metrics();
  return out;
}

class EngineFixture : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { model_ = load_causal_lm(fs::path(LATENTSERVE_FIXTURES_DIR) / GetParam(), pool_); }
  ThreadPool pool_{2};
  std::unique_ptr<CausalLM> model_;
};

// 64 requests together, chunked prefill with a small token budget and a KV pool small
// enough to force preemptions, give exactly the tokens each request gives alone.
TEST_P(EngineFixture, BatchInvarianceUnderPreemptionAndChunkedPrefill) {
  const auto jobs = random_jobs(64, model_->vocab_size(), 7);
  EngineConfig alone;
  alone.block_size_tokens = 16;  // MLA would default to 64: keep the pool pressure the same
  alone.n_kv_blocks = 64;
  std::map<std::string, std::vector<int32_t>> expected;
  for (const auto& j : jobs) expected[j.id] = run(*model_, pool_, {j}, alone)[j.id];

  EngineConfig crowded;
  crowded.scheduler.max_num_batched_tokens = 24;
  crowded.scheduler.max_num_seqs = 32;
  crowded.block_size_tokens = 16;
  crowded.n_kv_blocks = 12;  // a few sequences' worth: preemption is certain
  EngineMetrics m;
  const auto together = run(*model_, pool_, jobs, crowded, &m);
  EXPECT_GT(m.n_preemptions, 0) << "the test meant to force preemptions";
  for (const auto& j : jobs) EXPECT_EQ(together.at(j.id), expected[j.id]) << j.id;
}

// Seeded sampling: the same seed gives the same tokens whatever else is in the batch.
TEST_P(EngineFixture, SeededSamplingIsBatchInvariant) {
  const auto jobs = random_jobs(16, model_->vocab_size(), 11, /*sampled=*/true);
  EngineConfig config;
  config.n_kv_blocks = 64;
  std::map<std::string, std::vector<int32_t>> expected;
  for (const auto& j : jobs) expected[j.id] = run(*model_, pool_, {j}, config)[j.id];
  config.scheduler.max_num_batched_tokens = 16;
  const auto together = run(*model_, pool_, jobs, config);
  for (const auto& j : jobs) EXPECT_EQ(together.at(j.id), expected[j.id]) << j.id;
}

// Requests sharing a long prefix: cached tokens are reported, fewer prompt tokens are
// computed, and the outputs equal those with prefix caching off.
TEST_P(EngineFixture, PrefixCachingReusesSharedPrefixes) {
  std::mt19937 rng(5);
  std::vector<int32_t> shared;
  for (int i = 0; i < 40; ++i) shared.push_back(int32_t(rng() % uint32_t(model_->vocab_size())));
  std::vector<Job> jobs;
  for (int i = 0; i < 6; ++i) {
    Job j{"p" + std::to_string(i), shared, {}};
    for (int t = 0; t < 3 + i; ++t) j.prompt.push_back(int32_t(rng() % uint32_t(model_->vocab_size())));
    j.params.temperature = 0;
    j.params.max_tokens = 5;
    j.params.ignore_eos = true;
    jobs.push_back(j);
  }
  EngineConfig off;
  off.enable_prefix_caching = false;
  off.block_size_tokens = 16;
  off.n_kv_blocks = 64;
  off.scheduler.max_num_seqs = 1;  // one at a time, so later requests find earlier blocks
  EngineConfig on = off;
  on.enable_prefix_caching = true;
  EngineMetrics m_off, m_on;
  const auto without = run(*model_, pool_, jobs, off, &m_off);
  const auto with = run(*model_, pool_, jobs, on, &m_on);
  for (const auto& j : jobs) EXPECT_EQ(with.at(j.id), without.at(j.id)) << j.id;
  EXPECT_EQ(m_off.prompt_tokens_cached, 0);
  EXPECT_EQ(m_on.prompt_tokens_cached, 5 * 32) << "each later request finds the 2 full shared blocks";
  EXPECT_EQ(m_off.prompt_tokens_computed - m_on.prompt_tokens_computed, 5 * 32);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, EngineFixture,
                         ::testing::Values("llama_gqa_f32", "qwen3_f32", "mistral_f32", "llama_mqa_f32",
                                           "deepseek_v2_f32", "deepseek_v3_f32"),
                         [](const auto& info) { return info.param; });

// Thousands of random submit / step / abort operations; the KV manager's invariants
// (ref counts equal table references, no leak, no double free) hold after every step
// and everything is free when the queues drain.
TEST(Engine, RandomSubmitStepAbortKeepsTheKvCacheConsistent) {
  ThreadPool pool(1);
  auto model = load_causal_lm(fs::path(LATENTSERVE_FIXTURES_DIR) / "llama_mqa_f32", pool);
  EngineConfig config;
  config.n_kv_blocks = 6;  // 96 tokens: some requests can never fit and are rejected
  config.block_size_tokens = 16;
  config.scheduler.max_num_batched_tokens = 20;
  config.scheduler.max_num_seqs = 6;
  LLMEngine engine(*model, config, pool);
  std::mt19937 rng(123);
  std::vector<std::string> live;
  int next = 0, rejected = 0;
  for (int op = 0; op < 3000; ++op) {
    const uint32_t what = rng() % 10;
    if (what < 3) {
      std::vector<int32_t> prompt(1 + rng() % 60);
      for (auto& t : prompt) t = int32_t(rng() % 8);  // small vocabulary: prefixes repeat
      SamplingParams p;
      p.temperature = 0;
      p.max_tokens = 1 + int64_t(rng() % 50);
      p.ignore_eos = true;
      const std::string id = "q" + std::to_string(next++);
      try {
        engine.add_request(id, prompt, p);
        live.push_back(id);
      } catch (const Error&) {
        ++rejected;  // prompt + max_tokens over the whole cache: rejected at submission
      }
    } else if (what < 4 && !live.empty()) {
      engine.abort(live[rng() % live.size()]);
    } else {
      for (auto& o : engine.step())
        if (o.finished) live.erase(std::find(live.begin(), live.end(), o.id));
    }
    engine.kv_manager().check_consistency();
  }
  while (engine.has_unfinished()) {
    engine.step();
    engine.kv_manager().check_consistency();
  }
  EXPECT_EQ(engine.kv_manager().stats().n_blocks_used, 0);
  EXPECT_GT(rejected, 0);
  EXPECT_GT(engine.metrics().n_preemptions, 0);
  EXPECT_GT(engine.metrics().n_aborted, 0);
}

TEST(Engine, InvalidRequestsNameTheProblemAndLeaveNothingBehind) {
  ThreadPool pool(1);
  auto model = load_causal_lm(fs::path(LATENTSERVE_FIXTURES_DIR) / "llama_mqa_f32", pool);
  EngineConfig config;
  config.n_kv_blocks = 4;  // 64 tokens
  config.scheduler.max_model_len = 100;
  LLMEngine engine(*model, config, pool);
  SamplingParams p;
  p.max_tokens = 80;
  try {
    engine.add_request("big", std::vector<int32_t>(30, 1), p);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("maximum model length"), std::string::npos) << e.what();
  }
  p.max_tokens = 50;
  try {
    engine.add_request("too-big-for-cache", std::vector<int32_t>(30, 1), p);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("KV cache"), std::string::npos) << e.what();
  }
  p.max_tokens = 4;
  p.temperature = -1;
  EXPECT_THROW(engine.add_request("t", {1, 2}, p), Error);
  p.temperature = 0;
  EXPECT_THROW(engine.add_request("v", {1, 999999}, p), Error);
  EXPECT_FALSE(engine.has_unfinished());
  engine.add_request("ok", {1, 2, 3}, p);
  EXPECT_THROW(engine.add_request("ok", {1}, p), Error) << "duplicate id";
  while (engine.has_unfinished()) engine.step();
  EXPECT_EQ(engine.kv_manager().stats().n_blocks_used, 0);
}

}  // namespace
}  // namespace latentserve
