// Causal bf16 prefill attention on the GPU (backend/cuda/paged_prefill_attention.h): head_dim
// 128, 32 query heads, MHA (32 KV heads) and GQA-8 (8 KV heads), 16K query tokens per launch as
// 16 x 1K, 8 x 2K, 4 x 4K, 2 x 8K, 1 x 16K sequences (whole-prompt prefill: seq_len = q_len),
// paged with block_size 16 through a random permutation of the block pool, random data.
// Prints a table (median of >= 20 launches, each timed by its own CUDA events) and writes JSON.
// tools/sdpa_prefill_peer.py runs the same shapes through PyTorch SDPA (cuDNN, flash).
//
// FLOPs (docs/cuda-prefill-attention.md, the same formula in the peer):
//   4 * n_head * head_dim * sum over sequences of L * (L + 1) / 2
// i.e. 2 FLOPs per multiply-add for Q K^T and for P V, over the (query, key) pairs the causal
// mask leaves (L(L+1)/2 per sequence of L). Every query reaches the whole prefix, so the
// rest of the batch layout does not change the count.
//
// Every kernel variant (cuda::PrefillKernelVariant, docs/cuda-prefill-attention.md "Variants")
// runs on every shape; the final table has one row per (variant, shape), with the largest
// |difference| from the first variant's output on the same inputs (a sanity check, not a test).
// First line: the mma.sync m16n8k16 bf16 ceiling measured by a register-only MMA kernel.
//
// A benchmark: asserts nothing beyond "the output has no NaN" (exit status 1 otherwise).
//
//   bench_cuda_prefill_attention [--quick] [--fp8] [--reps N] [--json FILE] [--all-variants | --variant NAME[,NAME...]]
//   (default: all variants; --variant may repeat; --fp8: an e4m3 cache with per-tensor scales)
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_device.h"
#include "backend/cuda/device_buffer.h"
#include "backend/cuda/paged_prefill_attention.h"
#include "core/fp8.h"
#include "bench_args.h"

using namespace latentserve;

