// End to end against Hugging Face transformers: every fixture under tests/fixtures
// (made by tools/make_fixtures.py) holds a tiny random checkpoint, prompts, the
// reference logits for every prompt position and the greedy continuation.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/tolerance.h"
#include "engine/offline_runner.h"
#include "model/architectures.h"

namespace latentserve {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> fixture_names(const std::string& prefix = "") {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(LATENTSERVE_FIXTURES_DIR))
    if (fs::exists(entry.path() / "reference.json") && fs::exists(entry.path() / "config.json") &&
        entry.path().filename().string().rfind(prefix, 0) == 0)
      names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

struct Reference {
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::vector<std::vector<float>>> logits;  // [prompt][position][vocab]
  std::vector<std::vector<int32_t>> greedy;
  std::vector<double> greedy_margin;
  bool bf16_weights = false;
};

Reference load_reference(const fs::path& dir) {
  std::ifstream in(dir / "reference.json");
  nlohmann::json j = nlohmann::json::parse(in);
  Reference r;
  r.prompts = j.at("prompts").get<decltype(r.prompts)>();
  r.logits = j.at("logits").get<decltype(r.logits)>();
  r.greedy = j.at("greedy").get<decltype(r.greedy)>();
  r.greedy_margin = j.at("greedy_margin").get<std::vector<double>>();
  r.bf16_weights = j.value("weights_dtype", std::string()) == "bfloat16";
  return r;
}

class HfFixture : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_ = fs::path(LATENTSERVE_FIXTURES_DIR) / GetParam();
    ref_ = load_reference(dir_);
    models_.emplace_back("default", load_causal_lm(dir_, pool_));
    if (models_[0].second->attention_spec().kind == AttentionKind::MLA) {  // every MLA path
      for (auto [name, path] : {std::pair{"absorbed", MlaPath::Absorbed}, std::pair{"naive", MlaPath::Naive}}) {
        ModelOptions options;
        options.mla_path = path;
        models_.emplace_back(name, load_causal_lm(dir_, pool_, options));
      }
    }
    for (int tp : {2, 4}) {  // tensor-parallel ranks as threads: every fixture's heads split 2 and 4 ways
      ModelOptions options;
      options.tensor_parallel_size = tp;
      tp_models_.emplace_back("tp " + std::to_string(tp), load_causal_lm(dir_, pool_, options));
    }
    tolerance_ = ref_.bf16_weights ? testing::kLogitsAbsTolBf16Checkpoint : testing::kLogitsAbsTolF32Checkpoint;
  }

  // Runs `requests` in one engine and checks every prompt position's logits and the
  // greedy continuation of each request against transformers.
  void check(const std::vector<size_t>& which, RunnerOptions options) {
    for (auto* list : {&models_, &tp_models_})
      for (auto& [path, model] : *list) {
        SCOPED_TRACE("model: " + path);
        check(*model, which, options);
      }
  }

  void check(CausalLM& model, const std::vector<size_t>& which, RunnerOptions options) {
    std::vector<SequenceRequest> requests;
    for (size_t i : which) requests.push_back({ref_.prompts[i], int64_t(ref_.greedy[i].size()), false});
    OfflineRunner runner(model, options, pool_);
    auto results = runner.run(requests, /*keep_prompt_logits=*/true);
    const int64_t vocab = model.vocab_size();
    for (size_t r = 0; r < which.size(); ++r) {
      const size_t i = which[r];
      double max_diff = 0;
      for (size_t t = 0; t < ref_.prompts[i].size(); ++t)
        for (int64_t v = 0; v < vocab; ++v)
          max_diff = std::max(max_diff, std::abs(double(results[r].prompt_logits[t * size_t(vocab) + size_t(v)]) -
                                                 double(ref_.logits[i][t][size_t(v)])));
      EXPECT_LE(max_diff, tolerance_) << "prompt " << i << ": max |logit - transformers|";
      // A greedy path may only flip where transformers' own top-2 gap is within our error.
      if (ref_.greedy_margin[i] > 10 * tolerance_)
        EXPECT_EQ(results[r].generated, ref_.greedy[i]) << "prompt " << i << " greedy continuation";
      else
        std::cout << "[ note ] prompt " << i << ": greedy margin " << ref_.greedy_margin[i]
                  << " is within tolerance; continuation not compared\n";
    }
  }

  fs::path dir_;
  Reference ref_;
  ThreadPool pool_{2};
  std::vector<std::pair<std::string, std::unique_ptr<CausalLM>>> models_;  // MLA: auto, absorbed, naive
  std::vector<std::pair<std::string, std::unique_ptr<CausalLM>>> tp_models_;  // tp 2, tp 4
  double tolerance_ = 0;
};

