// Paged decode attention on the GPU: KV bytes read per second against this GPU's measured
// read roof (read_only_pass over 4 GiB), for MHA (32 q / 32 kv heads), GQA-8 (32 / 8) and MQA
// (32 / 1) at head_dim 128, block_size 16 (--block-size), bf16 KV (and FP8 KV for GQA-8), batch 1 .. 128 and
// context 4K / 16K. The cache is filled with random values on the device, every sequence's
// block table is a random permutation of its blocks, and shapes whose K+V is under 256 MB
// rotate over several copies of the cache (different blocks) so that no launch reads from L2.
// A benchmark: prints a table, writes JSON, asserts nothing. The goal: >= 4.0 TB/s (about 90%
// of the roof) at batch >= 16 and context >= 4K.
//
// Every shape runs every kernel variant and chunk plan of kVariants (PagedDecodeTuning; the FP8-only
// ones on the FP8 shape only): one row per (variant, shape), with the relative L2 difference of
// its output from the Base kernel's (a sanity check, not a test), then the best variant per shape.
//
//   bench_cuda_decode_attention [--quick] [--json FILE] [--variants NAME,NAME,...] [--list]
//   --quick: batch 16 and 64 at context 4096 and 16384
//   --kv-layout slot|head: the cache's row order (kv_cache_layout.h; default head, as the engine's)
//   --block-size N: tokens per KV block (default 16, the engine's default)
//   --layout-probe: only the read stream of the decode grid in three cache layouts (paged_read_pass)
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <map>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_device.h"
#include "backend/cuda/device_buffer.h"
#include "backend/cuda/paged_decode_attention.h"
#include "backend/cuda/random_fill.h"
#include "backend/cuda/read_roof.h"
#include "bench_args.h"

using namespace latentserve;
using cuda::DeviceBuffer;