namespace {

constexpr int kTokens = 16384, kHeads = 32, kHeadDim = 128, kBlockSize = 16;
// H100/H200 SXM dense bf16 tensor-core peak (the floor is the time at that rate).
constexpr double kPeakTflops = 989.0;

// Random bf16 bits of values in [-1, 1): a cheap LCG (hundreds of millions of values).
std::vector<uint16_t> random_bf16(size_t n, uint64_t seed) {
  std::vector<uint16_t> out(n);
  uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
  for (size_t i = 0; i < n; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    const float x = float(int32_t(s >> 32)) * 0x1.0p-31f;
    uint32_t u;
    std::memcpy(&u, &x, 4);
    out[i] = uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  }
  return out;
}

struct Row {
  std::string variant, kind;
  int context, batch, n_head_kv;
  double time_ms, tflops, floor_ms, max_diff;
};

float bf16_bits_to_f32(uint16_t b) {
  const uint32_t u = uint32_t(b) << 16;
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

double median(std::vector<double> x) {
  std::sort(x.begin(), x.end());
  const size_t n = x.size();
  return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false, fp8 = false;
  int reps = 30;
  std::string json_path = "bench_cuda_prefill_attention.json";
  std::vector<cuda::PrefillKernelVariant> variants;
  auto usage = [&] {
    std::string names;
    for (int v = 0; v < cuda::kPrefillKernelVariantCount; ++v)
      names += std::string(v ? ", " : "") + cuda::prefill_kernel_variant_name(cuda::PrefillKernelVariant(v));
    fmt::print(stderr,
               "usage: {} [--quick] [--fp8] [--reps N>=20] [--json FILE] [--all-variants | --variant NAME[,NAME...]]\n"
               "variants: {}\n",
               argv[0], names);
    return 2;
  };
  bool all_variants = false;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--quick") quick = true;
    else if (flag == "--fp8") fp8 = true;
    else if (flag == "--reps" && i + 1 < argc) reps = int(bench::int_arg(flag, argv[++i], 20));
    else if (flag == "--json" && i + 1 < argc) json_path = argv[++i];
    else if (flag == "--all-variants") all_variants = true;
    else if (flag == "--variant" && i + 1 < argc) {
      std::string list = argv[++i];
      size_t at = 0;
      while (at <= list.size()) {
        const size_t comma = std::min(list.find(',', at), list.size());
        const std::string name = list.substr(at, comma - at);
        cuda::PrefillKernelVariant v{};
        if (!cuda::parse_prefill_kernel_variant(name.c_str(), &v)) {
          fmt::print(stderr, "unknown variant '{}'\n", name);
          return usage();
        }
        if (std::find(variants.begin(), variants.end(), v) == variants.end()) variants.push_back(v);
        at = comma + 1;
      }
    } else {
      return usage();
    }
  }
  if (all_variants || variants.empty()) {
    variants.clear();
    for (int v = 0; v < cuda::kPrefillKernelVariantCount; ++v) variants.push_back(cuda::PrefillKernelVariant(v));
  }
  cuda::CudaDevice device;
  fmt::print("device: {} ({} SMs)\n", device.name(), device.n_sm());

  // The mma.sync ceiling: 8 CTAs of 8 warps per SM, 8 independent accumulator chains per warp.
  double mma_peak_tflops = 0;
  {
    const int n_ctas = 8 * device.n_sm(), mma_per_warp = 8192;
    cuda::DeviceBuffer sink(size_t(n_ctas) * 256 * 4);
    cudaEvent_t a, b;
    LS_CUDA_CHECK(cudaEventCreate(&a));
    LS_CUDA_CHECK(cudaEventCreate(&b));
    cuda::mma_sync_peak_probe(n_ctas, mma_per_warp, sink.as<float>(), device.stream());  // warm-up
    std::vector<double> ms;
    for (int r = 0; r < 20; ++r) {
      LS_CUDA_CHECK(cudaEventRecord(a, device.stream()));
      cuda::mma_sync_peak_probe(n_ctas, mma_per_warp, sink.as<float>(), device.stream());
      LS_CUDA_CHECK(cudaEventRecord(b, device.stream()));
      LS_CUDA_CHECK(cudaEventSynchronize(b));
      float t = 0;
      LS_CUDA_CHECK(cudaEventElapsedTime(&t, a, b));
      ms.push_back(t);
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    const double flops = double(n_ctas) * 8 * mma_per_warp * 2.0 * 16 * 8 * 16;
    mma_peak_tflops = flops / (median(ms) * 1e-3) / 1e12;
    fmt::print("mma.sync m16n8k16 bf16->f32 ceiling (register-only probe): {:.1f} TFLOP/s\n", mma_peak_tflops);
  }
  const std::vector<int> contexts = quick ? std::vector<int>{1024, 8192} : std::vector<int>{1024, 2048, 4096, 8192, 16384};
  const std::vector<std::pair<std::string, int>> kinds = {{"MHA", 32}, {"GQA-8", 8}};

  // One cache of kTokens slots per kind serves every context (the batch always holds kTokens).
  const int n_blocks = kTokens / kBlockSize;
  cuda::DeviceBuffer q(size_t(kTokens) * kHeads * kHeadDim * 2);
  q.upload(random_bf16(size_t(kTokens) * kHeads * kHeadDim, 1).data(), q.bytes());
  cuda::DeviceBuffer out(size_t(kTokens) * kHeads * kHeadDim * 2);
  std::mt19937 rng(7);
  const float one = 1.0f;
  cuda::DeviceBuffer unit_scale(sizeof(float));  // the FP8 cache's per-tensor K and V scale
  unit_scale.upload(&one, sizeof(float));

  std::vector<Row> rows;
  bool any_nan = false;
  cudaEvent_t start, stop;
  LS_CUDA_CHECK(cudaEventCreate(&start));
  LS_CUDA_CHECK(cudaEventCreate(&stop));
  for (const auto& [kind, n_head_kv] : kinds) {
    const size_t cache_elems = size_t(kTokens) * n_head_kv * kHeadDim;
    const size_t elem_bytes = fp8 ? 1 : 2;
    cuda::DeviceBuffer k(cache_elems * elem_bytes), v(cache_elems * elem_bytes);
    if (fp8) {  // e4m3 codes of the same random values (scale 1)
      auto codes = [](const std::vector<uint16_t>& bits) {
        std::vector<uint8_t> out(bits.size());
        for (size_t i = 0; i < bits.size(); ++i) out[i] = f32_to_fp8_e4m3(bf16_bits_to_f32(bits[i]));
        return out;
      };
      k.upload(codes(random_bf16(cache_elems, 2)).data(), k.bytes());
      v.upload(codes(random_bf16(cache_elems, 3)).data(), v.bytes());
    } else {
      k.upload(random_bf16(cache_elems, 2).data(), k.bytes());
      v.upload(random_bf16(cache_elems, 3).data(), v.bytes());
    }
    for (int context : contexts) {
      const int batch = kTokens / context, blocks_per_seq = context / kBlockSize;
      std::vector<int32_t> qsl(size_t(batch) + 1), seq_lens(size_t(batch), context), pool(static_cast<size_t>(n_blocks));
      for (int s = 0; s <= batch; ++s) qsl[size_t(s)] = s * context;
      std::iota(pool.begin(), pool.end(), 0);
      std::shuffle(pool.begin(), pool.end(), rng);  // paged: a sequence's blocks are scattered
      cuda::DeviceBuffer d_qsl(qsl.size() * 4), d_lens(seq_lens.size() * 4), d_tables(pool.size() * 4);
      d_qsl.upload(qsl.data(), d_qsl.bytes());
      d_lens.upload(seq_lens.data(), d_lens.bytes());
      d_tables.upload(pool.data(), d_tables.bytes());  // [batch, blocks_per_seq]

      cuda::PagedPrefillParams p;
      p.q = q.data();
      p.q_token_stride = int64_t(kHeads) * kHeadDim;
      p.kv.k = k.data();
      p.kv.v = v.data();
      p.kv.dtype = fp8 ? cuda::KvDtype::Fp8E4M3 : cuda::KvDtype::Bf16;
      p.kv.k_scale = p.kv.v_scale = fp8 ? unit_scale.as<float>() : nullptr;
      p.kv.scale_head_stride = 0;
      p.out = out.data();
      p.query_start_loc = d_qsl.as<int32_t>();
      p.seq_lens = d_lens.as<int32_t>();
      p.block_tables = d_tables.as<int32_t>();
      p.n_seqs = batch;
      p.n_tokens = kTokens;
      p.max_blocks_per_seq = blocks_per_seq;
      p.block_size = kBlockSize;
      p.max_query_len = context;
      p.n_head = kHeads;
      p.n_head_kv = n_head_kv;
      p.head_dim = kHeadDim;
      p.softmax_scale = 1.0f / std::sqrt(float(kHeadDim));

      std::vector<uint16_t> first_out;  // the first variant's output on these inputs
      for (const cuda::PrefillKernelVariant variant : variants) {
        const std::string vname = cuda::prefill_kernel_variant_name(variant);
        p.variant = variant;
        LS_CUDA_CHECK(cudaMemsetAsync(out.data(), 0xff, out.bytes(), device.stream()));  // NaN: unwritten shows
        for (int w = 0; w < 3; ++w) cuda::paged_prefill_attention(p, device.stream());
        device.synchronize();
        std::vector<uint16_t> host_out(size_t(kTokens) * kHeads * kHeadDim);
        out.download(host_out.data(), host_out.size() * 2);
        const size_t nans = size_t(std::count_if(host_out.begin(), host_out.end(),
                                                 [](uint16_t b) { return (b & 0x7f80u) == 0x7f80u && (b & 0x7fu); }));
        if (nans) {
          fmt::print(stderr, "{} {} context {}: {} NaN outputs\n", vname, kind, context, nans);
          any_nan = true;
        }
        double max_diff = 0;
        if (first_out.empty()) {
          first_out = std::move(host_out);
        } else {
          for (size_t i = 0; i < host_out.size(); ++i)
            max_diff = std::max(max_diff, double(std::fabs(bf16_bits_to_f32(host_out[i]) - bf16_bits_to_f32(first_out[i]))));
        }

        std::vector<double> ms;
        for (int r = 0; r < reps; ++r) {
          LS_CUDA_CHECK(cudaEventRecord(start, device.stream()));
          cuda::paged_prefill_attention(p, device.stream());
          LS_CUDA_CHECK(cudaEventRecord(stop, device.stream()));
          LS_CUDA_CHECK(cudaEventSynchronize(stop));
          float t = 0;
          LS_CUDA_CHECK(cudaEventElapsedTime(&t, start, stop));
          ms.push_back(t);
        }
        const double t_ms = median(ms);
        const double flops = 4.0 * kHeads * kHeadDim * double(batch) * double(context) * double(context + 1) / 2.0;
        rows.push_back({vname, kind, context, batch, n_head_kv, t_ms, flops / (t_ms * 1e-3) / 1e12,
                        flops / (kPeakTflops * 1e12) * 1e3, max_diff});
      }
    }
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);

  fmt::print("\ncausal prefill, {} K/V, head_dim {}, {} q heads, {} tokens per launch, block_size {}, median of {}\n",
             fp8 ? "e4m3 (per-tensor scale 1)" : "bf16", kHeadDim, kHeads, kTokens, kBlockSize, reps);
  // Summary: TFLOP/s, one column per variant, one line per shape.
  fmt::print("{:<6} {:>7}", "kind", "context");
  for (auto v : variants) fmt::print(" {:>9}", cuda::prefill_kernel_variant_name(v));
  fmt::print("\n");
  for (size_t i = 0; i < rows.size(); i += variants.size()) {
    fmt::print("{:<6} {:>7}", rows[i].kind, rows[i].context);
    for (size_t j = 0; j < variants.size(); ++j) fmt::print(" {:>9.1f}", rows[i + j].tflops);
    fmt::print("\n");
  }
  fmt::print("\n{:<9} {:<6} {:>7} {:>5} {:>5} {:>10} {:>9} {:>10} {:>7} {:>8} {:>10}\n", "variant", "kind", "context",
             "batch", "n_kv", "time_ms", "TFLOP/s", "floor_ms", "of_peak", "of_mma", "max_diff");
  nlohmann::json jrows = nlohmann::json::array();
  for (const Row& r : rows) {
    fmt::print("{:<9} {:<6} {:>7} {:>5} {:>5} {:>10.3f} {:>9.1f} {:>10.3f} {:>6.1f}% {:>7.1f}% {:>10.2e}\n", r.variant,
               r.kind, r.context, r.batch, r.n_head_kv, r.time_ms, r.tflops, r.floor_ms, 100.0 * r.tflops / kPeakTflops,
               100.0 * r.tflops / mma_peak_tflops, r.max_diff);
    jrows.push_back({{"variant", r.variant}, {"kind", r.kind}, {"context", r.context}, {"batch", r.batch},
                     {"n_head", kHeads}, {"n_head_kv", r.n_head_kv}, {"head_dim", kHeadDim}, {"time_ms", r.time_ms},
                     {"tflops", r.tflops}, {"floor_ms", r.floor_ms}, {"max_diff_vs_first", r.max_diff}});
  }
  fmt::print("(floor: the FLOPs at {} TFLOP/s, dense bf16 peak; of_mma: of the measured mma.sync ceiling {:.1f}; "
             "max_diff: largest |out - first variant's out|)\n",
             kPeakTflops, mma_peak_tflops);
  nlohmann::json j = {{"bench", "cuda_prefill_attention"},
                      {"device", device.name()},
                      {"flops_formula", "4 * n_head * head_dim * sum_s L_s (L_s + 1) / 2"},
                      {"block_size", kBlockSize},
                      {"kv_dtype", fp8 ? "fp8_e4m3" : "bf16"},
                      {"reps", reps},
                      {"mma_sync_peak_tflops", mma_peak_tflops},
                      {"rows", jrows}};
  std::ofstream(json_path) << j.dump(2) << "\n";
  fmt::print("wrote {}\n", json_path);
  return any_nan ? 1 : 0;
}
