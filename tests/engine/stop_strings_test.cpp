// Text out of the engine: stop strings end a request and are cut from its text, the
// streamed pieces concatenate to the final text, and the `batch` command's JSONL contract.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/llm_engine.h"
#include "model/architectures.h"
#include "common/byte_level_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace latentserve {
namespace {

namespace fs = std::filesystem;

struct Result {
  std::vector<int32_t> tokens;
  std::string text, streamed, finish_reason;
};

Result run_one(LLMEngine& engine, const std::vector<int32_t>& prompt, std::vector<std::string> stop) {
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = 40;
  p.ignore_eos = true;
  engine.add_request("x", prompt, p, std::move(stop));
  Result r;
  while (engine.has_unfinished())
    for (auto& o : engine.step()) {
      r.streamed += o.new_text;
      if (o.finished) {
        r.tokens = o.output_tokens;
        r.text = o.text;
        r.finish_reason = o.finish_reason;
      }
    }
  return r;
}

TEST(StopStrings, EndTheRequestAndAreCutFromTheText) {
  ThreadPool pool(2);
  auto model = load_causal_lm(fs::path(LATENTSERVE_FIXTURES_DIR) / "llama_gqa_f32", pool);
  auto tok = tokenizer::Tokenizer::from_json(testing::byte_level_tokenizer_json(), "byte-level test tokenizer");
  LLMEngine engine(*model, {}, pool, &tok);
  // Find a prompt whose greedy output has two printable ASCII bytes in a row.
  for (int32_t first = 1; first < 60; ++first) {
    const std::vector<int32_t> prompt = {first, 66, 67, 68};
    Result full = run_one(engine, prompt, {});
    ASSERT_EQ(full.text, tok.decode(full.tokens, true));
    ASSERT_EQ(full.streamed, full.text) << "streamed pieces must add up to the text";
    size_t k = 0;
    while (k + 1 < full.tokens.size() && !(full.tokens[k] >= 0x20 && full.tokens[k] < 0x7F &&
                                          full.tokens[k + 1] >= 0x20 && full.tokens[k + 1] < 0x7F))
      ++k;
    if (k + 1 >= full.tokens.size()) continue;
    const std::string stop = {char(full.tokens[k]), char(full.tokens[k + 1])};
    const size_t at = full.text.find(stop);
    Result cut = run_one(engine, prompt, {"\x01\x02never", stop});
    EXPECT_EQ(cut.finish_reason, "stop");
    EXPECT_EQ(cut.text, full.text.substr(0, at));
    EXPECT_EQ(cut.streamed, cut.text) << "held-back text must never include the stop string";
    EXPECT_LE(cut.tokens.size(), k + 2);
    EXPECT_EQ(full.finish_reason, "length");
    return;
  }
  GTEST_SKIP() << "no prompt produced two printable bytes in a row";
}

// Complete UTF-8 (RFC 3629 lead and continuation bytes, no truncated sequence).
bool is_complete_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    i += n;
  }
  return true;
}

// Text held back for a possible stop string is released on character boundaries: each
// streamed piece is whole UTF-8 (a server writes each piece as a JSON string of its own).
// The fixture's outputs are mostly bytes >= 0x80, which decode to U+FFFD (3 bytes), so a
// 3-byte hold-back would split most of them.
TEST(StopStrings, StreamedPiecesAreWholeCharacters) {
  ThreadPool pool(2);
  auto model = load_causal_lm(fs::path(LATENTSERVE_FIXTURES_DIR) / "llama_gqa_f32", pool);
  auto tok = tokenizer::Tokenizer::from_json(testing::byte_level_tokenizer_json(), "byte-level test tokenizer");
  LLMEngine engine(*model, {}, pool, &tok);
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = 60;
  p.ignore_eos = true;
  engine.add_request("x", {1, 2, 3, 4}, p, {"\x01\x02\x03\x04"});
  std::string streamed, text;
  int n_pieces = 0;
  while (engine.has_unfinished())
    for (auto& o : engine.step()) {
      EXPECT_TRUE(is_complete_utf8(o.new_text)) << "piece " << n_pieces;
      n_pieces += !o.new_text.empty();
      streamed += o.new_text;
      if (o.finished) text = o.text;
    }
  EXPECT_EQ(streamed, text);
  EXPECT_NE(text.find("\xEF\xBF\xBD"), std::string::npos) << "no multi-byte character was produced";
  EXPECT_GT(n_pieces, 10);
}

