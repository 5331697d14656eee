#include "attention/attention_metadata.h"

#include <algorithm>

namespace latentserve {

int64_t AttentionMetadata::max_seq_len() const {
  return seq_lens.empty() ? 0 : *std::max_element(seq_lens.begin(), seq_lens.end());
}

}  // namespace latentserve
