#pragma once
// tokenizer.json "pre_tokenizer": ByteLevel (add_prefix_space, use_regex), Split (String or
// Regex pattern, every behavior, invert), Digits, Metaspace, Whitespace, WhitespaceSplit,
// Punctuation, Sequence. Any other type is an Error naming it.
#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <vector>

namespace latentserve::tokenizer {

struct PreToken {
  std::string text;
  bool at_input_start = false;  // starts at offset 0 of the original input (Metaspace "first")
};

// The pieces of one input segment. When byte_level is set, every byte of every piece is to
// be read through the GPT-2 byte alphabet (the model does that mapping, not the text).
struct PreTokenized {
  std::vector<PreToken> pieces;
  bool byte_level = false;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  virtual void pre_tokenize(PreTokenized& p) const = 0;
};

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& config, const std::string& file);

}  // namespace latentserve::tokenizer
