#pragma once
// Streaming detokenization: ids arrive one at a time; each call returns only complete UTF-8
// text, and the concatenation of everything returned (finish() included) equals
// Tokenizer::decode(all ids). It decodes a short window of ids (from the last emitted
// boundary) and emits the new suffix, holding text back while it ends in U+FFFD (an
// incomplete byte-level or byte-fallback character). The first token of the window keeps
// the leading-space rules (Metaspace, Strip) of a sequence start, as full decoding does.
#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace latentserve::tokenizer {

class IncrementalDetokenizer {
 public:
  explicit IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens = false);

  // Text that became final with this id (possibly empty).
  std::string step(int32_t id);
  // The held-back remainder (an incomplete character at the end decodes to U+FFFD as in decode()).
  std::string finish();

 private:
  std::string decode_range(size_t begin, size_t end) const;

  const Tokenizer& tokenizer_;
  bool skip_special_;
  bool prefix_stable_;
  std::vector<int32_t> ids_;
  size_t prefix_ = 0;  // window start
  size_t read_ = 0;    // ids before this are emitted
  std::string emitted_;  // only kept when the decoder is not prefix-stable
};

}  // namespace latentserve::tokenizer
