// The CLI contract: `latentserve logits` and `generate` print JSON other tools parse;
// bad input exits non-zero with an error that names what was wrong.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "common/byte_level_tokenizer.h"
#include "common/tolerance.h"

namespace {

namespace fs = std::filesystem;

struct Output {
  int exit_code;
  std::string text;  // stdout and stderr together
};

Output run(const std::string& args) {
  std::string cmd = std::string(LATENTSERVE_BINARY) + " " + args + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  std::string text;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) text.append(buf.data(), n);
  int status = pclose(pipe);
  return {WEXITSTATUS(status), text};
}

const fs::path kFixture = fs::path(LATENTSERVE_FIXTURES_DIR) / "llama_gqa_f32";

nlohmann::json reference() {
  std::ifstream in(kFixture / "reference.json");
  return nlohmann::json::parse(in);
}

std::string join(const std::vector<int>& ids) {
  std::string s;
  for (int id : ids) s += (s.empty() ? "" : ",") + std::to_string(id);
  return s;
}

TEST(Cli, LogitsPrintsOneRowPerPositionMatchingTransformers) {
  auto ref = reference();
  auto prompt = ref["prompts"][0].get<std::vector<int>>();
  Output out = run("logits --model " + kFixture.string() + " --block-size 32 --threads 1 --tokens " + join(prompt));
  ASSERT_EQ(out.exit_code, 0) << out.text;
  auto j = nlohmann::json::parse(out.text);
  EXPECT_EQ(j["tokens"].get<std::vector<int>>(), prompt);
  ASSERT_EQ(j["logits"].size(), prompt.size());
  double max_diff = 0;
  for (size_t t = 0; t < prompt.size(); ++t) {
    ASSERT_EQ(j["logits"][t].size(), ref["logits"][0][t].size());
    for (size_t v = 0; v < j["logits"][t].size(); ++v)
      max_diff = std::max(max_diff, std::abs(j["logits"][t][v].get<double>() - ref["logits"][0][t][v].get<double>()));
  }
  EXPECT_LE(max_diff, latentserve::testing::kLogitsAbsTolF32Checkpoint);
}

TEST(Cli, GenerateMatchesTheGreedyContinuation) {
  auto ref = reference();
  auto prompt = ref["prompts"][1].get<std::vector<int>>();
  auto greedy = ref["greedy"][1].get<std::vector<int>>();
  Output out = run("generate --model " + kFixture.string() + " --ignore-eos --max-tokens " +
                   std::to_string(greedy.size()) + " --tokens " + join(prompt));
  ASSERT_EQ(out.exit_code, 0) << out.text;
  EXPECT_EQ(nlohmann::json::parse(out.text)["tokens"].get<std::vector<int>>(), greedy);
}

// --tp 4 over llama_gqa's 8 query and 2 KV heads: the startup line names the replication and
// the tokens are transformers' greedy continuation.
TEST(Cli, TensorParallelGenerateNamesTheLayoutAndMatches) {
  auto ref = reference();
  auto prompt = ref["prompts"][2].get<std::vector<int>>();
  auto greedy = ref["greedy"][2].get<std::vector<int>>();
  Output out = run("generate --model " + kFixture.string() + " --tp 4 --ignore-eos --max-tokens " +
                   std::to_string(greedy.size()) + " --tokens " + join(prompt));
  ASSERT_EQ(out.exit_code, 0) << out.text;
  const std::string summary = "tensor parallel 4 (ranks as threads): 2 query heads per rank, 1 KV head per rank, "
                              "each KV head on 2 ranks (the KV cache is 2x that of tp 1)\n";
  ASSERT_EQ(out.text.rfind(summary, 0), 0u) << out.text;
  EXPECT_EQ(nlohmann::json::parse(out.text.substr(summary.size()))["tokens"].get<std::vector<int>>(), greedy);

  Output bad = run("generate --model " + kFixture.string() + " --tp 3 --tokens 1,2");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.text.find("--tensor-parallel-size 3 does not divide the 8 attention heads"), std::string::npos)
      << bad.text;
}

// --prompt TEXT goes through the checkpoint's tokenizer.json (a byte-level one here,
// so each byte is one id) and gives what --tokens gives for the same ids.
TEST(Cli, PromptTextEqualsTheSameTokenIds) {
  const fs::path dir = fs::temp_directory_path() / ("latentserve_cli_" + std::to_string(getpid()));
  fs::create_directories(dir);
  for (const char* f : {"config.json", "model.safetensors"}) fs::copy_file(kFixture / f, dir / f);
  std::ofstream(dir / "tokenizer.json") << latentserve::testing::byte_level_tokenizer_json().dump();
  Output by_text = run("generate --model " + dir.string() + " --prompt 'Hi!' --max-tokens 4 --ignore-eos");
  Output by_ids = run("generate --model " + dir.string() + " --tokens 72,105,33 --max-tokens 4 --ignore-eos");
  ASSERT_EQ(by_text.exit_code, 0) << by_text.text;
  ASSERT_EQ(by_ids.exit_code, 0) << by_ids.text;
  auto a = nlohmann::json::parse(by_text.text), b = nlohmann::json::parse(by_ids.text);
  EXPECT_EQ(a["tokens"], b["tokens"]);
  EXPECT_TRUE(a.contains("text"));
  Output both = run("generate --model " + dir.string() + " --prompt x --tokens 1");
  EXPECT_NE(both.exit_code, 0);
  EXPECT_NE(both.text.find("--prompt"), std::string::npos) << both.text;
  fs::remove_all(dir);
}

