#pragma once
// Request: one prompt the engine serves, its generated tokens and its life cycle.
#include <chrono>
#include <memory>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sampling/sampler.h"
#include "tokenizer/incremental_detokenizer.h"
#include "sampling/sampling_params.h"

namespace latentserve {

enum class RequestStatus { Waiting, Running, Finished };

using Clock = std::chrono::steady_clock;

struct Request {
  // completion_index: which of the caller's n completions this is (its own RNG stream).
  Request(int64_t seq_id, std::string id, std::vector<int32_t> prompt, SamplingParams params,
          std::string user_id = {}, int32_t completion_index = 0);

  int64_t seq_id;                 // the engine's key (KV manager, sampler state)
  std::string id;                 // unique among live requests (the caller's id; "<id>\x1f<i>" for completion i > 0)
  std::string user_id;            // the caller's name for it (shared by its n completions)
  int32_t completion_index = 0;   // 0 .. n-1
  std::vector<int32_t> prompt;
  std::vector<int32_t> output;
  SamplingParams params;

  RequestStatus status = RequestStatus::Waiting;
  FinishReason finish_reason = FinishReason::None;
  bool aborted = false;
  int64_t n_computed_tokens = 0;   // tokens whose KV is in the cache
  int64_t n_cached_tokens = 0;     // of the prompt, served from the prefix cache (first admission)
  int64_t n_preemptions = 0;
  bool admitted_before = false;

  SamplerRng rng;
  // Text, when the engine has a tokenizer: stop strings end the request and are cut.
  std::vector<std::string> stop;
  std::unique_ptr<tokenizer::IncrementalDetokenizer> detokenizer;
  std::string text;              // final text so far (stop string excluded)
  size_t n_text_emitted = 0;     // bytes of `text` already reported (the rest is held back)  // per request: the same seed gives the same tokens whatever the batch

  Clock::time_point arrival_time;
  std::optional<Clock::time_point> first_token_time;
  Clock::time_point last_token_time;
  std::optional<Clock::time_point> finish_time;

  int64_t n_tokens() const { return int64_t(prompt.size() + output.size()); }
  int32_t token_at(int64_t i) const {
    return i < int64_t(prompt.size()) ? prompt[size_t(i)] : output[size_t(i - int64_t(prompt.size()))];
  }
  std::vector<int32_t> all_tokens() const;
  int64_t n_uncomputed_tokens() const { return n_tokens() - n_computed_tokens; }
  bool is_finished() const { return status == RequestStatus::Finished; }
  void mark_aborted() {
    status = RequestStatus::Finished;
    aborted = true;
    finish_time = Clock::now();
  }
  std::string finish_reason_name() const;  // "stop", "length", "abort" (OpenAI's words)
};

}  // namespace latentserve