namespace {

constexpr int kNHead = 32, kHeadDim = 128;
int g_block_size = 16;  // --block-size: tokens per KV block (a power of two in [8, 256])
constexpr double kMaxKvBytes = 60e9;      // skip shapes whose K+V is larger
constexpr double kRotateBytes = 256e6;    // below this K+V, rotate over copies (L2 is 50-60 MB)

double median(std::vector<double> x) {
  std::sort(x.begin(), x.end());
  return x[x.size() / 2];
}

class Timer {
 public:
  Timer() {
    LS_CUDA_CHECK(cudaEventCreate(&start_));
    LS_CUDA_CHECK(cudaEventCreate(&stop_));
  }
  ~Timer() {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  // milliseconds per call of `work(i)` over `calls` back-to-back calls on stream s
  template <typename Work>
  double ms_per_call(cudaStream_t s, int calls, Work work, int first = 0) {
    LS_CUDA_CHECK(cudaEventRecord(start_, s));
    for (int i = 0; i < calls; ++i) work(first + i);
    LS_CUDA_CHECK(cudaEventRecord(stop_, s));
    LS_CUDA_CHECK(cudaEventSynchronize(stop_));
    float ms = 0;
    LS_CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
    return double(ms) / calls;
  }

 private:
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

// Median seconds of one call: warm-up, then `samples` samples, each a burst of back-to-back
// calls long enough (>= ~200 us) that the event resolution does not matter.
template <typename Work>
double median_seconds(cudaStream_t s, int samples, Work work) {
  Timer timer;
  for (int i = 0; i < 3; ++i) work(i);
  const double estimate_ms = timer.ms_per_call(s, 5, work);
  const int burst = std::clamp(int(std::ceil(0.2 / std::max(estimate_ms, 1e-4))), 1, 64);
  if (estimate_ms < 0.02) samples *= 2;  // tiny shapes: more repeats
  std::vector<double> ms;
  for (int i = 0; i < samples; ++i) ms.push_back(timer.ms_per_call(s, burst, work, i * burst));
  return median(ms) * 1e-3;
}

struct Kind {
  const char* name;
  int n_head_kv;
};

struct Variant {
  std::string label;
  cuda::PagedDecodeTuning tuning;
  bool fp8_only = false;
};

std::vector<Variant> all_variants() {
  std::vector<Variant> v;
  auto add = [&](cuda::PagedDecodeKernel k, int target, int chunk, std::string label, bool from_lengths = false) {
    cuda::PagedDecodeTuning t;
    t.kernel = k;
    t.target_ctas = target;
    t.chunk_tokens = chunk;
    t.chunks_from_lengths = from_lengths;
    v.push_back({std::move(label), t, cuda::paged_decode_kernel_fp8_only(k)});
  };
  using K = cuda::PagedDecodeKernel;
  for (int k = 0; k < int(K::kCount); ++k) add(K(k), 0, 0, cuda::paged_decode_kernel_name(K(k)));
  // chunk plans: fewer, longer CTAs (amortise the prologue) or more CTAs (fill small grids)
  add(K::Base, 264, 0, "base_ctas264");
  add(K::Base, 528, 0, "base_ctas528");
  add(K::Fused, 264, 0, "fused_ctas264");
  add(K::Fused, 1056, 0, "fused_ctas1056");
  add(K::Fused, 132, 0, "fused_ctas132");  // one CTA per SM: small batches
  add(K::Fused, 528, 0, "fused_ctas528");  // the planner's aim for larger grids (and its default before small grids got 132)
  add(K::Base, 0, 256, "base_chunk256");
  add(K::Base, 0, 512, "base_chunk512");
  add(K::Fused, 0, 256, "fused_chunk256");
  add(K::Fused, 0, 512, "fused_chunk512");
  add(K::FusedW8, 264, 0, "fused_w8_ctas264");
  add(K::FusedStagesFp8Mixed, 264, 0, "fused_stages_fp8mixed_ctas264");
  add(K::StreamK, 132, 0, "streamk_ctas132");  // one CTA per SM (the default is two)
  add(K::StreamK, 528, 0, "streamk_ctas528");
  // chunks sized from each sequence's length over the planned grid (the default: the planned chunk at every length)
  add(K::Base, 0, 0, "base_lengths", true);
  add(K::Fused, 0, 0, "fused_lengths", true);
  add(K::Fused, 264, 0, "fused_ctas264_lengths", true);
  return v;
}

struct Row {
  std::string variant, kind, kv_dtype;
  int batch = 0, context = 0, n_head_kv = 0, n_splits = 0, n_ctas = 0, replicas = 0;
  int chunk_tokens = 0, threads = 0, stages = 0, smem_bytes = 0;
  double kv_bytes = 0, time_s = 0, floor_s = 0, gb_per_s = 0, roof_fraction = 0;
  double diff_vs_base = 0;  // relative L2 of the output against the Base kernel's
};

std::vector<float> bf16_to_f32(const std::vector<uint16_t>& bits) {
  std::vector<float> out(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) {
    const uint32_t u = uint32_t(bits[i]) << 16;
    std::memcpy(&out[i], &u, 4);
  }
  return out;
}
double relative_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = double(a[i]) - double(b[i]);
    num += d * d;
    den += double(b[i]) * double(b[i]);
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

double read_roof_bytes_per_s(cudaStream_t s) {
  const size_t bytes = size_t(4) << 30;
  DeviceBuffer data(bytes), sums(size_t(cuda::read_only_pass_blocks()) * sizeof(float));
  cuda::fill_uniform_bf16(data.data(), int64_t(bytes / 2), 0.f, 1.f, 1, s);
  Timer timer;
  for (int i = 0; i < 3; ++i) cuda::read_only_pass(data.data(), bytes, sums.as<float>(), cuda::read_only_pass_blocks(), s);
  std::vector<double> ms;
  for (int i = 0; i < 20; ++i)
    ms.push_back(timer.ms_per_call(s, 1, [&](int) {
      cuda::read_only_pass(data.data(), bytes, sums.as<float>(), cuda::read_only_pass_blocks(), s);
    }));
  return double(bytes) / (median(ms) * 1e-3);
}

// --layout-probe: what the cache layout costs a pure read stream (paged_read_pass: the decode
// kernel's grid and addresses, no arithmetic), slot-major (ours) against head-major blocks and
// SDPA's contiguous [batch, head, token, dim], on shapes of >= 256 MB (no rotation needed).
void run_layout_probe(const std::vector<int>& batches, const std::vector<int>& contexts, double roof, cudaStream_t s) {
  const std::vector<Kind> kinds = {{"MHA", 32}, {"GQA-8", 8}};
  const std::vector<std::pair<const char*, cuda::PagedReadLayout>> layouts = {
      {"slot-major (ours)", cuda::PagedReadLayout::SlotMajor},
      {"head-major blocks", cuda::PagedReadLayout::BlockHeadMajor},
      {"contiguous (SDPA)", cuda::PagedReadLayout::Contiguous}};
  std::mt19937 rng(7);
  fmt::print("layout probe: K+V of one layer read once, bf16 hd 128, block {}, 1024-token chunks, TB/s (% of roof)\n",
             g_block_size);
  for (const Kind& kind : kinds)
    for (int batch : batches)
      for (int context : contexts) {
        const size_t side = size_t(batch) * context * kind.n_head_kv * kHeadDim * 2;
        if (2.0 * side > kMaxKvBytes || 2.0 * side < kRotateBytes || context % 1024 != 0) continue;
        DeviceBuffer k(side), v(side);
        cuda::fill_uniform_bf16(k.data(), int64_t(side / 2), 0.f, 1.f, 3, s);
        cuda::fill_uniform_bf16(v.data(), int64_t(side / 2), 0.f, 1.f, 4, s);
        std::vector<int32_t> ids(size_t(batch) * (context / g_block_size));
        std::iota(ids.begin(), ids.end(), 0);
        std::shuffle(ids.begin(), ids.end(), rng);
        DeviceBuffer table(ids.size() * 4);
        table.upload(ids.data(), ids.size() * 4);
        cuda::PagedReadProbe p;
        p.k = k.data();
        p.v = v.data();
        p.block_tables = table.as<int32_t>();
        p.n_seqs = batch;
        p.context = context;
        p.n_head_kv = kind.n_head_kv;
        p.block_size = g_block_size;
        p.row_bytes = kHeadDim * 2;
        p.chunk_tokens = 1024;
        DeviceBuffer sums(size_t(cuda::paged_read_pass_blocks(p)) * sizeof(float));
        p.block_sums = sums.as<float>();
        fmt::print("{:<6} batch {:>3} ctx {:>5} ({:>6.0f} MB):", kind.name, batch, context, 2e-6 * side);
        // uncapped (up to 8 blocks per SM: 256 KB of loads in flight), then two blocks per SM
        // (64 KB in flight, about what the decode kernel's two CTAs of 2-3 stages keep)
        for (int reserve : {0, 100 * 1024}) {
          p.reserve_smem_bytes = reserve;
          fmt::print("{}", reserve ? "\n    2 blocks/SM:                     " : "");
          for (const auto& [name, layout] : layouts) {
            p.layout = layout;
            const double t = median_seconds(s, 20, [&](int) { cuda::paged_read_pass(p, s); });
            fmt::print("  {} {:.3f} ({:.1f}%)", name, 2.0 * side / t * 1e-12, 100 * 2.0 * side / t / roof);
          }
        }
        fmt::print("\n");
        std::fflush(stdout);
      }
}

// One shape: its block tables (one per replica), lengths, q, out, workspace (sized for every
// variant); then each variant timed, and its output compared with the first (Base) variant's.
// --model-bound: size the grid as the model does, for its graphs' context bucket of the context
// (cuda::decode_context_bucket: its graphs serve every length up to it), instead of for the
// context itself; --pow2-bound: for the power of two >= max(context, 512) (one bucket an octave);
// --bucket-steps N: for N buckets an octave.
int g_bound_steps = 0;  // buckets per octave; 0: the grid's bound is the context
cuda::KvLayout g_layout = cuda::KvLayout::HeadMajor;  // --kv-layout slot|head (head: the CUDA cache's default)

int grid_bound(int context) {
  return g_bound_steps == 0 ? context : int(cuda::decode_context_bucket(context, g_bound_steps));
}

std::vector<Row> run_shape(const Kind& kind, cuda::KvDtype dtype, int batch, int context,
                           const std::vector<Variant>& variants, DeviceBuffer& k_pool, DeviceBuffer& v_pool,
                           double roof, cudaStream_t s, std::mt19937& rng) {
  const int elt = cuda::kv_element_bytes(dtype);
  const int blocks_per_seq = context / g_block_size;
  const int64_t blocks = int64_t(batch) * blocks_per_seq;
  const size_t block_bytes = size_t(g_block_size) * kind.n_head_kv * kHeadDim * elt;  // one of K, V
  const double kv_bytes = 2.0 * double(blocks) * double(block_bytes);
  const int replicas = std::max(1, int(std::min<int64_t>(int64_t(std::ceil(kRotateBytes / kv_bytes)),
                                                         int64_t(k_pool.bytes() / (blocks * block_bytes)))));

  // tables[r]: [batch, blocks_per_seq], a random permutation of replica r's blocks
  std::vector<DeviceBuffer> tables;
  for (int r = 0; r < replicas; ++r) {
    std::vector<int32_t> ids(static_cast<size_t>(blocks));
    std::iota(ids.begin(), ids.end(), int32_t(r * blocks));
    std::shuffle(ids.begin(), ids.end(), rng);
    DeviceBuffer t(ids.size() * 4);
    t.upload(ids.data(), ids.size() * 4);
    tables.push_back(std::move(t));
  }
  std::vector<int32_t> lens(size_t(batch), context);
  DeviceBuffer lens_dev(lens.size() * 4);
  lens_dev.upload(lens.data(), lens.size() * 4);
  const int64_t q_stride = int64_t(kNHead + 2 * kind.n_head_kv) * kHeadDim;  // the model's fused qkv row
  const size_t out_elements = size_t(batch) * kNHead * kHeadDim;
  DeviceBuffer q(size_t(batch) * q_stride * 2), out(out_elements * 2);
  cuda::fill_uniform_bf16(q.data(), int64_t(batch) * q_stride, 0.f, 1.f, 7, s);
  size_t ws_bytes = 0;
  for (const Variant& v : variants)
    ws_bytes = std::max(ws_bytes, cuda::paged_decode_workspace_bytes(batch, kNHead, kHeadDim, grid_bound(context), v.tuning));
  DeviceBuffer ws(ws_bytes);
  cuda::paged_decode_workspace_init(ws.data(), ws.bytes(), batch, kNHead, s);  // the fused variants' counters
  DeviceBuffer scales(2 * sizeof(float));
  const float scale_values[2] = {0.0625f, 0.0625f};
  scales.upload(scale_values, sizeof(scale_values));

  cuda::PagedDecodeParams p{};
  p.q = q.data();
  p.q_seq_stride = q_stride;
  p.kv.k = k_pool.data();
  p.kv.v = v_pool.data();
  p.kv.dtype = dtype;
  p.kv.layout = g_layout;
  p.kv.block_size = g_block_size;
  if (dtype == cuda::KvDtype::Fp8E4M3) {
    p.kv.k_scale = scales.as<float>();
    p.kv.v_scale = scales.as<float>() + 1;
    p.kv.scale_head_stride = 0;
  }
  p.out = out.data();
  p.seq_lens = lens_dev.as<int32_t>();
  p.n_seqs = batch;
  p.max_blocks_per_seq = blocks_per_seq;
  p.block_size = g_block_size;
  p.n_head = kNHead;
  p.n_head_kv = kind.n_head_kv;
  p.head_dim = kHeadDim;
  p.softmax_scale = 1.f / std::sqrt(float(kHeadDim));
  p.max_seq_len_bound = grid_bound(context);
  p.workspace = ws.data();
  p.workspace_bytes = ws.bytes();

  std::vector<Row> rows;
  std::vector<float> base_out;
  for (const Variant& v : variants) {
    if (v.fp8_only && dtype != cuda::KvDtype::Fp8E4M3) continue;
    p.tuning = v.tuning;
    const double t = median_seconds(s, 50, [&](int i) {
      p.block_tables = tables[size_t(i % replicas)].as<int32_t>();
      cuda::paged_decode_attention(p, s);
    });
    // the output on replica 0, against the first variant's
    LS_CUDA_CHECK(cudaMemsetAsync(out.data(), 0xff, out.bytes(), s));
    p.block_tables = tables[0].as<int32_t>();
    cuda::paged_decode_attention(p, s);
    LS_CUDA_CHECK(cudaStreamSynchronize(s));
    std::vector<uint16_t> bits(out_elements);
    out.download(bits.data(), bits.size() * 2);
    std::vector<float> got = bf16_to_f32(bits);
    if (base_out.empty()) base_out = got;

    const cuda::PagedDecodePlan plan =
        cuda::paged_decode_plan(batch, kNHead, kind.n_head_kv, kHeadDim, dtype, grid_bound(context), v.tuning);
    Row row;
    row.variant = v.label;
    row.kind = kind.name;
    row.kv_dtype = dtype == cuda::KvDtype::Bf16 ? "bf16" : "fp8";
    row.batch = batch;
    row.context = context;
    row.n_head_kv = kind.n_head_kv;
    row.n_splits = plan.n_splits;
    row.n_ctas = plan.n_ctas;
    row.chunk_tokens = plan.chunk_tokens;
    row.threads = plan.threads;
    row.stages = plan.stages;
    row.smem_bytes = plan.smem_bytes;
    row.replicas = replicas;
    row.kv_bytes = kv_bytes;
    row.time_s = t;
    row.floor_s = kv_bytes / roof;
    row.gb_per_s = kv_bytes / t * 1e-9;
    row.roof_fraction = kv_bytes / t / roof;
    row.diff_vs_base = relative_l2(got, base_out);
    rows.push_back(row);
  }
  return rows;
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false, list = false, layout_probe = false;
  std::string json_path, only;
  std::vector<int> batch_list, context_list;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--quick")) quick = true;
    else if (!std::strcmp(argv[i], "--list")) list = true;
    else if (!std::strcmp(argv[i], "--json") && i + 1 < argc) json_path = argv[++i];
    else if (!std::strcmp(argv[i], "--variants") && i + 1 < argc) only = argv[++i];
    else if (!std::strcmp(argv[i], "--batch") && i + 1 < argc) batch_list = bench::int_list_arg("--batch", argv[++i]);
    else if (!std::strcmp(argv[i], "--pow2-bound")) g_bound_steps = 1;
    else if (!std::strcmp(argv[i], "--model-bound")) g_bound_steps = cuda::kDecodeContextBucketsPerOctave;
    else if (!std::strcmp(argv[i], "--bucket-steps") && i + 1 < argc)  // buckets an octave
      g_bound_steps = int(bench::int_arg("--bucket-steps", argv[++i], 1, cuda::kDecodeContextBucketsMaxSteps));
    else if (!std::strcmp(argv[i], "--layout-probe")) layout_probe = true;
    else if (!std::strcmp(argv[i], "--kv-layout") && i + 1 < argc && !std::strcmp(argv[i + 1], "slot")) g_layout = cuda::KvLayout::SlotMajor, ++i;
    else if (!std::strcmp(argv[i], "--kv-layout") && i + 1 < argc && !std::strcmp(argv[i + 1], "head")) g_layout = cuda::KvLayout::HeadMajor, ++i;
    else if (!std::strcmp(argv[i], "--context") && i + 1 < argc) context_list = bench::int_list_arg("--context", argv[++i]);
    else if (!std::strcmp(argv[i], "--block-size") && i + 1 < argc) g_block_size = int(bench::int_arg("--block-size", argv[++i], 8, 256));
    else {
      fmt::print(stderr, "usage: {} [--quick] [--json FILE] [--variants NAME,NAME,...] [--batch 1,16] [--context 1024,4096] [--model-bound | --pow2-bound | --bucket-steps N] [--layout-probe] [--kv-layout slot|head] [--block-size 16] [--list]\n", argv[0]);
      return 2;
    }
  }
  if (g_block_size < 8 || g_block_size > 256 || (g_block_size & (g_block_size - 1)) != 0) {
    fmt::print(stderr, "--block-size must be a power of two in [8, 256], found {}\n", g_block_size);
    return 2;
  }
  std::vector<Variant> variants = all_variants();
  if (list) {
    for (const Variant& v : variants) fmt::print("{}{}\n", v.label, v.fp8_only ? " (fp8 shapes only)" : "");
    return 0;
  }
  if (!only.empty()) {
    // keep the named ones, in the given order; base first always (the reference for the diff column)
    std::vector<Variant> picked = {variants[0]};
    std::stringstream names(only);
    for (std::string name; std::getline(names, name, ',');) {
      auto it = std::find_if(variants.begin(), variants.end(), [&](const Variant& v) { return v.label == name; });
      if (it == variants.end()) {
        fmt::print(stderr, "unknown variant '{}' (--list shows them)\n", name);
        return 2;
      }
      if (it != variants.begin()) picked.push_back(*it);
    }
    variants = picked;
  }
  try {
    cuda::CudaDevice device;
    cudaStream_t s = device.stream();
    fmt::print("device: {} ({} SMs), KV layout {}, block {}\n", device.name(), device.n_sm(),
               g_layout == cuda::KvLayout::SlotMajor ? "slot-major" : "head-major", g_block_size);

    const double roof = read_roof_bytes_per_s(s);
    fmt::print("read roof (read_only_pass, 4 GiB, median of 20): {:.3f} TB/s\n\n", roof * 1e-12);

    const std::vector<Kind> kinds = {{"MHA", 32}, {"GQA-8", 8}, {"MQA", 1}};
    std::vector<int> batches = quick ? std::vector<int>{16, 64} : std::vector<int>{1, 16, 64, 128};
    std::vector<int> contexts = {4096, 16384};
    if (!batch_list.empty()) batches = batch_list;
    if (!context_list.empty()) contexts = context_list;
    for (int c : contexts)
      if (c <= 0 || c % g_block_size != 0)
        throw std::runtime_error(fmt::format("--context {}: must be a positive multiple of the {}-token block", c, g_block_size));
    if (layout_probe) {
      run_layout_probe(batches, contexts, roof, s);
      return 0;
    }

    // one pool for every shape: the largest K (or V) that a shape (or its replicas) needs
    size_t pool_bytes = 0;
    for (const Kind& k : kinds)
      for (int b : batches)
        for (int c : contexts) {
          const double one = double(b) * c * k.n_head_kv * kHeadDim * 2;  // bf16, one of K, V
          if (2 * one > kMaxKvBytes) continue;
          pool_bytes = std::max(pool_bytes, size_t(std::max(one, kRotateBytes / 2)));
        }
    pool_bytes = (pool_bytes + 255) / 256 * 256;
    DeviceBuffer k_pool(pool_bytes), v_pool(pool_bytes);
    std::mt19937 rng(42);
    std::vector<Row> rows;
    auto print_row = [](const Row& r) {
      fmt::print("{:<30} {:<6} {:<4} batch {:>3} ctx {:>5} chunk {:>4} CTAs {:>6} thr {:>3} st {}: {:>9.1f} us  {:>8.1f} GB/s  "
                 "{:>5.1f}% of roof  diff {:.1e}\n",
                 r.variant, r.kind, r.kv_dtype, r.batch, r.context, r.chunk_tokens, r.n_ctas, r.threads, r.stages,
                 r.time_s * 1e6, r.gb_per_s, 100 * r.roof_fraction, r.diff_vs_base);
    };

    for (cuda::KvDtype dtype : {cuda::KvDtype::Bf16, cuda::KvDtype::Fp8E4M3}) {
      const bool fp8 = dtype == cuda::KvDtype::Fp8E4M3;
      if (fp8) {
        cuda::fill_uniform_fp8_e4m3(k_pool.data(), int64_t(pool_bytes), 4.f, 11, s);
        cuda::fill_uniform_fp8_e4m3(v_pool.data(), int64_t(pool_bytes), 4.f, 12, s);
      } else {
        cuda::fill_uniform_bf16(k_pool.data(), int64_t(pool_bytes / 2), 0.f, 1.f, 11, s);
        cuda::fill_uniform_bf16(v_pool.data(), int64_t(pool_bytes / 2), 0.f, 1.f, 12, s);
      }
      for (const Kind& kind : kinds) {
        if (fp8 && kind.n_head_kv != 8) continue;  // the FP8 variant: GQA-8 only
        for (int batch : batches)
          for (int context : contexts) {
            const double kv = 2.0 * batch * context * kind.n_head_kv * kHeadDim * cuda::kv_element_bytes(dtype);
            if (kv > kMaxKvBytes) continue;
            for (const Row& r : run_shape(kind, dtype, batch, context, variants, k_pool, v_pool, roof, s, rng)) {
              rows.push_back(r);
              print_row(r);
            }
            std::fflush(stdout);
          }
      }
    }

    fmt::print("\n{:<30} {:<6} {:<4} {:>5} {:>6} {:>6} {:>6} {:>9} {:>10} {:>10} {:>9} {:>7} {:>8} {:>8}\n", "variant", "kind",
               "kv", "batch", "ctx", "splits", "CTAs", "KV MB", "time us", "floor us", "GB/s", "% roof", "vs base",
               "diff");
    std::map<std::string, double> base_time;  // shape -> Base kernel time
    auto shape_key = [](const Row& r) { return fmt::format("{} {} {} {}", r.kind, r.kv_dtype, r.batch, r.context); };
    for (const Row& r : rows)
      if (r.variant == variants[0].label) base_time[shape_key(r)] = r.time_s;
    for (const Row& r : rows)
      fmt::print("{:<30} {:<6} {:<4} {:>5} {:>6} {:>6} {:>6} {:>9.1f} {:>10.1f} {:>10.1f} {:>9.1f} {:>6.1f}% {:>7.3f}x {:>8.1e}\n",
                 r.variant, r.kind, r.kv_dtype, r.batch, r.context, r.n_splits, r.n_ctas, r.kv_bytes * 1e-6,
                 r.time_s * 1e6, r.floor_s * 1e6, r.gb_per_s, 100 * r.roof_fraction,
                 base_time[shape_key(r)] / r.time_s, r.diff_vs_base);

    // best variant per shape (rows of one shape are consecutive)
    fmt::print("\nbest per shape\n{:<6} {:<4} {:>5} {:>6} {:>30} {:>9} {:>9} {:>7} {:>10} {:>8}\n", "kind", "kv", "batch",
               "ctx", "best variant", "best GB/s", "base GB/s", "% roof", "best/base", "diff");
    std::vector<const Row*> best;
    for (size_t i = 0; i < rows.size();) {
      size_t j = i;
      const Row* b = &rows[i];
      for (; j < rows.size() && shape_key(rows[j]) == shape_key(rows[i]); ++j)
        if (rows[j].time_s < b->time_s) b = &rows[j];
      best.push_back(b);
      const double base_s = base_time[shape_key(*b)];
      fmt::print("{:<6} {:<4} {:>5} {:>6} {:>30} {:>9.1f} {:>9.1f} {:>6.1f}% {:>9.3f}x {:>8.1e}\n", b->kind, b->kv_dtype,
                 b->batch, b->context, b->variant, b->gb_per_s, b->kv_bytes / base_s * 1e-9, 100 * b->roof_fraction,
                 base_s / b->time_s, b->diff_vs_base);
      i = j;
    }
    fmt::print("(goal: >= 4000 GB/s at batch >= 16, context >= 4096; floor = K+V bytes / read roof; diff = relative L2 "
               "of the output against {}'s, ~1e-3 expected from bf16 rounding and split order)\n",
               variants[0].label);

    if (!json_path.empty()) {
      nlohmann::json j;
      j["device"] = device.name();
      j["kv_layout"] = g_layout == cuda::KvLayout::SlotMajor ? "slot" : "head";
      j["read_roof_bytes_per_s"] = roof;
      j["head_dim"] = kHeadDim;
      j["n_head"] = kNHead;
      j["block_size"] = g_block_size;
      auto to_json = [](const Row& r) {
        return nlohmann::json{{"variant", r.variant},     {"kind", r.kind},
                              {"kv_dtype", r.kv_dtype},   {"batch", r.batch},
                              {"context", r.context},     {"n_head_kv", r.n_head_kv},
                              {"chunk_tokens", r.chunk_tokens}, {"n_splits", r.n_splits},
                              {"n_ctas", r.n_ctas},       {"threads", r.threads},
                              {"stages", r.stages},       {"smem_bytes", r.smem_bytes},
                              {"replicas", r.replicas},   {"kv_bytes", r.kv_bytes},
                              {"time_s", r.time_s},       {"floor_s", r.floor_s},
                              {"gb_per_s", r.gb_per_s},   {"roof_fraction", r.roof_fraction},
                              {"diff_vs_base", r.diff_vs_base}};
      };
      for (const Row& r : rows) j["rows"].push_back(to_json(r));
      for (const Row* b : best) j["best_per_shape"].push_back(to_json(*b));
      std::ofstream(json_path) << j.dump(2) << "\n";
      fmt::print("wrote {}\n", json_path);
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_cuda_decode_attention: {}\n", e.what());
    return 1;
  }
  return 0;
}
