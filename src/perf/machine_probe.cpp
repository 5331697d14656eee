#include "perf/machine_probe.h"

#include <dlfcn.h>
#include <immintrin.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <limits>
#include <dnnl.hpp>
#include <vector>

#include "core/error.h"

namespace latentserve {
namespace {

constexpr size_t kHugePage = size_t(2) << 20;
constexpr size_t kReadBlockBytes = size_t(1) << 20;  // unit of work of the parallel read

volatile float g_sink;  // keeps the sums alive

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

#pragma GCC push_options
#pragma GCC target("avx512f")
// GCC 12 warns that the "undefined" vectors inside its AVX-512 intrinsics are
// uninitialised (a false positive, GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// Σ of `n` floats (n a multiple of 128), eight independent accumulators.
float sum_avx512(const float* p, size_t n) {
  __m512 acc[8];
  for (auto& a : acc) a = _mm512_setzero_ps();
  for (size_t i = 0; i < n; i += 128)
    for (int j = 0; j < 8; ++j) acc[j] = _mm512_add_ps(acc[j], _mm512_load_ps(p + i + 16 * j));
  for (int j = 1; j < 8; ++j) acc[0] = _mm512_add_ps(acc[0], acc[j]);
  return _mm512_reduce_add_ps(acc[0]);
}
#pragma GCC diagnostic pop
#pragma GCC pop_options

float sum_avx2(const float* p, size_t n) {
  __m256 acc[8];
  for (auto& a : acc) a = _mm256_setzero_ps();
  for (size_t i = 0; i < n; i += 64)
    for (int j = 0; j < 8; ++j) acc[j] = _mm256_add_ps(acc[j], _mm256_load_ps(p + i + 8 * j));
  for (int j = 1; j < 8; ++j) acc[0] = _mm256_add_ps(acc[0], acc[j]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, acc[0]);
  float s = 0;
  for (float x : lanes) s += x;
  return s;
}

// oneDNN runs on OpenMP threads (see backend/cpu/linear_gemm.cpp): size the team to the pool.
void set_openmp_threads(int n_threads) {
  using SetThreads = void (*)(int);
  static const auto set_threads = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
  if (set_threads) set_threads(n_threads);
}

}  // namespace

ReadBandwidthProbe::ReadBandwidthProbe(ThreadPool& pool, size_t bytes)
    : pool_(pool), has_avx512_(__builtin_cpu_supports("avx512f")) {
  bytes_ = std::max(kReadBlockBytes, bytes / kReadBlockBytes * kReadBlockBytes);
  data_ = static_cast<float*>(std::aligned_alloc(kHugePage, (bytes_ + kHugePage - 1) / kHugePage * kHugePage));
  if (!data_) fail("ReadBandwidthProbe: cannot allocate {} bytes", bytes_);
  madvise(data_, bytes_, MADV_HUGEPAGE);  // fewer TLB misses; a hint only
  const size_t floats_per_block = kReadBlockBytes / sizeof(float);
  // First touch by the thread that will read the block, with non-zero data.
  pool_.parallel_for(0, int64_t(bytes_ / kReadBlockBytes), [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b)
      std::fill_n(data_ + size_t(b) * floats_per_block, floats_per_block, 1.0f + float(b % 7));
  });
}

ReadBandwidthProbe::~ReadBandwidthProbe() { std::free(data_); }

double ReadBandwidthProbe::read_seconds(size_t bytes, bool wide_loads) {
  const size_t n_blocks_total = bytes_ / kReadBlockBytes;
  const size_t floats_per_block = kReadBlockBytes / sizeof(float);
  size_t remaining = std::max<size_t>(1, bytes / kReadBlockBytes);
  const bool wide = wide_loads && has_avx512_;
  const auto start = std::chrono::steady_clock::now();
  while (remaining > 0) {  // contiguous runs of blocks up to the end of the buffer
    const size_t first = next_block_ % n_blocks_total;
    const size_t count = std::min(remaining, n_blocks_total - first);
    pool_.parallel_for(int64_t(first), int64_t(first + count), [&](int64_t b0, int64_t b1) {
      const float* p = data_ + size_t(b0) * floats_per_block;
      const size_t n = size_t(b1 - b0) * floats_per_block;
      g_sink = wide ? sum_avx512(p, n) : sum_avx2(p, n);
    });
    next_block_ = first + count;
    remaining -= count;
  }
  return seconds_since(start);
}

double measure_read_bandwidth_gb_per_s(ThreadPool& pool, size_t bytes, int passes) {
  // 256-bit and 512-bit loads stream at different rates on some CPUs (on the Zen 5 this
  // was written on, 256-bit ones were often faster): passes alternate between the two.
  // The roof is the fastest pass: on a shared VM the median reads low (a Zen 5 guest's
  // median said 42 GB/s while decode steps then read their weights at 52 GB/s, "below
  // the floor"); a floor must be what the machine can do, not what it usually does.
  ReadBandwidthProbe probe(pool, bytes);
  const size_t total = std::max(kReadBlockBytes, bytes / kReadBlockBytes * kReadBlockBytes);  // one pass
  double best = std::numeric_limits<double>::infinity();
  for (int pass = 0; pass <= passes; ++pass)
    for (int wide = 0; wide <= int(probe.has_wide_loads()); ++wide) {
      const double s = probe.read_seconds(total, wide);
      if (pass > 0) best = std::min(best, s);  // pass 0 warms up
    }
  return double(total) / best / 1e9;
}

double measure_sgemm_gflop_per_s(ThreadPool& pool, int64_t m, int64_t n, int64_t k, int runs) {
  using dt = dnnl::memory::data_type;
  using dims = dnnl::memory::dims;
  set_openmp_threads(pool.n_threads());
  std::vector<float> a(size_t(m * k)), b(size_t(n * k)), c(size_t(m * n));
  for (size_t i = 0; i < a.size(); ++i) a[i] = float(i % 13) * 0.01f + 0.5f;
  for (size_t i = 0; i < b.size(); ++i) b[i] = float(i % 11) * 0.01f - 0.05f;
  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  const dnnl::memory::desc a_md({m, k}, dt::f32, dims{k, 1});
  const dnnl::memory::desc b_md({k, n}, dt::f32, dims{1, k});  // B[n, k] read as Bᵀ
  const dnnl::memory::desc c_md({m, n}, dt::f32, dims{n, 1});
  const dnnl::matmul matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_md, b_md, c_md), engine));
  dnnl::memory a_mem(a_md, engine, a.data()), b_mem(b_md, engine, b.data()), c_mem(c_md, engine, c.data());
  std::vector<double> seconds;
  for (int run = 0; run <= runs; ++run) {
    const auto start = std::chrono::steady_clock::now();
    matmul.execute(stream, {{DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, b_mem}, {DNNL_ARG_DST, c_mem}});
    stream.wait();
    if (run > 0) seconds.push_back(seconds_since(start));
  }
  return 2.0 * double(m) * double(n) * double(k) / *std::min_element(seconds.begin(), seconds.end()) / 1e9;
}

}  // namespace latentserve