std::pair<int, std::string> run_cli(const std::string& args) {
  const std::string cmd = std::string(LATENTSERVE_BINARY) + " " + args + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  std::string text;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) text.append(buf.data(), n);
  const int status = pclose(pipe);
  return {WEXITSTATUS(status), text};
}

TEST(BatchCommand, WritesOneResultPerRequestInInputOrder) {
  const fs::path dir = fs::temp_directory_path() / ("latentserve_batch_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const fs::path model = fs::path(LATENTSERVE_FIXTURES_DIR) / "llama_gqa_f32";
  const fs::path input = dir / "in.jsonl", output = dir / "out.jsonl";
  std::ofstream(input) << R"({"id": "a", "tokens": [1, 2, 3, 4, 5], "max_tokens": 6, "temperature": 0, "ignore_eos": true})" "\n"
                       << "\n"
                       << R"({"id": "b", "tokens": [1, 2, 3, 4, 5, 6, 7, 8, 9], "max_tokens": 3, "temperature": 0.7, "seed": 3, "ignore_eos": true, "logprobs": 2})" "\n";
  auto [code, text] = run_cli("batch --model " + model.string() + " --input " + input.string() + " --output " +
                              output.string());
  ASSERT_EQ(code, 0) << text;
  EXPECT_NE(text.find("TTFT"), std::string::npos) << "metrics printed at the end";
  std::ifstream in(output);
  std::string line;
  std::vector<nlohmann::json> rows;
  while (std::getline(in, line)) rows.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0]["id"], "a");
  EXPECT_EQ(rows[0]["tokens"].size(), 6u);
  EXPECT_EQ(rows[0]["finish_reason"], "length");
  EXPECT_EQ(rows[0]["prompt_tokens"], 5);
  EXPECT_EQ(rows[1]["id"], "b");
  EXPECT_EQ(rows[1]["generated_tokens"], 3);
  ASSERT_EQ(rows[1]["logprobs"].size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    const auto& lp = rows[1]["logprobs"][i];
    EXPECT_EQ(lp["token"], rows[1]["tokens"][i]);
    EXPECT_LE(lp["logprob"].get<double>(), 0.0);
    EXPECT_EQ(lp["top_logprobs"].size(), 2u);
    EXPECT_GE(lp["top_logprobs"][0]["logprob"].get<double>(), lp["top_logprobs"][1]["logprob"].get<double>());
  }
  EXPECT_FALSE(rows[0].contains("logprobs"));

  // Greedy request "a" equals `generate` on the same prompt.
  auto [gcode, gtext] = run_cli("generate --model " + model.string() + " --tokens 1,2,3,4,5 --max-tokens 6 --ignore-eos");
  ASSERT_EQ(gcode, 0) << gtext;
  EXPECT_EQ(nlohmann::json::parse(gtext)["tokens"], rows[0]["tokens"]);

  // A bad line is named by its number, and nothing runs.
  std::ofstream(input) << R"({"id": "ok", "tokens": [1, 2]})" "\n" << R"({"id": "bad", "tokens": [1], "top_p": 7})" "\n";
  auto [bad_code, bad_text] = run_cli("batch --model " + model.string() + " --input " + input.string() + " --output " +
                                      output.string());
  EXPECT_NE(bad_code, 0);
  EXPECT_NE(bad_text.find("line 2"), std::string::npos) << bad_text;
  EXPECT_NE(bad_text.find("top_p"), std::string::npos) << bad_text;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace latentserve