// The KV cache format is a flag: bf16 and fp8 caches stay close to transformers' logits
// (bounds from docs/kv-fp8.md's measurements: rounding of 2^-8 and 2^-4 relative).
TEST(Cli, KvCacheDtypeFlag) {
  auto ref = reference();
  auto prompt = ref["prompts"][2].get<std::vector<int>>();
  for (auto [dtype, bound] : {std::pair{"bf16", 0.05}, std::pair{"fp8_e4m3", 0.5}}) {
    Output out = run(std::string("logits --model ") + kFixture.string() + " --kv-cache-dtype " + dtype + " --tokens " + join(prompt));
    ASSERT_EQ(out.exit_code, 0) << out.text;
    auto j = nlohmann::json::parse(out.text);
    double max_diff = 0;
    for (size_t t = 0; t < prompt.size(); ++t)
      for (size_t v = 0; v < j["logits"][t].size(); ++v)
        max_diff = std::max(max_diff, std::abs(j["logits"][t][v].get<double>() - ref["logits"][2][t][v].get<double>()));
    EXPECT_LE(max_diff, bound) << dtype;
    EXPECT_GT(max_diff, 0.0) << dtype << ": a quantised cache cannot be exact";
  }
  Output bad = run("logits --model " + kFixture.string() + " --tokens 1 --kv-cache-dtype fp9");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.text.find("--kv-cache-dtype"), std::string::npos) << bad.text;
}

// `batch` with "n": 2 writes one line with a "choices" list in index order; the greedy
// completions are each the greedy continuation, and a line without n keeps the flat shape.
TEST(Cli, BatchWithNGivesOneLineOfChoices) {
  const auto ref = reference();
  const std::vector<int> prompt = ref["prompts"][0].get<std::vector<int>>();
  const std::vector<int> greedy = ref["greedy"][0].get<std::vector<int>>();
  const fs::path dir = fs::temp_directory_path() / "latentserve_cli_batch_n";
  fs::create_directories(dir);
  {
    std::ofstream in(dir / "in.jsonl");
    in << nlohmann::json{{"id", "one"}, {"tokens", prompt}, {"max_tokens", greedy.size()}, {"temperature", 0}, {"ignore_eos", true}}.dump() << "\n";
    in << nlohmann::json{{"id", "two"}, {"tokens", prompt}, {"max_tokens", greedy.size()}, {"temperature", 0}, {"ignore_eos", true}, {"n", 2}}.dump() << "\n";
  }
  const Output out = run("batch --model " + kFixture.string() + " --input " + (dir / "in.jsonl").string() + " --output " +
                         (dir / "out.jsonl").string());
  ASSERT_EQ(out.exit_code, 0) << out.text;
  std::ifstream res(dir / "out.jsonl");
  std::string line1, line2;
  std::getline(res, line1);
  std::getline(res, line2);
  const auto a = nlohmann::json::parse(line1), b = nlohmann::json::parse(line2);
  EXPECT_EQ(a["id"], "one");
  EXPECT_EQ(a["tokens"].get<std::vector<int>>(), greedy);
  EXPECT_EQ(b["id"], "two");
  ASSERT_EQ(b["choices"].size(), 2u) << line2;
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(b["choices"][i]["index"], i);
    EXPECT_EQ(b["choices"][i]["tokens"].get<std::vector<int>>(), greedy) << "choice " << i;
  }
  fs::remove_all(dir);
}

TEST(Cli, BadInputNamesWhatWasWrong) {
  Output bad_tokens = run("logits --model " + kFixture.string() + " --tokens 1,x,3");
  EXPECT_NE(bad_tokens.exit_code, 0);
  EXPECT_NE(bad_tokens.text.find("--tokens"), std::string::npos) << bad_tokens.text;
  EXPECT_NE(bad_tokens.text.find("'x'"), std::string::npos) << bad_tokens.text;

  Output out_of_vocab = run("logits --model " + kFixture.string() + " --tokens 1,999999");
  EXPECT_NE(out_of_vocab.exit_code, 0);
  EXPECT_NE(out_of_vocab.text.find("999999"), std::string::npos) << out_of_vocab.text;

  Output bad_block = run("generate --model " + kFixture.string() + " --tokens 1,2 --block-size 24");
  EXPECT_NE(bad_block.exit_code, 0);
  EXPECT_NE(bad_block.text.find("block-size"), std::string::npos) << bad_block.text;

  Output no_model = run("logits --model /nonexistent/model --tokens 1");
  EXPECT_NE(no_model.exit_code, 0);
  EXPECT_NE(no_model.text.find("/nonexistent/model"), std::string::npos) << no_model.text;
}

}  // namespace
