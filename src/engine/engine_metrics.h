#pragma once
// EngineMetrics: what the engine measures as it runs, and percentile summaries.
#include <cstdint>
#include <string>
#include <vector>

namespace latentserve {

struct Percentiles {
  double p50 = 0, p90 = 0, p99 = 0, mean = 0;
  int64_t count = 0;
};
Percentiles percentiles(std::vector<double> values);

// Appends to a latency sample, keeping the newest kMaxLatencySamples (a server runs for days:
// the percentiles describe the recent past instead of growing without bound).
inline constexpr size_t kMaxLatencySamples = size_t(1) << 20;
void record_sample(std::vector<double>& samples, double value);

struct EngineMetrics {
  std::vector<double> ttft_ms;        // per finished request: arrival -> first token
  std::vector<double> itl_ms;         // every gap between consecutive tokens of a request
  std::vector<double> tpot_ms;        // per finished request with >= 2 tokens: mean gap
  int64_t n_steps = 0;
  double step_seconds = 0;            // wall time inside step()
  double scheduler_seconds = 0;       // of which in Scheduler::schedule()
  double forward_seconds = 0;         // of which in the model's forward
  int64_t prompt_tokens_computed = 0; // prefill work done (recompute after preemption included)
  int64_t prompt_tokens_cached = 0;   // prompt tokens served by the prefix cache (first admissions)
  int64_t prompt_tokens_total = 0;    // prompt tokens of admitted requests
  int64_t generated_tokens = 0;
  int64_t n_preemptions = 0;
  int64_t n_finished = 0;
  int64_t n_aborted = 0;
  double max_kv_usage = 0;            // highest fraction of KV blocks in use after a step
  double last_kv_usage = 0;
  int64_t n_running = 0, n_waiting = 0;

  std::string summary(double wall_seconds) const;  // a human-readable block of figures
};

}  // namespace latentserve
