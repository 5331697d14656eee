#include "tokenizer/added_vocabulary.h"

#include "tokenizer/unicode_text.h"

namespace latentserve::tokenizer {

namespace {
bool is_word_char(char32_t cp) { return cp == '_' || is_alphanumeric(cp) || is_combining_mark(cp); }

// Regex \w$ on text[0, end).
bool ends_with_word(std::string_view text) {
  if (text.empty()) return false;
  size_t start = text.size() - 1;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
  size_t i = start;
  return is_word_char(utf8_next(text, i));
}
bool starts_with_word(std::string_view text) {
  if (text.empty()) return false;
  size_t i = 0;
  return is_word_char(utf8_next(text, i));
}
// Start of the whitespace run that ends text (regex \s*$).
size_t leftmost_space_at_end(std::string_view text) {
  size_t end = text.size();
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
    size_t i = start;
    if (!is_whitespace(utf8_next(text, i))) break;
    end = start;
  }
  return end;
}
// Length of the whitespace run that starts text (regex ^\s*).
size_t rightmost_space_at_start(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    size_t next = i;
    if (!is_whitespace(utf8_next(text, next))) break;
    i = next;
  }
  return i;
}
}  // namespace

void AddedTokenMatcher::build(const std::vector<AddedToken>& tokens, const std::vector<std::string>& patterns,
                              const std::vector<bool>& include) {
  tokens_.clear();
  edges_.clear();
  node_token_.assign(1, -1);
  for (size_t t = 0; t < tokens.size(); ++t) {
    if (!include[t] || patterns[t].empty()) continue;
    const auto index = static_cast<int32_t>(tokens_.size());
    tokens_.push_back(tokens[t]);
    int32_t node = 0;
    for (unsigned char b : patterns[t]) {
      const uint64_t key = (static_cast<uint64_t>(node) << 8) | b;
      auto it = edges_.find(key);
      if (it == edges_.end()) {
        const auto child = static_cast<int32_t>(node_token_.size());
        node_token_.push_back(-1);
        edges_.emplace(key, child);
        node = child;
      } else {
        node = it->second;
      }
    }
    if (node_token_[static_cast<size_t>(node)] < 0) node_token_[static_cast<size_t>(node)] = index;
    first_byte_[static_cast<unsigned char>(patterns[t][0])] = true;
  }
}

void AddedTokenMatcher::split(std::string_view text, std::vector<TextSplit>& out) const {
  size_t start_offset = 0;
  size_t pos = 0;
  const size_t n = text.size();
  while (pos < n) {
    if (!first_byte_[static_cast<unsigned char>(text[pos])]) {
      ++pos;
      continue;
    }
    // Longest match starting at pos.
    int32_t node = 0, best = -1;
    size_t best_end = 0;
    for (size_t i = pos; i < n; ++i) {
      auto it = edges_.find((static_cast<uint64_t>(node) << 8) | static_cast<unsigned char>(text[i]));
      if (it == edges_.end()) break;
      node = it->second;
      if (node_token_[static_cast<size_t>(node)] >= 0) best = node_token_[static_cast<size_t>(node)], best_end = i + 1;
    }
    if (best < 0) {
      ++pos;
      continue;
    }
    const AddedToken& token = tokens_[static_cast<size_t>(best)];
    size_t start = pos, stop = best_end;
    pos = best_end;  // the matcher continues after the raw match
    if (token.single_word) {
      const bool start_space = start == 0 || !ends_with_word(text.substr(0, start));
      const bool stop_space = stop == n || !starts_with_word(text.substr(stop));
      if (!start_space || !stop_space) continue;
    }
    if (token.lstrip) start = std::max(leftmost_space_at_end(text.substr(0, start)), start_offset);
    if (token.rstrip) stop += rightmost_space_at_start(text.substr(stop));
    if (start_offset < start) out.push_back({start_offset, start, -1});
    out.push_back({start, stop, token.id});
    start_offset = stop;
    if (pos < stop) pos = stop;
  }
  if (start_offset < n) out.push_back({start_offset, n, -1});
}

}  // namespace latentserve::tokenizer
