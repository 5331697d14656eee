#include "engine/batch_builder.h"

#include <algorithm>
#include <cassert>

namespace latentserve {

ForwardBatch build_forward_batch(const std::vector<ScheduledChunk>& chunks, int64_t block_size_tokens,
                                 std::vector<int64_t>* logits_owner) {
  ForwardBatch b;
  AttentionMetadata& m = b.attention;
  m.block_size_tokens = block_size_tokens;
  m.query_start_loc.push_back(0);
  for (const auto& c : chunks)
    m.max_blocks_per_seq = std::max<int64_t>(m.max_blocks_per_seq, int64_t(c.sequence->block_table.blocks().size()));
  m.block_tables.assign(chunks.size() * size_t(m.max_blocks_per_seq), -1);
  if (logits_owner) logits_owner->clear();

  for (size_t i = 0; i < chunks.size(); ++i) {
    const Sequence& s = *chunks[i].sequence;
    const int64_t first = s.n_computed_tokens, end = first + chunks[i].n_tokens;
    assert(chunks[i].n_tokens > 0 && end <= int64_t(s.tokens.size()));
    assert(s.block_table.capacity_tokens() >= end);
    for (int64_t pos = first; pos < end; ++pos) {
      const bool wants_logits = chunks[i].all_logits || (pos == end - 1 && end == int64_t(s.tokens.size()));
      if (wants_logits) {
        b.logits_indices.push_back(int32_t(b.token_ids.size()));
        if (logits_owner) logits_owner->push_back(int64_t(i));
      }
      b.token_ids.push_back(s.tokens[size_t(pos)]);
      b.positions.push_back(int32_t(pos));
      m.slot_mapping.push_back(s.block_table.slot(pos));
    }
    m.query_start_loc.push_back(int32_t(b.token_ids.size()));
    m.seq_lens.push_back(int32_t(end));
    b.prompt_lens.push_back(int32_t(s.n_prompt_tokens));
    std::copy(s.block_table.blocks().begin(), s.block_table.blocks().end(),
              m.block_tables.begin() + int64_t(i) * m.max_blocks_per_seq);
  }
  return b;
}

}  // namespace latentserve
