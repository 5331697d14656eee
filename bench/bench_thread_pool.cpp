// The fixed cost of ThreadPool::parallel_for: an empty call (every chunk does nothing), a call
// whose chunks each spin for a few microseconds (a tiny kernel), and back-to-back calls with a
// gap of serial work between them (what a decode step does between its ~70 kernels). Also the
// CPU time the process spends per call (user + system), so spinning that burns the core shows.
// A benchmark: prints a table, asserts nothing.
//
//   bench_thread_pool [--threads N] [--calls N]
#include <fmt/format.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "bench_args.h"

using namespace latentserve;

namespace {

using Clock = std::chrono::steady_clock;

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  auto s = [](const timeval& t) { return double(t.tv_sec) + double(t.tv_usec) * 1e-6; };
  return s(u.ru_utime) + s(u.ru_stime);
}

double sys_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_stime.tv_sec) + double(u.ru_stime.tv_usec) * 1e-6;
}

// Busy work of about `us` microseconds on this thread.
void busy_us(double us) {
  if (us <= 0) return;
  const auto until = Clock::now() + std::chrono::duration<double, std::micro>(us);
  while (Clock::now() < until) {
  }
}

struct Row {
  std::string name;
  double wall_us_per_call, cpu_us_per_call, sys_us_per_call;
};

// `calls` parallel_for calls over 2 * n_threads items, each chunk busy for `chunk_us`, with
// `gap_us` of serial work on the caller between calls. Reports the median of 5 rounds.
Row time_calls(ThreadPool& pool, const std::string& name, int calls, double chunk_us, double gap_us) {
  std::vector<Row> rounds;
  for (int round = 0; round < 5; ++round) {
    const double cpu0 = cpu_seconds(), sys0 = sys_seconds();
    const auto t0 = Clock::now();
    for (int i = 0; i < calls; ++i) {
      pool.parallel_for(0, 2 * pool.n_threads(), [&](int64_t, int64_t) { busy_us(chunk_us); });
      busy_us(gap_us);
    }
    const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
    rounds.push_back({name, wall / calls * 1e6, (cpu_seconds() - cpu0) / calls * 1e6,
                      (sys_seconds() - sys0) / calls * 1e6});
  }
  std::sort(rounds.begin(), rounds.end(),
            [](const Row& a, const Row& b) { return a.wall_us_per_call < b.wall_us_per_call; });
  return rounds[rounds.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int n_threads = 0, calls = 20000;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--threads" && i + 1 < argc)
      n_threads = int(bench::int_arg("--threads", argv[++i]));
    else if (a == "--calls" && i + 1 < argc)
      calls = int(bench::int_arg("--calls", argv[++i], 1));
    else {
      fmt::print(stderr, "usage: bench_thread_pool [--threads N] [--calls N]\n");
      return 2;
    }
  }
  ThreadPool pool(n_threads);
  fmt::print("ThreadPool with {} threads, {} calls per round, median of 5 rounds\n", pool.n_threads(), calls);
  fmt::print("{:<40} {:>12} {:>12} {:>12}\n", "case", "wall us/call", "cpu us/call", "sys us/call");
  const struct {
    const char* name;
    double chunk_us, gap_us;
  } cases[] = {
      {"empty, back to back", 0, 0},
      {"chunks of 5 us, back to back", 5, 0},
      {"chunks of 20 us, back to back", 20, 0},
      {"empty, 10 us serial gap", 0, 10},
      {"empty, 50 us serial gap", 0, 50},
      {"empty, 200 us serial gap", 0, 200},
  };
  for (const auto& c : cases) {
    const int n = c.gap_us + c.chunk_us > 40 ? calls / 10 : calls;
    const Row r = time_calls(pool, c.name, n, c.chunk_us, c.gap_us);
    fmt::print("{:<40} {:>12.2f} {:>12.2f} {:>12.2f}\n", r.name, r.wall_us_per_call, r.cpu_us_per_call,
               r.sys_us_per_call);
  }
  return 0;
}
