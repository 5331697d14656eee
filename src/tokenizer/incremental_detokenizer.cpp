#include "tokenizer/incremental_detokenizer.h"

#include <span>

namespace latentserve::tokenizer {

namespace {
bool ends_with_replacement(const std::string& s) {
  return s.size() >= 3 && s.compare(s.size() - 3, 3, "\xEF\xBF\xBD") == 0;
}
}  // namespace

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(tokenizer), skip_special_(skip_special_tokens), prefix_stable_(tokenizer.decoder_prefix_stable()) {}

std::string IncrementalDetokenizer::decode_range(size_t begin, size_t end) const {
  return tokenizer_.decode(std::span<const int32_t>(ids_.data() + begin, end - begin), skip_special_);
}

std::string IncrementalDetokenizer::step(int32_t id) {
  ids_.push_back(id);
  if (!prefix_stable_) return {};  // text can change at its end: everything comes out in finish()
  const std::string before = decode_range(prefix_, read_);
  const std::string now = decode_range(prefix_, ids_.size());
  if (now.size() <= before.size() || ends_with_replacement(now) || now.compare(0, before.size(), before) != 0)
    return {};
  // Keep at least one emitted id in the window so the next token is not decoded as a
  // sequence start (Metaspace drops its leading space, Strip removes one).
  prefix_ = read_;
  read_ = ids_.size();
  return now.substr(before.size());
}

std::string IncrementalDetokenizer::finish() {
  if (!prefix_stable_) {
    std::string all = decode_range(0, ids_.size());
    ids_.clear();
    return all;
  }
  const std::string before = decode_range(prefix_, read_);
  const std::string now = decode_range(prefix_, ids_.size());
  prefix_ = read_ = ids_.size();
  if (now.size() <= before.size() || now.compare(0, before.size(), before) != 0) return {};
  return now.substr(before.size());
}

}  // namespace latentserve::tokenizer
