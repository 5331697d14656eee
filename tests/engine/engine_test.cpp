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

// "name" or "name_tpN": the fixture, run as N tensor-parallel ranks (threads).
std::unique_ptr<CausalLM> load_fixture(const std::string& param, ThreadPool& pool) {
  ModelOptions options;
  std::string name = param;
  if (const size_t at = param.rfind("_tp"); at != std::string::npos) {
    options.tensor_parallel_size = std::stoi(param.substr(at + 3));
    name = param.substr(0, at);
  }
  return load_causal_lm(fs::path(LATENTSERVE_FIXTURES_DIR) / name, pool, options);
}

class EngineFixture : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { model_ = load_fixture(GetParam(), pool_); }
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
                                           "deepseek_v2_f32", "deepseek_v3_f32", "llama_gqa_f32_tp4",
                                           "deepseek_v3_f32_tp2"),
                         [](const auto& info) { return info.param; });

// Tensor parallelism changes only the order of the sums: the engine's greedy outputs under
// preemption and chunked prefill equal those of the one-rank model (llama_gqa at tp 4
// replicates each of its 2 KV heads on 2 ranks; MLA at tp 2 caches the latent on both).
TEST(Engine, TensorParallelRanksGiveTheOneRankTokens) {
  for (const std::string name : {"llama_gqa_f32", "qwen2_bias_f32", "deepseek_v3_f32"}) {
    SCOPED_TRACE(name);
    ThreadPool pool(2);
    auto one = load_fixture(name, pool);
    const auto jobs = random_jobs(24, one->vocab_size(), 19);
    EngineConfig crowded;
    crowded.scheduler.max_num_batched_tokens = 24;
    crowded.block_size_tokens = 16;
    crowded.n_kv_blocks = 12;
    EngineMetrics m;
    const auto expected = run(*one, pool, jobs, crowded);
    for (int tp : {2, 4}) {
      auto ranks = load_fixture(name + "_tp" + std::to_string(tp), pool);
      const auto got = run(*ranks, pool, jobs, crowded, &m);
      EXPECT_GT(m.n_preemptions, 0) << "the test meant to force preemptions";
      for (const auto& j : jobs) EXPECT_EQ(got.at(j.id), expected.at(j.id)) << "tp " << tp << ", " << j.id;
    }
  }
}

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

// n > 1: completion 0 is exactly the n = 1 request (same seed, stream 0); the others draw
// from their own streams, so seeded sampling gives different completions; after completion 0
// computed the prompt, the others find its full blocks in the prefix cache.
TEST(Engine, ParallelSamplingSharesThePromptBlocks) {
  ThreadPool pool(2);
  auto model = load_causal_lm(fs::path(LATENTSERVE_FIXTURES_DIR) / "llama_gqa_f32", pool);
  EngineConfig config;
  config.block_size_tokens = 16;
  config.n_kv_blocks = 64;
  config.scheduler.max_model_len = 128;
  std::vector<int32_t> prompt;
  for (int i = 0; i < 50; ++i) prompt.push_back(int32_t((i * 37 + 5) % model->vocab_size()));
  SamplingParams p;
  p.temperature = 1.0;
  p.seed = 42;
  p.max_tokens = 20;
  p.ignore_eos = true;

  const auto alone = run(*model, pool, {{"one", prompt, p}}, config);
  LLMEngine engine(*model, config, pool);
  p.n = 4;
  engine.add_request("four", prompt, p);
  std::map<int32_t, RequestOutput> done;
  while (engine.has_unfinished()) {
    for (auto& o : engine.step()) {
      EXPECT_EQ(o.id, "four") << "every completion reports under the caller's id";
      if (o.finished) done[o.index] = o;
    }
    engine.kv_manager().check_consistency();
  }
  ASSERT_EQ(done.size(), 4u);
  EXPECT_EQ(done[0].output_tokens, alone.at("one")) << "completion 0 is the n = 1 request";
  EXPECT_EQ(done[0].n_cached_tokens, 0);
  int differing = 0;
  for (int32_t i = 1; i < 4; ++i) {
    EXPECT_EQ(done[i].n_cached_tokens, 48) << "completion " << i << " shares the prompt's 3 full blocks";
    EXPECT_EQ(done[i].output_tokens.size(), 20u);
    differing += done[i].output_tokens != done[0].output_tokens;
  }
  EXPECT_GE(differing, 2) << "seeded completions draw from their own streams";
  EXPECT_EQ(engine.kv_manager().stats().n_blocks_used, 0);

  // Greedy: all n completions are the greedy continuation.
  SamplingParams g;
  g.temperature = 0;
  g.max_tokens = 8;
  g.ignore_eos = true;
  const auto greedy = run(*model, pool, {{"g", prompt, g}}, config);
  g.n = 3;
  LLMEngine engine2(*model, config, pool);
  engine2.add_request("g3", prompt, g);
  int finished = 0;
  while (engine2.has_unfinished())
    for (auto& o : engine2.step())
      if (o.finished) {
        ++finished;
        EXPECT_EQ(o.output_tokens, greedy.at("g")) << "completion " << o.index;
      }
  EXPECT_EQ(finished, 3);
}

TEST(Engine, AbortingAParallelRequestEndsEveryCompletion) {
  ThreadPool pool(2);
  auto model = load_causal_lm(fs::path(LATENTSERVE_FIXTURES_DIR) / "llama_gqa_f32", pool);
  EngineConfig config;
  config.block_size_tokens = 16;
  config.n_kv_blocks = 64;
  config.scheduler.max_model_len = 128;
  config.scheduler.max_num_batched_tokens = 8;  // the 40-token prompt takes 5 steps
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = 30;
  p.n = 3;
  for (int when : {1, 7}) {  // mid-prompt (completions 1, 2 still waiting), and after they joined
    LLMEngine engine(*model, config, pool);
    engine.add_request("x", std::vector<int32_t>(40, 3), p);
    for (int s = 0; s < when; ++s) engine.step();
    EXPECT_TRUE(engine.abort("x"));
    std::map<int32_t, std::string> reasons;
    while (engine.has_unfinished())
      for (auto& o : engine.step())
        if (o.finished) reasons[o.index] = o.finish_reason;
    ASSERT_EQ(reasons.size(), 3u) << "abort after " << when << " steps";
    for (auto& [i, r] : reasons) EXPECT_EQ(r, "abort") << "completion " << i;
    EXPECT_EQ(engine.kv_manager().stats().n_blocks_used, 0);
    engine.add_request("x", {1, 2}, p);  // the id is free again
    EXPECT_TRUE(engine.abort("x"));
  }
  // n > 1 needs the prefix cache (that is how the completions share the prompt).
  config.enable_prefix_caching = false;
  LLMEngine no_cache(*model, config, pool);
  try {
    no_cache.add_request("y", {1, 2, 3}, p);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("n = 3"), std::string::npos) << e.what();
  }
  p.n = 0;
  EXPECT_THROW(no_cache.add_request("z", {1, 2, 3}, p), Error);
}

}  // namespace
}  // namespace latentserve
