#include "engine/scheduler.h"

#include <algorithm>
#include <cassert>
#include <utility>

#include "core/error.h"

namespace latentserve {

Scheduler::Scheduler(SchedulerConfig config, KvCacheManager& kv) : config_(config), kv_(kv) {
  if (config_.max_num_seqs <= 0) fail("max_num_seqs must be positive, got {}", config_.max_num_seqs);
  if (config_.max_num_batched_tokens <= 0)
    fail("max_num_batched_tokens must be positive, got {}", config_.max_num_batched_tokens);
}

void Scheduler::add(std::unique_ptr<Request> r) {
  const int64_t need = int64_t(r->prompt.size()) + r->params.max_tokens;
  if (r->prompt.empty()) fail("request '{}': the prompt is empty", r->id);
  if (config_.max_model_len > 0 && need > config_.max_model_len)
    fail("request '{}': prompt ({} tokens) + max_tokens ({}) = {} exceeds the maximum model length {}", r->id,
         r->prompt.size(), r->params.max_tokens, need, config_.max_model_len);
  const int64_t capacity = kv_.stats().n_blocks_total * kv_.block_size_tokens();
  if (need > capacity)
    fail("request '{}': prompt ({} tokens) + max_tokens ({}) = {} exceeds the whole KV cache ({} tokens)", r->id,
         r->prompt.size(), r->params.max_tokens, need, capacity);
  r->status = RequestStatus::Waiting;
  waiting_.push_back(std::move(r));
}

void Scheduler::preempt(Request* r) {
  kv_.free(r->seq_id);
  r->n_computed_tokens = 0;
  r->status = RequestStatus::Waiting;
  ++r->n_preemptions;
  ++n_preemptions_;
  auto it = std::find_if(running_.begin(), running_.end(), [&](const auto& p) { return p.get() == r; });
  assert(it != running_.end());
  waiting_.push_front(std::move(*it));
  running_.erase(it);
}

StepPlan Scheduler::schedule() {
  StepPlan plan;
  int64_t budget = config_.max_num_batched_tokens;

  // 1. Running requests, oldest first.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Request* r = running_[i].get();
    const int64_t n = std::min(r->n_uncomputed_tokens(), budget);
    if (n == 0) {
      ++i;
      continue;
    }
    // Slots for positions up to n_computed + n (earlier chunks may have reserved some).
    auto room = [&] {
      const int64_t missing = r->n_computed_tokens + n - kv_.n_slots(r->seq_id);
      return missing <= 0 || kv_.append_slots(r->seq_id, missing);
    };
    bool placed = room();
    while (!placed) {
      Request* victim = running_.back().get();  // the newest
      // A victim already scheduled this step gives its budget back.
      auto s = std::find_if(plan.scheduled.begin(), plan.scheduled.end(), [&](auto& x) { return x.request == victim; });
      if (s != plan.scheduled.end()) {
        budget += s->n_tokens;
        plan.scheduled.erase(s);
      }
      plan.preempted.push_back(victim);
      preempt(victim);
      if (victim == r) break;
      placed = room();
    }
    if (!placed) break;  // r itself was preempted: nothing newer is left running
    plan.scheduled.push_back({r, n});
    budget -= n;
    ++i;
  }

  // 2. Waiting requests, oldest first, unless this step had to preempt.
  while (plan.preempted.empty() && budget > 0 && !waiting_.empty() &&
         int64_t(running_.size()) < config_.max_num_seqs) {
    Request* r = waiting_.front().get();
    const std::vector<int32_t> tokens = r->all_tokens();
    const int64_t cached = kv_.cached_prefix_tokens(tokens);
    const int64_t n = std::min(r->n_tokens() - cached, budget);
    auto got = kv_.allocate_for(r->seq_id, tokens, cached + n);
    if (!got) break;  // the cache is full: wait for running requests to finish
    assert(*got == cached);
    r->n_computed_tokens = cached;
    if (!r->admitted_before) r->n_cached_tokens = cached;
    r->admitted_before = true;
    r->status = RequestStatus::Running;
    plan.scheduled.push_back({r, n});
    budget -= n;
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
  }
  plan.n_batched_tokens = config_.max_num_batched_tokens - budget;
  return plan;
}

void Scheduler::on_step_computed(const StepPlan& plan) {
  for (const auto& s : plan.scheduled) {
    Request* r = s.request;
    r->n_computed_tokens += s.n_tokens;
    kv_.commit_full_blocks(r->seq_id, r->all_tokens(), r->n_computed_tokens);
  }
}

std::vector<std::unique_ptr<Request>> Scheduler::take_finished() {
  for (size_t i = 0; i < running_.size();) {
    if (running_[i]->is_finished()) {
      kv_.free(running_[i]->seq_id);
      finished_.push_back(std::move(running_[i]));
      running_.erase(running_.begin() + int64_t(i));
    } else {
      ++i;
    }
  }
  return std::exchange(finished_, {});
}

bool Scheduler::abort(const std::string& request_id) {
  for (size_t i = 0; i < running_.size(); ++i)
    if (running_[i]->id == request_id && !running_[i]->is_finished()) {
      running_[i]->mark_aborted();
      kv_.free(running_[i]->seq_id);
      finished_.push_back(std::move(running_[i]));
      running_.erase(running_.begin() + int64_t(i));
      return true;
    }
  for (auto it = waiting_.begin(); it != waiting_.end(); ++it)
    if ((*it)->id == request_id) {
      (*it)->mark_aborted();
      finished_.push_back(std::move(*it));
      waiting_.erase(it);
      return true;
    }
  return false;
}

}  // namespace latentserve
