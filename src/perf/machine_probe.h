#pragma once
// Measures this machine's roofs, so benchmarks can print a step's speed as a fraction
// of what the hardware did in the same run: the memory read bandwidth that bounds
// decode (streaming the weights) and the f32 GEMM rate that bounds prefill.
// These run for a second or so each; benchmarks call them, the engine does not.
#include <cstddef>
#include <cstdint>

#include "core/thread_pool.h"

namespace latentserve {

// A buffer far larger than the caches (on transparent huge pages, filled with non-zero
// data) for repeated timed streaming reads. On a shared machine the roof moves from
// second to second, so a benchmark can interleave these reads with the kernel it
// measures and compare the two under the same conditions.
class ReadBandwidthProbe {
 public:
  explicit ReadBandwidthProbe(ThreadPool& pool, size_t bytes = size_t(1) << 30);
  ~ReadBandwidthProbe();
  ReadBandwidthProbe(const ReadBandwidthProbe&) = delete;
  ReadBandwidthProbe& operator=(const ReadBandwidthProbe&) = delete;

  // Seconds for the pool to sum the next `bytes` of the buffer (wrapping around), with
  // 512-bit loads (when the CPU has them) or 256-bit loads.
  double read_seconds(size_t bytes, bool wide_loads);
  bool has_wide_loads() const { return has_avx512_; }

 private:
  ThreadPool& pool_;
  float* data_ = nullptr;
  size_t bytes_ = 0;
  size_t next_block_ = 0;
  bool has_avx512_ = false;
};

// GB/s (1e9 bytes) of a threaded, vectorised streaming read (a sum) over a `bytes`
// buffer far larger than the caches (on transparent huge pages), filled with non-zero
// data first; the fastest of `passes` timed passes after one warm-up pass, with 256-bit
// and with 512-bit loads where the CPU has them.
double measure_read_bandwidth_gb_per_s(ThreadPool& pool, size_t bytes = size_t(1) << 30, int passes = 12);

// GFLOP/s (1e9 FLOP, 2·m·n·k per product) of the f32 matmul that linear()'s prefill
// path uses by default (oneDNN), on the pool's thread count: C[m, n] = A[m, k] · B[n, k]ᵀ,
// the fastest of `runs` after one warm-up: a peak, as a roof must be. On a shared 2-vCPU guest
// (the AMD EPYC kind) stretches of ~100 ms ran the same product at half speed (11.3 vs 21-22 ms
// at 256 x 2048 x 2048; the other tenant, or both vCPUs on one core), and a median of 5 then
// reported 102 instead of ~190 GFLOP/s, which some decode steps beat.
double measure_sgemm_gflop_per_s(ThreadPool& pool, int64_t m, int64_t n, int64_t k, int runs = 12);

}  // namespace latentserve
