#pragma once
// Scheduler: each step, decides which requests run and how many of their tokens, from
// the waiting/running queues, the KV cache manager and the token budget, and returns a
// StepPlan. Continuous batching: requests join and leave between any two steps.
//  1. Running requests first, in arrival order (decode tokens and unfinished prefill
//     chunks alike), each taking min(uncomputed tokens, budget left). When the KV cache
//     cannot hold a request's new tokens, the newest running request is preempted by
//     recompute (its blocks freed; it goes back to the front of the waiting queue and
//     later re-prefills, helped by its cached prefix blocks).
//  2. Then waiting requests, oldest first, while the budget, max_num_seqs and the cache
//     allow (none are admitted in a step that preempted).
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "engine/request.h"
#include "kv/kv_cache_manager.h"

namespace latentserve {

struct SchedulerConfig {
  int64_t max_num_seqs = 256;
  int64_t max_num_batched_tokens = 2048;  // per step; prefill is chunked to fit
  int64_t max_model_len = 0;              // prompt + max_tokens limit per request
};

struct ScheduledRequest {
  Request* request;
  int64_t n_tokens;  // tokens [n_computed, n_computed + n_tokens) run this step
};

struct StepPlan {
  std::vector<ScheduledRequest> scheduled;  // running order; decodes first as they come first
  std::vector<Request*> preempted;          // this step
  int64_t n_batched_tokens = 0;
  bool empty() const { return scheduled.empty(); }
};

class Scheduler {
 public:
  Scheduler(SchedulerConfig config, KvCacheManager& kv);

  // Rejects (Error naming the limit) a request that could never run: prompt + max_tokens
  // over max_model_len or over the whole cache.
  void add(std::unique_ptr<Request> request);
  StepPlan schedule();
  // After the forward of `plan`: advances n_computed_tokens and registers full blocks.
  void on_step_computed(const StepPlan& plan);
  // Removes finished requests (and aborts); returns them with their blocks freed.
  std::vector<std::unique_ptr<Request>> take_finished();
  // Finishes a request as aborted; its blocks return now. False if unknown or already finished.
  bool abort(const std::string& request_id);

  int64_t n_waiting() const { return int64_t(waiting_.size()); }
  int64_t n_running() const { return int64_t(running_.size()); }
  int64_t n_preemptions() const { return n_preemptions_; }
  // Requests still to run, or finished (aborted included) but not yet reported by take_finished().
  bool has_unfinished() const { return !waiting_.empty() || !running_.empty() || !finished_.empty(); }
  const KvCacheManager& kv() const { return kv_; }

 private:
  void preempt(Request* r);

  SchedulerConfig config_;
  KvCacheManager& kv_;
  std::deque<std::unique_ptr<Request>> waiting_;
  std::vector<std::unique_ptr<Request>> running_;  // arrival (admission) order
  std::vector<std::unique_ptr<Request>> finished_;
  int64_t n_preemptions_ = 0;
};

}  // namespace latentserve
