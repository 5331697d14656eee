#pragma once
// The batch-layout half of a paged-attention call (sequences, context lengths, block
// tables), filled from a step's AttentionMetadata; callers add q, the cache and the shape.
#include "attention/attention_metadata.h"
#include "backend/cpu/paged_attention.h"

namespace latentserve {

inline cpu::PagedAttentionParams paged_attention_params(const AttentionMetadata& meta) {
  cpu::PagedAttentionParams p{};
  p.query_start_loc = meta.query_start_loc.data();
  p.seq_lens = meta.seq_lens.data();
  p.block_tables = meta.block_tables.data();
  p.n_seqs = meta.n_seqs();
  p.max_blocks_per_seq = meta.max_blocks_per_seq;
  p.block_size = meta.block_size_tokens;
  return p;
}

}  // namespace latentserve
