#pragma once
// AttentionMetadata: how a flattened ragged batch maps onto sequences and onto the
// paged KV cache. Sequence s owns query tokens [query_start_loc[s], query_start_loc[s+1])
// of the batch; after this step it has seq_lens[s] tokens of context, the new ones
// being the last. Token t's K/V goes to slot slot_mapping[t] (block * block_size + offset).
#include <cstdint>
#include <vector>

namespace latentserve {

struct AttentionMetadata {
  int64_t block_size_tokens = 0;
  std::vector<int32_t> query_start_loc;  // [n_seqs + 1]
  std::vector<int32_t> seq_lens;         // [n_seqs]
  std::vector<int32_t> block_tables;     // [n_seqs, max_blocks_per_seq], unused entries -1
  int64_t max_blocks_per_seq = 0;
  std::vector<int64_t> slot_mapping;     // [n_tokens]

  int64_t n_seqs() const { return int64_t(seq_lens.size()); }
  int64_t n_tokens() const { return int64_t(slot_mapping.size()); }
  int64_t max_seq_len() const;
};

}  // namespace latentserve
