// The CPU kernels against this machine's own roofs. A benchmark: it prints a table
// (and optionally JSON) and asserts nothing.
//
//   bench_cpu_kernels [--threads N] [--runs N] [--json FILE]
//                     [--only gemv|model|pages|crossover|gemm|small]
//
// GEMV (decode) figures are cold: each call reads a different copy of the weight,
// cycled over at least 1 GiB, so the weights come from memory as they do when a
// model's layers are swept one after another, not from the last-level cache.
#include <cblas.h>
#include <fmt/format.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <dnnl.hpp>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "backend/cpu/activation.h"
#include "backend/cpu/linear.h"
#include "backend/cpu/norm.h"
#include "backend/cpu/rope.h"
#include "core/bf16.h"
#include "core/f16.h"
#include "perf/machine_probe.h"

using namespace latentserve;

namespace {

constexpr int64_t kNever = std::numeric_limits<int64_t>::max();
constexpr size_t kColdBytes = size_t(1) << 30;
// out x in of the weights (Llama-3.2-1B's projections and its lm_head)
constexpr std::pair<int64_t, int64_t> kGemvShapes[] = {{2048, 2048}, {8192, 2048}, {2048, 8192}, {128256, 2048}};
constexpr std::pair<int64_t, int64_t> kCrossoverShapes[] = {{8192, 2048}, {2048, 8192}};
constexpr std::pair<int64_t, int64_t> kGemmShapes[] = {{2048, 2048}, {8192, 2048}, {2048, 8192}};

double median_seconds(int runs, const std::function<void(int)>& fn) {
  std::vector<double> t;
  fn(-1);  // warm-up
  for (int i = 0; i < runs; ++i) {
    const auto start = std::chrono::steady_clock::now();
    fn(i);
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

std::vector<float> filled(int64_t n, uint32_t seed) {
  std::vector<float> v(static_cast<size_t>(n));
  uint32_t s = seed * 2654435761u + 1;
  for (auto& x : v) {
    s = s * 1664525u + 1013904223u;
    x = float(int32_t(s >> 8) % 2001 - 1000) * 1e-3f + 1e-4f;  // in (-1, 1), never zero
  }
  return v;
}

enum class Pages { Huge, Small };

// `copies` copies of a [rows, cols] weight of `dtype`, back to back, starting 8 bytes
// past a 2 MiB boundary (safetensors only promises 8-byte alignment), on transparent
// huge pages or on 4 KiB pages.
struct WeightCopies {
  struct Free {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  std::unique_ptr<uint8_t, Free> buffer;
  uint8_t* base = nullptr;
  int64_t rows = 0, cols = 0, copies = 0;
  DType dtype = DType::F32;

  WeightCopies(DType dt, int64_t r, int64_t c, size_t min_total_bytes, Pages pages = Pages::Huge)
      : rows(r), cols(c), dtype(dt) {
    constexpr size_t kHuge = size_t(2) << 20, kOffset = 8;
    const size_t one = bytes_per_copy();
    copies = int64_t(std::max<size_t>(1, (min_total_bytes + one - 1) / one));
    const size_t total = (one * size_t(copies) + kOffset + kHuge - 1) / kHuge * kHuge;
    buffer.reset(static_cast<uint8_t*>(std::aligned_alloc(kHuge, total)));
    madvise(buffer.get(), total, pages == Pages::Huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    base = buffer.get() + kOffset;
    const auto values = filled(r * c, uint32_t(r + c));
    for (size_t i = 0; i < values.size(); ++i) {
      if (dt == DType::F32) {
        std::memcpy(base + 4 * i, &values[i], 4);
      } else {
        const uint16_t h = dt == DType::BF16 ? bf16::from_f32(values[i]).bits : f32_to_f16_bits(values[i]);
        std::memcpy(base + 2 * i, &h, 2);
      }
    }
    for (int64_t k = 1; k < copies; ++k) std::memcpy(base + one * size_t(k), base, one);
  }
  size_t bytes_per_copy() const { return size_t(rows * cols) * dtype_size_bytes(dtype); }
  TensorView view(int64_t k) const {
    return TensorView::contiguous(base + bytes_per_copy() * size_t(k % copies), dtype, {rows, cols});
  }
};

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown";
}

std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return a + " " + b + " " + c;
}

// GEMV, batch 1
void bench_gemv(ThreadPool& pool, double bw, int runs, nlohmann::json& out) {
  fmt::print("\nGEMV, 1 token, cold weights     AVX-512            AVX2\n");
  fmt::print("  {:>14} {:>5}  {:>8} {:>6}   {:>8} {:>6}\n", "out x in", "dtype", "GB/s", "of bw", "GB/s", "of bw");
  for (auto [rows, cols] : kGemvShapes)
    for (DType dtype : {DType::BF16, DType::F16, DType::F32}) {
      WeightCopies w(dtype, rows, cols, kColdBytes);
      const auto x = filled(cols, 1);
      std::vector<float> y(static_cast<size_t>(rows));
      double gb_s[2];
      for (int isa = 0; isa < 2; ++isa) {
        const cpu::LinearOptions options{kNever, cpu::GemmLibrary::OneDnn, isa == 0};
        int64_t call = 0;
        const double s = median_seconds(std::max<int>(runs, int(std::min<int64_t>(w.copies, 64))), [&](int) {
          cpu::linear(x.data(), 1, w.view(call++), nullptr, y.data(), pool, options);
        });
        gb_s[isa] = double(w.bytes_per_copy()) / s / 1e9;
      }
      fmt::print("  {:>14} {:>5}  {:8.1f} {:5.0f}%   {:8.1f} {:5.0f}%\n", fmt::format("{}x{}", rows, cols),
                 dtype_name(dtype), gb_s[0], 100 * gb_s[0] / bw, gb_s[1], 100 * gb_s[1] / bw);
      out["gemv"].push_back({{"out", rows}, {"in", cols}, {"dtype", dtype_name(dtype)}, {"avx512_gb_s", gb_s[0]},
                             {"avx2_gb_s", gb_s[1]}});
    }
}

// Llama-3.2-1B decode: every linear of the 16 layers plus the lm_head, bf16
void bench_model_linears(ThreadPool& pool, double bw, int runs, nlohmann::json& out) {
  struct Layer { int64_t rows, cols; };
  const Layer layer[] = {{2048, 2048}, {512, 2048}, {512, 2048}, {2048, 2048},
                         {8192, 2048}, {8192, 2048}, {2048, 8192}};  // q k v o gate up down
  std::vector<WeightCopies> weights;
  for (int l = 0; l < 16; ++l)
    for (const Layer& s : layer) weights.emplace_back(DType::BF16, s.rows, s.cols, 0);
  weights.emplace_back(DType::BF16, 128256, 2048, 0);
  double total_bytes = 0;
  for (const auto& w : weights) total_bytes += double(w.bytes_per_copy());
  const auto x = filled(8192, 2);
  std::vector<float> y(128256);
  const double s = median_seconds(std::max(3, runs / 3), [&](int) {
    for (const auto& w : weights) cpu::linear(x.data(), 1, w.view(0), nullptr, y.data(), pool);
  });
  const double gb_s = total_bytes / s / 1e9;
  fmt::print("\nLlama-3.2-1B linears, 1 token, bf16 ({:.2f} GB): {:.1f} ms -> {:.1f} GB/s = {:.0f}% of bw\n",
             total_bytes / 1e9, s * 1e3, gb_s, 100 * gb_s / bw);
  out["llama32_1b_linears"] = {{"bytes", total_bytes}, {"ms", s * 1e3}, {"gb_s", gb_s}};
}

// The same GEMV on transparent huge pages and on 4 KiB pages, interleaved. Under a
// hypervisor a TLB miss walks two page tables; decode streams gigabytes per token.
void bench_pages(ThreadPool& pool, double bw, int runs, nlohmann::json& out) {
  fmt::print("\nGEMV, 1 token, bf16 8192x2048, by page size (interleaved), GB/s\n");
  WeightCopies huge(DType::BF16, 8192, 2048, kColdBytes, Pages::Huge);
  WeightCopies small(DType::BF16, 8192, 2048, kColdBytes, Pages::Small);
  const auto x = filled(2048, 11);
  std::vector<float> y(8192);
  std::vector<double> gb_s[2];
  int64_t call = 0;
  for (int round = 0; round < runs; ++round)
    for (int i = 0; i < 2; ++i) {
      const WeightCopies& w = i == 0 ? huge : small;
      const double s = median_seconds(16, [&](int) { cpu::linear(x.data(), 1, w.view(call++), nullptr, y.data(), pool); });
      gb_s[i].push_back(double(w.bytes_per_copy()) / s / 1e9);
    }
  for (auto& v : gb_s) std::sort(v.begin(), v.end());
  const double g_huge = gb_s[0][gb_s[0].size() / 2], g_small = gb_s[1][gb_s[1].size() / 2];
  fmt::print("  huge pages {:6.1f} ({:3.0f}% of bw)   4 KiB pages {:6.1f} ({:3.0f}% of bw)\n", g_huge, 100 * g_huge / bw,
             g_small, 100 * g_small / bw);
  out["pages"] = {{"huge_gb_s", g_huge}, {"small_gb_s", g_small}};
}

// GEMV/GEMM crossover
void bench_crossover(ThreadPool& pool, double bw, int runs, nlohmann::json& out) {
  fmt::print("\nGEMV vs GEMM (oneDNN) by token count, bf16 weights, ms per call\n");
  fmt::print("  {:>14} {:>7} {:>9} {:>9}\n", "out x in", "tokens", "GEMV", "GEMM");
  for (auto [rows, cols] : kCrossoverShapes) {
    WeightCopies w(DType::BF16, rows, cols, kColdBytes);
    for (int64_t n : {1, 2, 4, 8, 12, 16, 24, 32, 48}) {
      const auto x = filled(n * cols, 3);
      std::vector<float> y(static_cast<size_t>(n * rows));
      double ms[2];
      for (int path = 0; path < 2; ++path) {
        const cpu::LinearOptions options{path == 0 ? kNever : 1, cpu::GemmLibrary::OneDnn, true};
        int64_t call = 0;
        ms[path] = 1e3 * median_seconds(runs, [&](int) {
          cpu::linear(x.data(), n, w.view(call++), nullptr, y.data(), pool, options);
        });
      }
      fmt::print("  {:>14} {:>7} {:9.3f} {:9.3f}{}\n", fmt::format("{}x{}", rows, cols), n, ms[0], ms[1],
                 ms[0] < ms[1] ? "  gemv" : "  gemm");
      out["crossover"].push_back({{"out", rows}, {"in", cols}, {"tokens", n}, {"gemv_ms", ms[0]}, {"gemm_ms", ms[1]}});
    }
  }
}

// GEMM, 512 tokens
void bench_gemm(ThreadPool& pool, double bw, int runs, nlohmann::json& out) {
  fmt::print("\nGEMM, 512 tokens (M x N x K = tokens x out x in), GFLOP/s\n");
  fmt::print("  {:>16} {:>9} {:>9} {:>11} {:>11}\n", "M x N x K", "oneDNN", "OpenBLAS", "oneDNN", "OpenBLAS");
  fmt::print("  {:>16} {:>9} {:>9} {:>11} {:>11}\n", "", "f32 W", "f32 W", "bf16 W", "bf16 W");
  const int64_t m = 512;
  for (auto [n, k] : kGemmShapes) {
    const auto x = filled(m * k, 4);
    std::vector<float> y(static_cast<size_t>(m * n));
    double gflop_s[4];
    int i = 0;
    for (DType dtype : {DType::F32, DType::BF16}) {
      WeightCopies w(dtype, n, k, 0);
      for (auto library : {cpu::GemmLibrary::OneDnn, cpu::GemmLibrary::OpenBlas}) {
        const cpu::LinearOptions options{1, library, true};
        const double s = median_seconds(std::max(3, runs / 2), [&](int) {
          cpu::linear(x.data(), m, w.view(0), nullptr, y.data(), pool, options);
        });
        gflop_s[i++] = 2.0 * double(m * n * k) / s / 1e9;
      }
    }
    fmt::print("  {:>16} {:9.1f} {:9.1f} {:11.1f} {:11.1f}\n", fmt::format("{}x{}x{}", m, n, k), gflop_s[0],
               gflop_s[1], gflop_s[2], gflop_s[3]);
    out["gemm"].push_back({{"m", m}, {"n", n}, {"k", k}, {"onednn_f32", gflop_s[0]}, {"openblas_f32", gflop_s[1]},
                           {"onednn_bf16", gflop_s[2]}, {"openblas_bf16", gflop_s[3]}});
  }
  const double sgemm = measure_sgemm_gflop_per_s(pool, 512, 2048, 2048);
  fmt::print("  machine_probe sgemm 512x2048x2048: {:.1f} GFLOP/s\n", sgemm);
}

// small ops
void bench_small_ops(ThreadPool& pool, double bw, int runs, nlohmann::json& out) {
  fmt::print("\nsmall ops (bytes read + written per call)\n");
  for (int64_t rows : {1, 512}) {
    const int64_t dim = 2048;
    auto x = filled(rows * dim, 5);
    auto residual = filled(rows * dim, 6);
    const auto wv = filled(dim, 7);
    std::vector<bf16> wb(static_cast<size_t>(dim));
    for (int64_t i = 0; i < dim; ++i) wb[size_t(i)] = bf16::from_f32(wv[size_t(i)]);
    const TensorView weight = TensorView::contiguous(wb.data(), DType::BF16, {dim});
    std::vector<float> o(static_cast<size_t>(rows * dim));
    const double s = median_seconds(runs * 10, [&](int) { cpu::rms_norm(x.data(), rows, dim, weight, 1e-5, o.data(), pool); });
    const double s_add = median_seconds(runs * 10, [&](int) {
      cpu::add_rms_norm(residual.data(), x.data(), rows, dim, weight, 1e-5, o.data(), pool);
    });
    fmt::print("  rms_norm      {:4} x {}: {:8.2f} us  {:6.1f} GB/s   add_rms_norm {:8.2f} us  {:6.1f} GB/s\n", rows, dim,
               s * 1e6, 8.0 * double(rows * dim) / s / 1e9, s_add * 1e6, 16.0 * double(rows * dim) / s_add / 1e9);
  }
  for (int64_t tokens : {1, 512}) {
    const int64_t heads = 32 + 8, head_dim = 64;  // q and k heads of Llama-3.2-1B
    auto x = filled(tokens * heads * head_dim, 8);
    std::vector<int32_t> pos(static_cast<size_t>(tokens));
    for (int64_t t = 0; t < tokens; ++t) pos[size_t(t)] = int32_t(1000 + t);
    std::vector<float> inv_freq(32);
    for (int i = 0; i < 32; ++i) inv_freq[size_t(i)] = float(std::pow(500000.0, -i / 32.0));
    const cpu::RopeParams p{x.data(), heads * head_dim, tokens, heads, head_dim, head_dim, pos.data(), inv_freq.data(),
                            1.0f, cpu::RopeLayout::Neox};
    const double s = median_seconds(runs * 10, [&](int) { cpu::apply_rope(p); });
    fmt::print("  apply_rope    {:4} tokens x {} heads x {}: {:8.2f} us  {:6.1f} GB/s\n", tokens, heads, head_dim,
               s * 1e6, 8.0 * double(tokens * heads * head_dim) / s / 1e9);
  }
  for (int64_t tokens : {1, 512}) {
    const int64_t n = tokens * 8192;
    const auto gate = filled(n, 9), up = filled(n, 10);
    std::vector<float> o(static_cast<size_t>(n));
    const double s = median_seconds(runs * 10, [&](int) { cpu::silu_mul(gate.data(), up.data(), o.data(), n); });
    fmt::print("  silu_mul      {:4} x 8192: {:8.2f} us  {:6.1f} GB/s (one thread)\n", tokens, s * 1e6,
               12.0 * double(n) / s / 1e9);
  }
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 0, runs = 9;
  std::string json_path, only;  // --only gemv|model|pages|crossover|gemm|small
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--threads") threads = std::stoi(argv[i + 1]);
    else if (flag == "--runs") runs = std::stoi(argv[i + 1]);
    else if (flag == "--json") json_path = argv[i + 1];
    else if (flag == "--only") only = argv[i + 1];
    else {
      fmt::print(stderr, "unknown flag {}\n", flag);
      return 2;
    }
  }
  ThreadPool pool(threads);
  nlohmann::json out;
  const dnnl_version_t* dnnl = dnnl_version();
  fmt::print("CPU kernels: {}, {} threads, load average {}\n", cpu_model(), pool.n_threads(), load_average());
  fmt::print("  OpenBLAS {} (core {}), oneDNN {}.{}.{}; median of {} runs\n", openblas_get_config(),
             openblas_get_corename(), dnnl->major, dnnl->minor, dnnl->patch, runs);

  const double bw = measure_read_bandwidth_gb_per_s(pool);
  fmt::print("\nmemory read bandwidth (1 GiB streaming sum): {:.1f} GB/s\n", bw);
  out["read_bandwidth_gb_s"] = bw;
  const auto wanted = [&](const char* section) { return only.empty() || only == section; };
  if (wanted("gemv")) bench_gemv(pool, bw, runs, out);
  if (wanted("model")) bench_model_linears(pool, bw, runs, out);
  if (wanted("pages")) bench_pages(pool, bw, runs, out);
  if (wanted("crossover")) bench_crossover(pool, bw, runs, out);
  if (wanted("gemm")) bench_gemm(pool, bw, runs, out);
  if (wanted("small")) bench_small_ops(pool, bw, runs, out);

  if (!json_path.empty()) {
    std::ofstream(json_path) << out.dump(2) << "\n";
    fmt::print("\nwrote {}\n", json_path);
  }
  return 0;
}
