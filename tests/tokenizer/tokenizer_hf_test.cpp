// Exact agreement with Hugging Face tokenizers (npm `tokenizers`) on the real Llama-2,
// Llama-3, Qwen3 and DeepSeek-V3 tokenizer.json files and two variants made from them, over
// the >= 5,000-line corpus of corpus.js: ids with and without special tokens, decode with and
// without skip_special_tokens, decode(encode(x)) == x wherever HF gives that, and the
// streaming detokenizer == full decode for every line.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/reference_data.h"
#include "tokenizer/tokenizer.h"

namespace latentserve::tokenizer {
namespace {

using test::base64_decode;

#define REQUIRE_REFERENCE(dir)                                           \
  std::string dir;                                                       \
  {                                                                      \
    std::string why;                                                     \
    auto found = test::tokenizer_reference_dir(why);                     \
    if (!found) {                                                        \
      if (why.rfind("make_reference", 0) == 0) FAIL() << why;            \
      GTEST_SKIP() << why;                                               \
    }                                                                    \
    dir = *found;                                                        \
  }

std::string show(const std::string& bytes) {
  std::string out;
  for (unsigned char c : bytes) {
    if (c >= 0x20 && c < 0x7F && c != '\\') out += static_cast<char>(c);
    else out += fmt::format("\\x{:02x}", c);
  }
  return out.size() > 300 ? out.substr(0, 300) + "..." : out;
}

class HfAgreement : public ::testing::TestWithParam<const char*> {};

TEST_P(HfAgreement, IdsDecodeRoundTripAndStreaming) {
  REQUIRE_REFERENCE(dir);
  const std::string name = GetParam();
  const auto corpus = test::read_json(dir + "/corpus.json");
  const auto ref = test::read_json(dir + "/ref_" + name + ".json");
  const Tokenizer tok = Tokenizer::from_file(ref["file"].get<std::string>());
  ASSERT_GE(corpus.size(), 5000u);

  size_t id_mismatch = 0, id_ns_mismatch = 0, dec_mismatch = 0, dec_skip_mismatch = 0, stream_mismatch = 0;
  size_t hf_roundtrip = 0, our_roundtrip = 0, shown = 0;
  for (size_t i = 0; i < corpus.size(); ++i) {
    const std::string text = base64_decode(corpus[i].get<std::string>());
    const auto expected = ref["ids"][i].get<std::vector<int32_t>>();
    const auto expected_ns = ref["ids_no_special"][i].get<std::vector<int32_t>>();
    const std::string expected_dec = base64_decode(ref["decoded"][i].get<std::string>());
    const std::string expected_skip = base64_decode(ref["decoded_skip"][i].get<std::string>());

    const auto ids = tok.encode(text, true);
    if (ids != expected) {
      ++id_mismatch;
      if (shown++ < 5) {
        ADD_FAILURE() << name << " line " << i << " '" << show(text) << "'\n  expected "
                      << ::testing::PrintToString(expected) << "\n  got      " << ::testing::PrintToString(ids);
      }
    }
    if (tok.encode(text, false) != expected_ns) ++id_ns_mismatch;
    const std::string decoded = tok.decode(expected, false);
    if (decoded != expected_dec) {
      ++dec_mismatch;
      if (shown++ < 5)
        ADD_FAILURE() << name << " decode line " << i << "\n  expected '" << show(expected_dec) << "'\n  got      '"
                      << show(decoded) << "'";
    }
    if (tok.decode(expected, true) != expected_skip) ++dec_skip_mismatch;
    if (expected_skip == text) {
      ++hf_roundtrip;
      if (tok.decode(tok.encode(text, true), true) == text) ++our_roundtrip;
    }
    for (bool skip : {false, true}) {
      IncrementalDetokenizer stream(tok, skip);
      std::string streamed;
      for (int32_t id : expected) streamed += stream.step(id);
      streamed += stream.finish();
      if (streamed != (skip ? expected_skip : expected_dec)) {
        ++stream_mismatch;
        if (shown++ < 5)
          ADD_FAILURE() << name << " stream line " << i << " skip=" << skip << "\n  expected '"
                        << show(skip ? expected_skip : expected_dec) << "'\n  got      '" << show(streamed) << "'";
      }
    }
  }
  EXPECT_EQ(id_mismatch, 0u) << name << ": encode(add_special_tokens=true) differs";
  EXPECT_EQ(id_ns_mismatch, 0u) << name << ": encode(add_special_tokens=false) differs";
  EXPECT_EQ(dec_mismatch, 0u) << name << ": decode differs";
  EXPECT_EQ(dec_skip_mismatch, 0u) << name << ": decode(skip_special_tokens) differs";
  EXPECT_EQ(stream_mismatch, 0u) << name << ": streaming differs from full decode";
  EXPECT_EQ(our_roundtrip, hf_roundtrip) << name << ": decode(encode(x), skip_special_tokens) == x";
  const bool variant = name == "llama2_metaspace" || name == "qwen3_nfkc_digits";
  if (!variant) {
    EXPECT_GT(hf_roundtrip, corpus.size() / 2) << name << ": the corpus should mostly round-trip";
  }
  std::printf("[ %s ] %zu lines, all ids equal to HF; round trip holds on %zu lines (as in HF)\n", name.c_str(),
              corpus.size(), hf_roundtrip);
}

INSTANTIATE_TEST_SUITE_P(RealTokenizers, HfAgreement,
                         ::testing::Values("llama3", "qwen3", "deepseek_v3", "llama2", "llama2_metaspace",
                                           "qwen3_nfkc_digits"));

}  // namespace
}  // namespace latentserve::tokenizer
