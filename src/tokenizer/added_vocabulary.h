#pragma once
// Added tokens of tokenizer.json ("added_tokens"): matched in the text before the model runs,
// leftmost-longest, with the special / lstrip / rstrip / single_word / normalized flags
// applied as Hugging Face's AddedVocabulary does.
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace latentserve::tokenizer {

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
  bool single_word = false;
};

// A piece of the input: either an added token (token_id >= 0) or text for the model.
struct TextSplit {
  size_t begin, end;
  int32_t token_id;
};

class AddedTokenMatcher {
 public:
  // patterns[i] is what token i looks like in the text it is matched against.
  void build(const std::vector<AddedToken>& tokens, const std::vector<std::string>& patterns,
             const std::vector<bool>& include);
  bool empty() const { return node_token_.size() <= 1 && edges_.empty(); }
  // Splits `text` into added-token matches and the text between them (non-empty pieces).
  void split(std::string_view text, std::vector<TextSplit>& out) const;

 private:
  std::vector<AddedToken> tokens_;       // by pattern index
  std::unordered_map<uint64_t, int32_t> edges_;  // (node << 8 | byte) -> child node
  std::vector<int32_t> node_token_;      // node -> token index or -1
  bool first_byte_[256] = {};
};

}  // namespace latentserve::tokenizer
