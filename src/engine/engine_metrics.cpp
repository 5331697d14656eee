#include "engine/engine_metrics.h"

#include <algorithm>
#include <numeric>

#include <fmt/format.h>

namespace latentserve {

void record_sample(std::vector<double>& samples, double value) {
  if (samples.size() >= kMaxLatencySamples) samples.erase(samples.begin(), samples.begin() + std::ptrdiff_t(kMaxLatencySamples / 2));
  samples.push_back(value);
}

Percentiles percentiles(std::vector<double> v) {
  Percentiles p;
  p.count = int64_t(v.size());
  if (v.empty()) return p;
  std::sort(v.begin(), v.end());
  auto at = [&](double q) { return v[size_t(std::min<double>(double(v.size() - 1), q * double(v.size() - 1) + 0.5))]; };
  p.p50 = at(0.50);
  p.p90 = at(0.90);
  p.p99 = at(0.99);
  p.mean = std::accumulate(v.begin(), v.end(), 0.0) / double(v.size());
  return p;
}

std::string EngineMetrics::summary(double wall_seconds) const {
  auto line = [](const char* name, const Percentiles& p) {
    return fmt::format("  {:<6} ms   mean {:8.2f}  p50 {:8.2f}  p90 {:8.2f}  p99 {:8.2f}  (n={})\n", name, p.mean, p.p50,
                       p.p90, p.p99, p.count);
  };
  std::string s;
  s += fmt::format("requests: {} finished, {} aborted; {} steps in {:.2f} s\n", n_finished, n_aborted, n_steps,
                   wall_seconds);
  s += line("TTFT", percentiles(ttft_ms));
  s += line("TPOT", percentiles(tpot_ms));
  s += line("ITL", percentiles(itl_ms));
  s += fmt::format("  prompt throughput     {:10.1f} tok/s ({} computed)\n",
                   wall_seconds > 0 ? double(prompt_tokens_computed) / wall_seconds : 0.0, prompt_tokens_computed);
  s += fmt::format("  generation throughput {:10.1f} tok/s ({} generated)\n",
                   wall_seconds > 0 ? double(generated_tokens) / wall_seconds : 0.0, generated_tokens);
  s += fmt::format("  prefix cache: {} of {} prompt tokens cached ({:.1f}%)\n", prompt_tokens_cached,
                   prompt_tokens_total, prompt_tokens_total ? 100.0 * double(prompt_tokens_cached) / double(prompt_tokens_total) : 0.0);
  s += fmt::format("  KV usage: max {:.1f}%  last {:.1f}%   preemptions: {}   running {} waiting {}\n",
                   100 * max_kv_usage, 100 * last_kv_usage, n_preemptions, n_running, n_waiting);
  s += fmt::format("  scheduler time {:.3f} ms/step = {:.2f}% of the step\n",
                   n_steps ? 1e3 * scheduler_seconds / double(n_steps) : 0.0,
                   step_seconds > 0 ? 100 * scheduler_seconds / step_seconds : 0.0);
  return s;
}

}  // namespace latentserve
