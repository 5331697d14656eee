#pragma once
// OfflineRunner: runs a fixed set of sequences to completion in one engine: every step
// is one ragged batch of decode tokens (first) and prefill chunks (up to the token
// budget), through the paged KV cache. Greedy decoding; sampling, the scheduler with
// preemption and prefix caching arrive with the engine-core issue.
#include <cstdint>
#include <vector>

#include "core/thread_pool.h"
#include "model/causal_lm.h"

namespace latentserve {

struct RunnerOptions {
  int64_t block_size_tokens = 0;     // 0: the model's default (16; 64 for MLA's latent cache)
  int64_t max_batched_tokens = 512;  // tokens per step (prefill is chunked to fit)
  cpu::KvCacheOptions kv_options = {};  // element type and scale granularity of the KV cache
};

struct SequenceRequest {
  std::vector<int32_t> prompt;
  int64_t max_new_tokens = 0;
  bool stop_at_eos = true;
};

struct SequenceResult {
  std::vector<int32_t> generated;   // greedy continuation (may end with an EOS id)
  std::vector<float> prompt_logits; // [n_prompt, vocab] when asked for
};

struct RunnerStats {
  int64_t n_steps = 0;
  int64_t n_kv_blocks = 0;
  int64_t kv_cache_bytes = 0;
  double prefill_seconds = 0;  // steps that computed any prompt token
  double decode_seconds = 0;   // steps of decode tokens only
  int64_t prefill_tokens = 0;
  int64_t decode_tokens = 0;
};

class OfflineRunner {
 public:
  OfflineRunner(CausalLM& model, RunnerOptions options, ThreadPool& pool);

  std::vector<SequenceResult> run(const std::vector<SequenceRequest>& requests, bool keep_prompt_logits);
  const RunnerStats& stats() const { return stats_; }
  int64_t block_size_tokens() const { return options_.block_size_tokens; }

 private:
  CausalLM& model_;
  RunnerOptions options_;
  ThreadPool& pool_;
  RunnerStats stats_;
};

}  // namespace latentserve
