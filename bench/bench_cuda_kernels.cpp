// The CUDA building blocks of a Llama forward against the GPU's roofs. A benchmark: prints a
// table, asserts nothing.
//
//   bench_cuda_kernels [--quick] [--only gemm|sampling] [--json FILE]
//
// GEMM: TFLOP/s for the Llama-3-8B projections at m = 1, 8, 64, 512, 4096 tokens, and the
// GB/s of weight bytes (what bounds small m). Each call reads another copy of the weight,
// cycled over >= 256 MiB, so small-m figures come from HBM, not from the 50 MB L2.
// rms_norm / add_rms_norm / silu_mul / argmax / sample_rows: GB/s of the bytes each must move
// (docs/cuda-kernels.md lists them), at decode and prefill sizes. Median of many repeats,
// cudaEvent timing, after a warm-up.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "backend/cuda/activation.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_buffer.h"
#include <fstream>

#include <nlohmann/json.hpp>

#include "backend/cuda/gemm.h"
#include "backend/cuda/gemv.h"
#include "backend/cuda/norm.h"
#include "backend/cuda/sampling.h"

using namespace latentserve;
using cuda::DeviceBuffer;

namespace {

struct Row {
  std::string kernel, shape;
  double ms, rate;
  std::string unit;
  double floor_ms;  // time at the roof (HBM bandwidth for memory-bound rows, peak bf16 for GEMM)
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median ms of one call of fn(i) (i counts calls, to rotate buffers), each timed alone.
double time_ms(int repeats, const std::function<void(int)>& fn, cudaStream_t s) {
  cudaEvent_t a, b;
  LS_CUDA_CHECK(cudaEventCreate(&a));
  LS_CUDA_CHECK(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) fn(i);  // warm-up (builds GEMM plans)
  std::vector<double> t;
  for (int i = 0; i < repeats; ++i) {
    LS_CUDA_CHECK(cudaEventRecord(a, s));
    fn(i + 3);
    LS_CUDA_CHECK(cudaEventRecord(b, s));
    LS_CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    LS_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return median(t);
}

// Mean ms of one call of fn(i) over `repeats` calls issued back to back (one event pair around
// them): what a decode step sees, where each kernel's launch and ramp overlap the one before.
double time_ms_back_to_back(int repeats, const std::function<void(int)>& fn, cudaStream_t s) {
  cudaEvent_t a, b;
  LS_CUDA_CHECK(cudaEventCreate(&a));
  LS_CUDA_CHECK(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) fn(i);
  LS_CUDA_CHECK(cudaEventRecord(a, s));
  for (int i = 0; i < repeats; ++i) fn(i + 3);
  LS_CUDA_CHECK(cudaEventRecord(b, s));
  LS_CUDA_CHECK(cudaEventSynchronize(b));
  float ms = 0;
  LS_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms / float(repeats);
}

void fill(DeviceBuffer& b) { LS_CUDA_CHECK(cudaMemset(b.data(), 0x3c, b.bytes())); }  // bf16 ~0.011, f32 ~0.011

}  // namespace

int main(int argc, char** argv) {
  bool quick = false, only_gemm = false, only_sampling = false;
  std::string json_path;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) quick = true;
    else if (std::strcmp(argv[i], "--json") == 0 && i + 1 < argc) json_path = argv[++i];
    else if (std::strcmp(argv[i], "--only") == 0 && i + 1 < argc && std::strcmp(argv[i + 1], "gemm") == 0) only_gemm = true, ++i;
    else if (std::strcmp(argv[i], "--only") == 0 && i + 1 < argc && std::strcmp(argv[i + 1], "sampling") == 0) only_sampling = true, ++i;
    else {
      fmt::print(stderr, "usage: bench_cuda_kernels [--quick] [--only gemm|sampling] [--json FILE]\n");
      return 2;
    }
  }
  cudaDeviceProp prop{};
  LS_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  int mem_clock_khz = 0, bus_bits = 0;
  cudaDeviceGetAttribute(&mem_clock_khz, cudaDevAttrMemoryClockRate, 0);
  cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, 0);
  double hbm_gbs = 2.0 * mem_clock_khz * 1e3 * bus_bits / 8 / 1e9;  // DDR: two transfers a clock
  if (hbm_gbs <= 0) hbm_gbs = 4800;                                  // H200's spec when the driver says nothing
  const double bf16_tflops = 989.0;                                  // H100/H200 SXM dense bf16 peak
  fmt::print("device: {} ({} SMs, L2 {} MiB), HBM roof {:.0f} GB/s (from clock x bus), bf16 roof {:.0f} TFLOP/s\n",
             prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20, hbm_gbs, bf16_tflops);
  cudaStream_t s;
  LS_CUDA_CHECK(cudaStreamCreate(&s));
  const int repeats = quick ? 10 : 50;
  std::vector<Row> rows;

  // ---- GEMM ----
  if (!only_sampling) {
  struct Proj {
    const char* name;
    int64_t n, k;
  };
  const std::vector<Proj> projs = {{"qkv", 6144, 4096}, {"o", 4096, 4096}, {"gate_up", 28672, 4096},
                                   {"down", 4096, 14336}, {"lm_head", 128256, 4096}};
  const std::vector<int64_t> ms = quick ? std::vector<int64_t>{1, 2, 4, 8, 64}
                                         : std::vector<int64_t>{1, 2, 4, 8, 16, 32, 64, 512, 4096};
  // Three paths per shape: cuBLASLt's first heuristic, cuBLASLt autotuned over its top 8, and the
  // skinny gemv kernel (m <= 8).
  struct Path {
    std::string name;
    int gemv_rows;
    bool autotune;
    cuda::GemvConfig config;
  };
  std::vector<Path> paths = {{"lt", 0, false, cuda::GemvConfig::Rows4Unroll8}, {"lt-tuned", 0, true, cuda::GemvConfig::Rows4Unroll8}};
  for (cuda::GemvConfig c : cuda::kGemvConfigs)
    paths.push_back({std::string("gemv-") + cuda::gemv_config_name(c), cuda::kGemvMaxRows, false, c});
  for (const Path& path : paths) {
    cuda::Gemm gemm;
    gemm.set_gemv_max_rows(path.gemv_rows);
    gemm.set_autotune(path.autotune);
    gemm.set_gemv_config(path.config);
    const int64_t max_m = 4096, max_k = 14336, max_n = 128256;
    DeviceBuffer x(size_t(max_m * max_k) * 2), y(size_t(max_m) * size_t(max_n) * 4);
    fill(x);
    for (const Proj& p : projs) {
      const size_t w_bytes = size_t(p.n * p.k) * 2;
      const int copies = int(std::max<size_t>(2, (size_t(256) << 20) / w_bytes + 1));
      DeviceBuffer w(w_bytes * size_t(copies));
      fill(w);
      for (int64_t m : ms) {
        if (path.gemv_rows > 0 && m > path.gemv_rows) continue;
        const bool f32 = std::string(p.name) == "lm_head";
        const auto call = [&](int i) {  // the i-th call reads copy i % copies of the weights
          const void* wi = static_cast<const char*>(w.data()) + w_bytes * size_t(i % copies);
          gemm.bf16(x.data(), wi, y.data(), m, p.n, p.k, f32, nullptr, s);
        };
        const double t = time_ms(repeats, call, s);
        const double flops = 2.0 * double(m) * double(p.n) * double(p.k);
        const double bytes = double(w_bytes) + double(m * p.k) * 2 + double(m * p.n) * (f32 ? 4 : 2);
        const double floor = std::max(flops / (bf16_tflops * 1e12), bytes / (hbm_gbs * 1e9)) * 1e3;
        rows.push_back({fmt::format("gemm {} {}", path.name, p.name), fmt::format("m {} n {} k {}", m, p.n, p.k), t,
                        flops / (t * 1e-3) / 1e12, "TFLOP/s", floor});
        if (m <= 64)
          rows.push_back({fmt::format("gemm {} {} (weights)", path.name, p.name), fmt::format("m {}", m), t,
                          double(w_bytes) / (t * 1e-3) / 1e9, "GB/s", double(w_bytes) / (hbm_gbs * 1e9) * 1e3});
        if (m <= 8) {
          const double tb = time_ms_back_to_back(repeats, call, s);
          rows.push_back({fmt::format("gemm {} {} (weights, b2b)", path.name, p.name), fmt::format("m {}", m), tb,
                          double(w_bytes) / (tb * 1e-3) / 1e9, "GB/s", double(w_bytes) / (hbm_gbs * 1e9) * 1e3});
        }
      }
    }
  }

  }  // !only_sampling

  if (!only_gemm) {
  // ---- memory-bound kernels: buffers rotated over >= 256 MiB when a call's bytes are small ----
  auto mem_row = [&](const std::string& kernel, const std::string& shape, double bytes, double t) {
    rows.push_back({kernel, shape, t, bytes / (t * 1e-3) / 1e9, "GB/s", bytes / (hbm_gbs * 1e9) * 1e3});
  };
  const int H = 4096, I = 14336;
  for (int T : only_sampling ? std::vector<int>{} : quick ? std::vector<int>{1, 4096} : std::vector<int>{1, 32, 256, 4096}) {
    const size_t res_bytes = size_t(T) * H * 4, act_bytes = size_t(T) * H * 2;
    const int copies = int(std::max<size_t>(2, (size_t(256) << 20) / (res_bytes + act_bytes) + 1));
    DeviceBuffer res(res_bytes * size_t(copies)), delta(act_bytes * size_t(copies)), out(act_bytes * size_t(copies)),
        w(size_t(H) * 2);
    fill(res), fill(delta), fill(w);
    auto at = [&](DeviceBuffer& b, size_t stride, int i) { return static_cast<char*>(b.data()) + stride * size_t(i % copies); };
    double t = time_ms(repeats, [&](int i) {
      cuda::rms_norm(reinterpret_cast<float*>(at(res, res_bytes, i)), w.data(), at(out, act_bytes, i), T, H, 1e-5f, s);
    }, s);
    mem_row("rms_norm", fmt::format("{} x {}", T, H), double(res_bytes + act_bytes), t);  // read f32, write bf16
    t = time_ms(repeats, [&](int i) {
      cuda::add_rms_norm(reinterpret_cast<float*>(at(res, res_bytes, i)), at(delta, act_bytes, i), w.data(),
                         at(out, act_bytes, i), T, H, 1e-5f, s);
    }, s);
    mem_row("add_rms_norm", fmt::format("{} x {}", T, H), double(2 * res_bytes + 2 * act_bytes), t);  // r rw, delta, out

    const size_t gu_bytes = size_t(T) * 2 * I * 2, a_bytes = size_t(T) * I * 2;
    const int c2 = int(std::max<size_t>(2, (size_t(256) << 20) / (gu_bytes + a_bytes) + 1));
    DeviceBuffer gu(gu_bytes * size_t(c2)), act(a_bytes * size_t(c2));
    fill(gu);
    t = time_ms(repeats, [&](int i) {
      cuda::silu_mul(static_cast<char*>(gu.data()) + gu_bytes * size_t(i % c2),
                     static_cast<char*>(act.data()) + a_bytes * size_t(i % c2), T, I, s);
    }, s);
    mem_row("silu_mul", fmt::format("{} x {}", T, I), double(gu_bytes + a_bytes), t);
  }
  const int V = 128256;
  for (int B : quick ? std::vector<int>{1, 256} : std::vector<int>{1, 8, 64, 256}) {
    const size_t l_bytes = size_t(B) * V * 4;
    const int copies = int(std::max<size_t>(2, (size_t(256) << 20) / l_bytes + 1));
    DeviceBuffer logits(l_bytes * size_t(copies)), out(size_t(B) * 4);
    {  // random logits (equal ones would make every token a tie: not what a model gives)
      std::vector<float> host(size_t(B) * V);
      uint32_t state = 12345u;
      for (auto& v : host) {
        state = state * 1664525u + 1013904223u;
        v = float(state >> 8) * (8.0f / 16777216.0f) - 4.0f;
      }
      for (int c = 0; c < copies; ++c) logits.upload(host.data(), l_bytes, l_bytes * size_t(c));
    }
    double t = time_ms(repeats, [&](int i) {
      cuda::argmax_rows(reinterpret_cast<const float*>(static_cast<char*>(logits.data()) + l_bytes * size_t(i % copies)),
                        B, V, out.as<int32_t>(), s);
    }, s);
    mem_row("argmax_rows", fmt::format("{} x {}", B, V), double(l_bytes), t);
    std::vector<float> temp(size_t(B), 0.8f), top_p(size_t(B), 0.9f), min_p(size_t(B), 0.0f), u(size_t(B), 0.37f);
    DeviceBuffer dt(size_t(B) * 4), dk(size_t(B) * 4), dp(size_t(B) * 4), dm(size_t(B) * 4), du(size_t(B) * 4);
    dt.upload(temp.data(), dt.bytes()), dp.upload(top_p.data(), dp.bytes());
    dm.upload(min_p.data(), dm.bytes()), du.upload(u.data(), du.bytes());
    // top_k off, then top_k 50 (both with top_p 0.9); the launch's CTAs per row, then 1 and 4
    for (int k : {0, 50})
      for (int ctas : {0, 1, 4}) {
        const int used = cuda::sample_rows_ctas_per_row(B, V, ctas);
        if (ctas > 0 && used == cuda::sample_rows_ctas_per_row(B, V)) continue;  // the same launch
        const std::vector<int32_t> top_k(size_t(B), k);
        dk.upload(top_k.data(), dk.bytes());
        t = time_ms(quick ? 5 : 20, [&](int i) {
          cuda::SampleRowsParams sp{reinterpret_cast<const float*>(static_cast<char*>(logits.data()) + l_bytes * size_t(i % copies)),
                                    B, V, dt.as<float>(), dk.as<int32_t>(), dp.as<float>(), dm.as<float>(), du.as<float>(),
                                    out.as<int32_t>(), nullptr, 0};
          sp.ctas_per_row = ctas;
          cuda::sample_rows(sp, s);
        }, s);
        mem_row(fmt::format("sample_rows {}top_p 0.9, {} CTA/row", k ? "top_k 50 " : "", used),
                fmt::format("{} x {}", B, V), double(l_bytes), t);
      }
  }

  }  // !only_gemm

  // ---- the table ----
  fmt::print("\n{:<28} {:<24} {:>10} {:>12} {:<8} {:>10} {:>7}\n", "kernel", "shape", "time ms", "rate", "unit",
             "floor ms", "of roof");
  for (const Row& r : rows)
    fmt::print("{:<28} {:<24} {:>10.4f} {:>12.1f} {:<8} {:>10.4f} {:>6.0f}%\n", r.kernel, r.shape, r.ms, r.rate, r.unit,
               r.floor_ms, 100.0 * r.floor_ms / r.ms);
  if (!json_path.empty()) {
    nlohmann::json out = nlohmann::json::array();
    for (const Row& r : rows)
      out.push_back({{"kernel", r.kernel}, {"shape", r.shape}, {"ms", r.ms}, {"rate", r.rate}, {"unit", r.unit},
                     {"floor_ms", r.floor_ms}});
    std::ofstream(json_path) << nlohmann::json{{"device", prop.name}, {"rows", out}}.dump(2) << "\n";
  }
  cudaStreamDestroy(s);
  return 0;
}
