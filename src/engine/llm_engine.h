#pragma once
// LLMEngine: continuous batching over one model. add_request() queues a request,
// step() runs one scheduler decision + one forward + sampling and reports what each
// request produced, abort() cancels a request at any step (its blocks return at once).
// The offline `batch` command and the server drive the same loop.
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/cpu/cpu_kv_cache.h"
#include "engine/engine_metrics.h"
#include "engine/scheduler.h"
#include "model/causal_lm.h"
#include "sampling/sampler.h"
#include "tokenizer/tokenizer.h"

namespace latentserve {

struct EngineConfig {
  SchedulerConfig scheduler;
  int64_t block_size_tokens = 0;        // 0: the model's default (16; 64 for MLA)
  int64_t kv_cache_bytes = int64_t(1) << 30;  // KV memory budget, in the cache's own element type
  int64_t n_kv_blocks = 0;              // > 0: exactly this many usable blocks (overrides the budget)
  bool enable_prefix_caching = true;
  cpu::KvCacheOptions kv_options;       // --kv-cache-dtype, --kv-scale
  // A device model chooses tokens on the device (greedy, temperature / top-k / top-p / min-p
  // with the host Sampler's draws) unless a request needs penalties or logprobs; false: the
  // host Sampler always (logits copied back), the reference the device choice is tested against.
  bool sample_on_device = true;
};

struct RequestOutput {
  std::string id;
  int32_t index = 0;                    // which of the request's n completions (OpenAI's choice index)
  std::vector<int32_t> new_tokens;      // produced by this step
  std::vector<SampleResult> new_samples;  // with logprobs, when asked for
  std::string new_text;                 // text that became final (held back while a stop string may match)
  bool finished = false;
  // When finished:
  std::string finish_reason;            // stop | length | abort
  std::vector<int32_t> output_tokens;
  std::string text;                     // the whole output text (without the stop string), with a tokenizer
  int64_t n_prompt_tokens = 0, n_cached_tokens = 0, n_preemptions = 0;
  double ttft_ms = 0, tpot_ms = 0;
};

class LLMEngine {
 public:
  // With a tokenizer the engine also detokenizes and honours stop strings.
  LLMEngine(CausalLM& model, EngineConfig config, ThreadPool& pool, const tokenizer::Tokenizer* tokenizer = nullptr);

  // Validates (Error naming the parameter) and queues. Ids must be unique among live requests.
  void add_request(const std::string& id, std::vector<int32_t> prompt, SamplingParams params,
                   std::vector<std::string> stop = {});
  bool abort(const std::string& id);
  std::vector<RequestOutput> step();
  bool has_unfinished() const {
    return scheduler_.has_unfinished() || !pending_completions_.empty() || !aborted_pending_.empty();
  }

  const EngineMetrics& metrics() const { return metrics_; }
  const KvCacheManager& kv_manager() const { return kv_; }
  int64_t block_size_tokens() const { return kv_.block_size_tokens(); }

 private:
  // `tokens` keeps each scheduled request's tokens alive while the batch is built.
  ForwardBatch build_batch(const StepPlan& plan, std::vector<std::vector<int32_t>>& tokens) const;
  bool choose_on_device(const StepPlan& plan, std::vector<TokenChoice>& choices) const;
  // Appends the token's text; true when a stop string ended the request.
  bool update_text(Request& r, int32_t token, RequestOutput& out);

  CausalLM& model_;
  const tokenizer::Tokenizer* tokenizer_;
  ThreadPool& pool_;
  KvCacheManager kv_;
  std::unique_ptr<KvCacheMemory> kv_memory_;  // made by the model: host or device memory
  Scheduler scheduler_;
  Sampler sampler_;
  bool sample_on_device_;
  EngineMetrics metrics_;
  int64_t next_seq_id_ = 1;
  struct LiveRequest {
    int32_t n;           // completions asked for (ids: completion_id(id, 0 .. n-1))
    int32_t unfinished;  // of those, not yet reported finished
  };
  std::unordered_map<std::string, LiveRequest> live_ids_;  // by the caller's id
  // n > 1: completions 1..n-1 wait until completion 0 has computed the prompt, then join the
  // queue and find its full prompt blocks in the prefix cache (shared, ref-counted).
  std::unordered_map<std::string, std::vector<std::unique_ptr<Request>>> pending_completions_;
  std::vector<std::unique_ptr<Request>> aborted_pending_;  // reported finished by the next step()
  std::vector<float> logits_;
  std::vector<TokenChoice> choices_;     // how each logits row picks its token on the device
  std::vector<int32_t> device_tokens_;   // the tokens a device model chose
};

}  // namespace latentserve
