#pragma once
// Flattens one step's scheduled chunks into a ForwardBatch: the model runner's half
// of the scheduler/runner contract (the scheduler decides what runs; this lays it out).
#include <cstdint>
#include <vector>

#include "engine/sequence.h"
#include "model/forward_batch.h"

namespace latentserve {

struct ScheduledChunk {
  Sequence* sequence;
  int64_t n_tokens;        // new tokens computed this step: tokens[n_computed, n_computed + n_tokens)
  bool all_logits = false; // logits for every new token (else only the last one, when it ends the known tokens)
};

// The blocks for every chunk must already be reserved (BlockTable::reserve).
// want_logits[i] tells which chunk produced each row of logits (-1 if none).
ForwardBatch build_forward_batch(const std::vector<ScheduledChunk>& chunks, int64_t block_size_tokens,
                                 std::vector<int64_t>* logits_owner = nullptr);

}  // namespace latentserve
