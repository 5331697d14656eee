#pragma once
// Flattens one step's scheduled chunks into a ForwardBatch: the model runner's half
// of the scheduler/runner contract (the scheduler decides what runs; this lays it out).
#include <cstdint>
#include <span>
#include <vector>

#include "engine/sequence.h"
#include "model/forward_batch.h"

namespace latentserve {

struct ScheduledChunk {
  Sequence* sequence;
  int64_t n_tokens;        // new tokens computed this step: tokens[n_computed, n_computed + n_tokens)
  bool all_logits = false; // logits for every new token (else only the last one, when it ends the known tokens)
};

// One sequence's part of a step, whatever keeps the sequence (Sequence, Request).
struct BatchChunk {
  std::span<const int32_t> tokens;  // every known token of the sequence (prompt + output)
  const BlockTable* block_table;    // must already cover first + n_tokens positions
  int64_t first;                    // tokens before this have their KV cached
  int64_t n_tokens;                 // computed this step
  int64_t prompt_len;
  bool all_logits = false;          // logits for every new token (else only for the last known token)
};

// Lays the chunks out as one ragged batch: token ids, positions, slots, block tables
// (padded with the null block) and the logits rows. logits_owner[i] (if given) names the
// chunk that produced logits row i.
ForwardBatch build_forward_batch(const std::vector<BatchChunk>& chunks, int64_t block_size_tokens,
                                 std::vector<int64_t>* logits_owner = nullptr);
// The same for Sequences (the offline runner and the decode bench).
ForwardBatch build_forward_batch(const std::vector<ScheduledChunk>& chunks, int64_t block_size_tokens,
                                 std::vector<int64_t>* logits_owner = nullptr);

}  // namespace latentserve
