// The CPU kernels against this machine's own roofs. A benchmark: it prints a table
// (and optionally JSON) and asserts nothing.
//
//   bench_cpu_kernels [--threads N] [--runs N] [--json FILE]
//                     [--only gemv|model|pages|crossover|gemm|small|attention]
//
// The machine this was written on is shared (2 vCPUs, other tenants): its memory
// bandwidth moved between ~10 and ~50 GB/s from one second to the next. So every rate
// is measured in interleaved rounds, each round timing every variant of a row once
// (and a streaming read of the same bytes, for the GEMV rows), and the table shows
// per-variant medians: variants on one row saw the same machine.
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
#include <dnnl.hpp>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "backend/cpu/activation.h"
#include "backend/cpu/cpu_kv_cache.h"
#include "backend/cpu/paged_attention.h"
#include "backend/cpu/paged_attention_amx.h"
#include "backend/cpu/linear.h"
#include "backend/cpu/norm.h"
#include "backend/cpu/rope.h"
#include "core/bf16.h"
#include "core/f16.h"
#include "perf/machine_probe.h"
#include "bench_args.h"

using namespace latentserve;

namespace {

constexpr int64_t kNever = std::numeric_limits<int64_t>::max();
constexpr size_t kColdBytes = size_t(1) << 30;
constexpr size_t kSampleBytes = size_t(64) << 20;  // bytes streamed per GEMV timing sample
// out x in of the weights (Llama-3.2-1B's projections and its lm_head)
constexpr std::pair<int64_t, int64_t> kGemvShapes[] = {{2048, 2048}, {8192, 2048}, {2048, 8192}, {128256, 2048}};
constexpr std::pair<int64_t, int64_t> kCrossoverShapes[] = {{8192, 2048}, {2048, 8192}};
constexpr std::pair<int64_t, int64_t> kGemmShapes[] = {{2048, 2048}, {8192, 2048}, {2048, 8192}};

double seconds_of(const std::function<void()>& fn) {
  const auto start = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median time of `runs` calls of fn (after one warm-up call): for the small ops, whose
// calls are short enough that a round of them sees one machine state.
double median_seconds(int runs, const std::function<void()>& fn) {
  fn();
  std::vector<double> t;
  for (int i = 0; i < runs; ++i) t.push_back(seconds_of(fn));
  return median(t);
}

// Calls every sampler once per round (after one warm-up round) and returns the median
// of each sampler's values.
std::vector<double> interleaved_medians(int rounds, const std::vector<std::function<double()>>& samplers) {
  std::vector<std::vector<double>> values(samplers.size());
  for (int round = 0; round <= rounds; ++round)
    for (size_t i = 0; i < samplers.size(); ++i) {
      const double v = samplers[i]();
      if (round > 0) values[i].push_back(v);
    }
  std::vector<double> medians;
  for (auto& v : values) medians.push_back(median(v));
  return medians;
}

// GB/s of the machine's streaming read over `bytes`: the better of 256- and 512-bit loads.
double read_rate(ReadBandwidthProbe& probe, size_t bytes) {
  double s = probe.read_seconds(bytes, false);
  if (probe.has_wide_loads()) s = std::min(s, probe.read_seconds(bytes, true));
  return double(bytes) / s / 1e9;
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

// GEMV, batch 1, against a streaming read of the same bytes
void bench_gemv(ThreadPool& pool, ReadBandwidthProbe& probe, int runs, nlohmann::json& out) {
  fmt::print("\nGEMV, 1 token, cold weights on huge pages; read = streaming read in the same rounds\n");
  fmt::print("  {:>14} {:>5}  {:>6}  {:>14}  {:>14}\n", "out x in", "dtype", "read", "AVX-512", "AVX2");
  for (auto [rows, cols] : kGemvShapes)
    for (DType dtype : {DType::BF16, DType::F16, DType::F32}) {
      WeightCopies w(dtype, rows, cols, kColdBytes);
      const auto x = filled(cols, 1);
      std::vector<float> y(static_cast<size_t>(rows));
      const int64_t calls = std::max<int64_t>(1, int64_t(kSampleBytes / w.bytes_per_copy()));
      const size_t sample_bytes = size_t(calls) * w.bytes_per_copy();
      int64_t call = 0;
      auto gemv_rate = [&](bool avx512) {
        const cpu::LinearOptions options{kNever, cpu::GemmLibrary::OneDnn, avx512};
        return double(sample_bytes) / seconds_of([&] {
                 for (int64_t c = 0; c < calls; ++c)
                   cpu::linear(x.data(), 1, w.view(call++), nullptr, y.data(), pool, options);
               }) / 1e9;
      };
      const auto m = interleaved_medians(runs, {[&] { return read_rate(probe, sample_bytes); },
                                                [&] { return gemv_rate(true); }, [&] { return gemv_rate(false); }});
      fmt::print("  {:>14} {:>5}  {:6.1f}  {:6.1f} ({:3.0f}%)  {:6.1f} ({:3.0f}%)\n", fmt::format("{}x{}", rows, cols),
                 dtype_name(dtype), m[0], m[1], 100 * m[1] / m[0], m[2], 100 * m[2] / m[0]);
      out["gemv"].push_back({{"out", rows}, {"in", cols}, {"dtype", dtype_name(dtype)}, {"read_gb_s", m[0]},
                             {"avx512_gb_s", m[1]}, {"avx2_gb_s", m[2]}});
    }
}

// Llama-3.2-1B decode: every linear of the 16 layers plus the lm_head, bf16
void bench_model_linears(ThreadPool& pool, ReadBandwidthProbe& probe, int runs, nlohmann::json& out) {
  struct Shape {
    int64_t rows, cols;
  };
  const Shape layer[] = {{2048, 2048}, {512, 2048}, {512, 2048}, {2048, 2048},
                         {8192, 2048}, {8192, 2048}, {2048, 8192}};  // q k v o gate up down
  std::vector<WeightCopies> weights;
  for (int l = 0; l < 16; ++l)
    for (const Shape& s : layer) weights.emplace_back(DType::BF16, s.rows, s.cols, 0);
  weights.emplace_back(DType::BF16, 128256, 2048, 0);  // lm_head (tied to the embedding)
  size_t total_bytes = 0;
  for (const auto& w : weights) total_bytes += w.bytes_per_copy();
  const auto x = filled(8192, 2);
  std::vector<float> y(128256);
  auto sweep = [&](bool avx512) {
    const cpu::LinearOptions options{kNever, cpu::GemmLibrary::OneDnn, avx512};
    return seconds_of([&] {
      for (const auto& w : weights) cpu::linear(x.data(), 1, w.view(0), nullptr, y.data(), pool, options);
    });
  };
  const auto m = interleaved_medians(std::max(3, runs / 2), {[&] { return read_rate(probe, total_bytes); },
                                                            [&] { return sweep(true); }, [&] { return sweep(false); }});
  fmt::print("\nLlama-3.2-1B linears at 1 token, bf16 on huge pages ({:.2f} GB), read {:.1f} GB/s in the same rounds\n",
             double(total_bytes) / 1e9, m[0]);
  for (int i = 1; i <= 2; ++i) {
    const double gb_s = double(total_bytes) / m[size_t(i)] / 1e9;
    fmt::print("  {:7}: {:6.1f} ms per token -> {:5.1f} GB/s = {:3.0f}% of the read\n", i == 1 ? "AVX-512" : "AVX2",
               m[size_t(i)] * 1e3, gb_s, 100 * gb_s / m[0]);
  }
  out["llama32_1b_linears"] = {{"bytes", total_bytes}, {"read_gb_s", m[0]}, {"avx512_ms", m[1] * 1e3},
                               {"avx2_ms", m[2] * 1e3}};
}

// The same GEMV on transparent huge pages and on 4 KiB pages. Under a hypervisor a TLB
// miss walks two page tables, and decode streams gigabytes per token.
void bench_pages(ThreadPool& pool, ReadBandwidthProbe& probe, int runs, nlohmann::json& out) {
  WeightCopies huge(DType::BF16, 8192, 2048, kColdBytes, Pages::Huge);
  WeightCopies small(DType::BF16, 8192, 2048, kColdBytes, Pages::Small);
  const auto x = filled(2048, 11);
  std::vector<float> y(8192);
  const int64_t calls = int64_t(kSampleBytes / huge.bytes_per_copy());
  const size_t sample_bytes = size_t(calls) * huge.bytes_per_copy();
  int64_t call = 0;
  auto rate = [&](const WeightCopies& w) {
    return double(sample_bytes) / seconds_of([&] {
             for (int64_t c = 0; c < calls; ++c) cpu::linear(x.data(), 1, w.view(call++), nullptr, y.data(), pool);
           }) / 1e9;
  };
  const auto m = interleaved_medians(runs * 2, {[&] { return read_rate(probe, sample_bytes); },
                                                [&] { return rate(huge); }, [&] { return rate(small); }});
  fmt::print("\nGEMV, 1 token, bf16 8192x2048 by page size: read {:.1f}, huge pages {:.1f} ({:.0f}%), "
             "4 KiB pages {:.1f} ({:.0f}%) GB/s\n",
             m[0], m[1], 100 * m[1] / m[0], m[2], 100 * m[2] / m[0]);
  out["pages"] = {{"read_gb_s", m[0]}, {"huge_gb_s", m[1]}, {"small_gb_s", m[2]}};
}

// GEMV/GEMM crossover
void bench_crossover(ThreadPool& pool, int runs, nlohmann::json& out) {
  fmt::print("\nGEMV vs GEMM (oneDNN) by token count, bf16 weights, ms per call (threshold now {})\n",
             cpu::linear_gemm_threshold_tokens());
  fmt::print("  {:>14} {:>7} {:>9} {:>9}\n", "out x in", "tokens", "GEMV", "GEMM");
  for (auto [rows, cols] : kCrossoverShapes) {
    WeightCopies w(DType::BF16, rows, cols, kColdBytes);
    for (int64_t n : {1, 2, 4, 8, 12, 16, 24, 32, 48, 64}) {
      const auto x = filled(n * cols, 3);
      std::vector<float> y(static_cast<size_t>(n * rows));
      int64_t call = 0;
      auto ms = [&](int64_t threshold) {
        const cpu::LinearOptions options{threshold, cpu::GemmLibrary::OneDnn, true};
        return 1e3 * seconds_of([&] { cpu::linear(x.data(), n, w.view(call++), nullptr, y.data(), pool, options); });
      };
      const auto m = interleaved_medians(runs, {[&] { return ms(kNever); }, [&] { return ms(1); }});
      fmt::print("  {:>14} {:>7} {:9.3f} {:9.3f}  {}\n", fmt::format("{}x{}", rows, cols), n, m[0], m[1],
                 m[0] < m[1] ? "gemv" : "gemm");
      out["crossover"].push_back({{"out", rows}, {"in", cols}, {"tokens", n}, {"gemv_ms", m[0]}, {"gemm_ms", m[1]}});
    }
  }
}

// GEMM, 512 tokens, both libraries, f32 and bf16 weights
void bench_gemm(ThreadPool& pool, int runs, nlohmann::json& out) {
  fmt::print("\nGEMM, 512 tokens (M x N x K = tokens x out x in), GFLOP/s\n");
  fmt::print("  {:>16} {:>9} {:>9} {:>11} {:>11}\n", "M x N x K", "oneDNN", "OpenBLAS", "oneDNN", "OpenBLAS");
  fmt::print("  {:>16} {:>9} {:>9} {:>11} {:>11}\n", "", "f32 W", "f32 W", "bf16 W", "bf16 W");
  const int64_t m = 512;
  for (auto [n, k] : kGemmShapes) {
    const auto x = filled(m * k, 4);
    std::vector<float> y(static_cast<size_t>(m * n));
    const WeightCopies w32(DType::F32, n, k, 0), w16(DType::BF16, n, k, 0);
    std::vector<std::function<double()>> samplers;
    for (const WeightCopies* w : {&w32, &w16})
      for (auto library : {cpu::GemmLibrary::OneDnn, cpu::GemmLibrary::OpenBlas})
        samplers.push_back([&, w, library] {
          const cpu::LinearOptions options{1, library, true};
          return 2.0 * double(m * n * k) /
                 seconds_of([&] { cpu::linear(x.data(), m, w->view(0), nullptr, y.data(), pool, options); }) / 1e9;
        });
    const auto g = interleaved_medians(std::max(3, runs / 2), samplers);
    fmt::print("  {:>16} {:9.1f} {:9.1f} {:11.1f} {:11.1f}\n", fmt::format("{}x{}x{}", m, n, k), g[0], g[1], g[2],
               g[3]);
    out["gemm"].push_back({{"m", m}, {"n", n}, {"k", k}, {"onednn_f32", g[0]}, {"openblas_f32", g[1]},
                           {"onednn_bf16", g[2]}, {"openblas_bf16", g[3]}});
  }
  fmt::print("  machine_probe sgemm 512x2048x2048 (oneDNN): {:.1f} GFLOP/s\n",
             measure_sgemm_gflop_per_s(pool, 512, 2048, 2048));
}

// small ops
void bench_small_ops(ThreadPool& pool, int runs, nlohmann::json& out) {
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
    const double s = median_seconds(runs * 10, [&] { cpu::rms_norm(x.data(), rows, dim, weight, 1e-5, o.data(), pool); });
    const double s_add = median_seconds(runs * 10, [&] {
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
    const double s = median_seconds(runs * 10, [&] { cpu::apply_rope(p); });
    fmt::print("  apply_rope    {:4} tokens x {} heads x {}: {:8.2f} us  {:6.1f} GB/s\n", tokens, heads, head_dim,
               s * 1e6, 8.0 * double(tokens * heads * head_dim) / s / 1e9);
  }
  for (int64_t tokens : {1, 512}) {
    const int64_t n = tokens * 8192;
    const auto gate = filled(n, 9), up = filled(n, 10);
    std::vector<float> o(static_cast<size_t>(n));
    const double s = median_seconds(runs * 10, [&] { cpu::silu_mul(gate.data(), up.data(), o.data(), n); });
    fmt::print("  silu_mul      {:4} x 8192: {:8.2f} us  {:6.1f} GB/s (one thread)\n", tokens, s * 1e6,
               12.0 * double(n) / s / 1e9);
  }
}

// Decode attention alone, as a step sweeps it: 8 layers' caches (each its own memory, block
// tables shuffled), 8 sequences x 8K context, one query token each, 16 query heads: MLA's
// absorbed shape (one 576-wide latent row, the value its first 512) and MQA (head_dim 64). Per
// variant the seconds of one sweep over the 8 layers, interleaved rounds; the KV GB/s count
// the bytes the cache holds, the GFLOP/s 2 (dk + dv) per head and key.
void bench_attention(ThreadPool& pool, int runs, nlohmann::json& out) {
  constexpr int64_t kLayers = 8, kSeqs = 8, kContext = 8192, kBlock = 16, kHeads = 16;
  fmt::print("\ndecode attention, {} layers x {} seqs x {} context, {} heads, blocks of {} (AMX-BF16 here: {})\n", kLayers,
             kSeqs, kContext, kHeads, kBlock, cpu::amx::available() ? "yes" : "no");
  fmt::print("  {:<5} {:<18} {:>10} {:>10} {:>10} {:>10}\n", "shape", "cache / kernel", "ms", "KV MB", "KV GB/s",
             "GFLOP/s");
  const int64_t n_blocks = kSeqs * kContext / kBlock;
  std::vector<int32_t> tables(static_cast<size_t>(n_blocks)), query_start, lens;
  std::iota(tables.begin(), tables.end(), 0);
  std::mt19937 rng(7);
  std::shuffle(tables.begin(), tables.end(), rng);
  for (int64_t s = 0; s <= kSeqs; ++s) query_start.push_back(int32_t(s));
  for (int64_t s = 0; s < kSeqs; ++s) lens.push_back(int32_t(kContext));
  std::vector<int64_t> slots(static_cast<size_t>(n_blocks * kBlock));
  std::iota(slots.begin(), slots.end(), 0);
  for (const bool mla : {true, false}) {
    const int64_t dk = mla ? 576 : 64, dv = mla ? 512 : 64;
    const AttentionSpec spec =
        mla ? AttentionSpec::latent(kHeads, 512, 128, 64, 128) : AttentionSpec::standard(kHeads, 1, dk, dv);
    const std::vector<float> rows = filled(int64_t(slots.size()) * dk, mla ? 11 : 12);
    const std::vector<float> v_rows = filled(int64_t(slots.size()) * dv, 13);
    const std::vector<float> q = filled(kSeqs * kHeads * dk, 14);
    std::vector<float> o(static_cast<size_t>(kSeqs * kHeads * dv));
    struct Variant {
      const char* name;
      DType dtype;
      bool amx;
    };
    std::vector<Variant> variants = {{"f32", DType::F32, false}, {"bf16", DType::BF16, false}};
    if (cpu::amx::available()) variants.push_back({"bf16, AMX", DType::BF16, true});
    std::vector<std::unique_ptr<cpu::CpuKvCache>> caches;  // one per dtype
    for (DType d : {DType::F32, DType::BF16}) {
      caches.push_back(std::make_unique<cpu::CpuKvCache>(spec, kLayers, n_blocks, kBlock, cpu::KvCacheOptions{d}));
      for (int64_t l = 0; l < kLayers; ++l)
        caches.back()->write(l, rows.data(), dk, mla ? nullptr : v_rows.data(), dv, slots.data(), int64_t(slots.size()));
    }
    std::vector<std::function<double()>> samplers;
    for (const Variant& v : variants) {
      const cpu::CpuKvCache& cache = *caches[v.dtype == DType::F32 ? 0 : 1];
      samplers.push_back([&, v] {
        return seconds_of([&] {
          for (int64_t l = 0; l < kLayers; ++l) {
            cpu::PagedAttentionParams p{};
            p.q = q.data();
            p.q_token_stride = kHeads * dk;
            p.k_cache = cache.k_rows(l);
            p.v_cache = mla ? cache.k_rows(l) : cache.v_rows(l);
            p.out = o.data();
            p.query_start_loc = query_start.data();
            p.seq_lens = lens.data();
            p.block_tables = tables.data();
            p.n_seqs = kSeqs;
            p.max_blocks_per_seq = kContext / kBlock;
            p.block_size = kBlock;
            p.n_head = kHeads;
            p.n_head_kv = 1;
            p.head_dim_qk = dk;
            p.head_dim_v = dv;
            p.softmax_scale = float(1.0 / std::sqrt(double(dk)));
            p.allow_amx = v.amx;
            cpu::paged_attention(p, pool);
          }
        });
      });
    }
    const std::vector<double> t = interleaved_medians(runs, samplers);
    const double flops = 2.0 * double(kLayers * kSeqs * kContext * kHeads * (dk + dv));
    for (size_t i = 0; i < variants.size(); ++i) {
      const double bytes = double(kLayers * kSeqs * kContext) * double(caches[variants[i].dtype == DType::F32 ? 0 : 1]->bytes_per_token()) / double(kLayers);
      fmt::print("  {:<5} {:<18} {:>10.2f} {:>10.1f} {:>10.2f} {:>10.1f}\n", mla ? "mla" : "mqa", variants[i].name,
                 t[i] * 1e3, bytes / 1e6, bytes / t[i] / 1e9, flops / t[i] / 1e9);
      out["attention"].push_back({{"shape", mla ? "mla" : "mqa"}, {"variant", variants[i].name}, {"ms", t[i] * 1e3},
                                  {"kv_bytes", bytes}, {"gflop_s", flops / t[i] / 1e9}});
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 0, runs = 9;
  std::string json_path, only;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--threads") threads = int(bench::int_arg(flag, argv[i + 1]));
    else if (flag == "--runs") runs = int(bench::int_arg(flag, argv[i + 1], 1));
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
  fmt::print("  OpenBLAS {} (core {}), oneDNN {}.{}.{}; medians of {} interleaved rounds\n", openblas_get_config(),
             openblas_get_corename(), dnnl->major, dnnl->minor, dnnl->patch, runs);

  const double bw = measure_read_bandwidth_gb_per_s(pool);
  fmt::print("\nmemory read bandwidth (machine_probe, 1 GiB streaming sum): {:.1f} GB/s\n", bw);
  out["read_bandwidth_gb_s"] = bw;
  ReadBandwidthProbe probe(pool);
  const auto wanted = [&](const char* section) { return only.empty() || only == section; };
  if (wanted("gemv")) bench_gemv(pool, probe, runs, out);
  if (wanted("model")) bench_model_linears(pool, probe, runs, out);
  if (wanted("pages")) bench_pages(pool, probe, runs, out);
  if (wanted("crossover")) bench_crossover(pool, runs, out);
  if (wanted("gemm")) bench_gemm(pool, runs, out);
  if (wanted("small")) bench_small_ops(pool, runs, out);
  if (wanted("attention")) bench_attention(pool, runs, out);
  fmt::print("\nload average at the end {}\n", load_average());

  if (!json_path.empty()) {
    std::ofstream(json_path) << out.dump(2) << "\n";
    fmt::print("wrote {}\n", json_path);
  }
  return 0;
}
