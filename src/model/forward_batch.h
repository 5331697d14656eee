#pragma once
// ForwardBatch: one step's flattened ragged batch, as the model runner hands it to a
// model: the new tokens of every scheduled sequence back to back, their positions,
// the paged-attention metadata, and which rows need logits.
#include <cstdint>
#include <vector>

#include "attention/attention_metadata.h"

namespace latentserve {

struct ForwardBatch {
  std::vector<int32_t> token_ids;       // [n_tokens]
  std::vector<int32_t> positions;       // [n_tokens]
  AttentionMetadata attention;
  std::vector<int32_t> logits_indices;  // rows of the batch whose logits are computed, in output order
  std::vector<int32_t> prompt_lens;     // [n_seqs] prompt length of each sequence (dynamic NTK RoPE needs it)

  int64_t n_tokens() const { return int64_t(token_ids.size()); }
};

}  // namespace latentserve
