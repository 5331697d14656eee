#pragma once
// A compiled PCRE2 pattern (UTF + UCP, JIT when available): \p{L}, \p{N}, lookahead and
// (?i:...) as in the pre-tokenizer patterns of tokenizer.json. Matching assumes valid UTF-8.
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace latentserve::tokenizer {

class Regex {
 public:
  // `what` names the pattern's owner in errors ("Split pre-tokenizer in tokenizer.json").
  Regex(const std::string& pattern, const std::string& what);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Non-overlapping, non-empty matches as (begin, end) byte offsets, left to right.
  void find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const;
  const std::string& pattern() const { return pattern_; }

 private:
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8
  bool jit_ = false;
};

// A literal string as a regex pattern (what HF does with {"String": ...} patterns).
std::string regex_escape(std::string_view literal);

}  // namespace latentserve::tokenizer
