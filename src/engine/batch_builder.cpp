#include "engine/batch_builder.h"

#include <algorithm>
#include <cassert>

namespace latentserve {

ForwardBatch build_forward_batch(const std::vector<BatchChunk>& chunks, int64_t block_size_tokens,
                                 std::vector<int64_t>* logits_owner) {
  ForwardBatch b;
  AttentionMetadata& m = b.attention;
  m.block_size_tokens = block_size_tokens;
  m.query_start_loc.push_back(0);
  for (const auto& c : chunks)
    m.max_blocks_per_seq = std::max<int64_t>(m.max_blocks_per_seq, int64_t(c.block_table->blocks().size()));
  m.block_tables.assign(chunks.size() * size_t(m.max_blocks_per_seq), kNullBlock);
  if (logits_owner) logits_owner->clear();

  for (size_t i = 0; i < chunks.size(); ++i) {
    const BatchChunk& c = chunks[i];
    const int64_t end = c.first + c.n_tokens, n_known = int64_t(c.tokens.size());
    assert(c.n_tokens > 0 && end <= n_known);
    assert(c.block_table->capacity_tokens() >= end);
    for (int64_t pos = c.first; pos < end; ++pos) {
      if (c.all_logits || (pos == end - 1 && end == n_known)) {
        b.logits_indices.push_back(int32_t(b.token_ids.size()));
        if (logits_owner) logits_owner->push_back(int64_t(i));
      }
      b.token_ids.push_back(c.tokens[size_t(pos)]);
      b.positions.push_back(int32_t(pos));
      m.slot_mapping.push_back(c.block_table->slot(pos));
    }
    m.query_start_loc.push_back(int32_t(b.token_ids.size()));
    m.seq_lens.push_back(int32_t(end));
    b.prompt_lens.push_back(int32_t(c.prompt_len));
    std::copy(c.block_table->blocks().begin(), c.block_table->blocks().end(),
              m.block_tables.begin() + int64_t(i) * m.max_blocks_per_seq);
  }
  return b;
}

ForwardBatch build_forward_batch(const std::vector<ScheduledChunk>& chunks, int64_t block_size_tokens,
                                 std::vector<int64_t>* logits_owner) {
  std::vector<BatchChunk> views;
  for (const auto& c : chunks) {
    const Sequence& s = *c.sequence;
    views.push_back({s.tokens, &s.block_table, s.n_computed_tokens, c.n_tokens, s.n_prompt_tokens, c.all_logits});
  }
  return build_forward_batch(views, block_size_tokens, logits_owner);
}

}  // namespace latentserve
