#pragma once
#include <algorithm>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace latentserve::testing {

// A byte-level BPE tokenizer with one token per byte (GPT-2's byte-to-unicode map, no
// merges): it fits the fixtures' 256-token vocabulary, so id == byte value.
inline nlohmann::json byte_level_tokenizer_json() {
  std::vector<int> bs;
  for (int b = '!'; b <= '~'; ++b) bs.push_back(b);
  for (int b = 0xA1; b <= 0xAC; ++b) bs.push_back(b);
  for (int b = 0xAE; b <= 0xFF; ++b) bs.push_back(b);
  std::vector<int> cs = bs;
  int extra = 0;
  for (int b = 0; b < 256; ++b)
    if (std::find(bs.begin(), bs.end(), b) == bs.end()) {
      bs.push_back(b);
      cs.push_back(256 + extra++);
    }
  nlohmann::json vocab = nlohmann::json::object();
  for (size_t i = 0; i < bs.size(); ++i) {
    std::string utf8;
    const int c = cs[i];
    if (c < 0x80) utf8 += char(c);
    else if (c < 0x800) { utf8 += char(0xC0 | (c >> 6)); utf8 += char(0x80 | (c & 0x3F)); }
    vocab[utf8] = bs[i];
  }
  const nlohmann::json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  return {{"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr}, {"added_tokens", nlohmann::json::array()},
          {"normalizer", nullptr}, {"pre_tokenizer", byte_level}, {"post_processor", nullptr}, {"decoder", byte_level},
          {"model", {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
                     {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"byte_fallback", false},
                     {"ignore_merges", false}, {"vocab", vocab}, {"merges", nlohmann::json::array()}}}};
}

}  // namespace latentserve::testing