TEST_P(HfFixture, EachPromptAloneBlockSize16) {
  for (size_t i = 0; i < ref_.prompts.size(); ++i) check({i}, {16, 512});
}

TEST_P(HfFixture, EachPromptAloneBlockSize128) {
  for (size_t i = 0; i < ref_.prompts.size(); ++i) check({i}, {128, 512});
}

// All prompts in one ragged batch, prefill chunked into 5-token steps, so steps mix
// decode tokens of one sequence with prefill chunks of others.
TEST_P(HfFixture, AllPromptsInOneRaggedBatchWithChunkedPrefill) {
  std::vector<size_t> all(ref_.prompts.size());
  std::iota(all.begin(), all.end(), 0);
  check(all, {16, 5});
  check(all, {32, 512});
}

// MLA fixtures: the naive and absorbed paths agree with each other far inside the
// tolerance to transformers (1e-5 relative in f32).
// The DeepSeek (MLA) fixtures only.
class MlaFixture : public HfFixture {};

TEST_P(MlaFixture, PathsAgree) {
  ASSERT_EQ(models_.size(), 3u) << "an MLA fixture loads as auto, absorbed and naive";
  std::vector<SequenceRequest> requests;
  for (const auto& p : ref_.prompts) requests.push_back({p, 4, false});
  OfflineRunner a(*models_[1].second, {64, 7}, pool_), b(*models_[2].second, {64, 7}, pool_);  // absorbed, naive
  auto ra = a.run(requests, true), rb = b.run(requests, true);
  for (size_t i = 0; i < requests.size(); ++i) {
    double max_abs = 0, max_diff = 0;
    for (size_t j = 0; j < ra[i].prompt_logits.size(); ++j) {
      max_abs = std::max(max_abs, std::abs(double(ra[i].prompt_logits[j])));
      max_diff = std::max(max_diff, std::abs(double(ra[i].prompt_logits[j]) - double(rb[i].prompt_logits[j])));
    }
    EXPECT_LE(max_diff / max_abs, ref_.bf16_weights ? 1e-4 : 1e-5) << "prompt " << i;
    EXPECT_EQ(ra[i].generated, rb[i].generated) << "prompt " << i;
  }
}

// A fixture may carry its config in the older `rope_scaling` form too: both must give
// the same RoPE tables and softmax scale.
TEST_P(MlaFixture, RopeScalingFormParsesTheSame) {
  const fs::path older = dir_ / "config_rope_scaling.json";
  ASSERT_TRUE(fs::exists(older)) << "each DeepSeek fixture carries its config in the older rope_scaling form too";
  std::ifstream in(older);
  ModelConfig a = ModelConfig::load(dir_), b = ModelConfig::from_json(nlohmann::json::parse(in), older.string());
  const int64_t rope_dim = a.mla ? a.mla->qk_rope_head_dim : a.head_dim;
  auto ta = compute_rope_tables(a.rope, rope_dim, a.max_position_embeddings, 64);
  auto tb = compute_rope_tables(b.rope, rope_dim, b.max_position_embeddings, 64);
  EXPECT_EQ(ta.inv_freq, tb.inv_freq);
  EXPECT_EQ(ta.attention_factor, tb.attention_factor);
  EXPECT_EQ(a.softmax_scale, b.softmax_scale);
  EXPECT_EQ(a.rope.interleaved, b.rope.interleaved);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, MlaFixture, ::testing::ValuesIn(fixture_names("deepseek")),
                         [](const auto& info) { return info.param; });
INSTANTIATE_TEST_SUITE_P(Fixtures, HfFixture, ::testing::ValuesIn(fixture_names()),
                         [](const auto& info) { return info.param; });

TEST(HfFixtures, AreBundled) { EXPECT_GE(fixture_names().size(), 8u) << "tests/fixtures is missing fixtures"; }

}  // namespace
}  // namespace latentserve
