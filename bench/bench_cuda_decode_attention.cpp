// Paged decode attention on the GPU: KV bytes read per second against this GPU's measured
// read roof (read_only_pass over 4 GiB), for MHA (32 q / 32 kv heads), GQA-8 (32 / 8) and MQA
// (32 / 1) at head_dim 128, block_size 16, bf16 KV (and FP8 KV for GQA-8), batch 1 .. 128 and
// context 4K / 16K. The cache is filled with random values on the device, every sequence's
// block table is a random permutation of its blocks, and shapes whose K+V is under 256 MB
// rotate over several copies of the cache (different blocks) so that no launch reads from L2.
// A benchmark: prints a table, writes JSON, asserts nothing. The goal: >= 4.0 TB/s (about 90%
// of the roof) at batch >= 16 and context >= 4K.
//
//   bench_cuda_decode_attention [--quick] [--json FILE]
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
#include "backend/cuda/paged_decode_attention.h"
#include "backend/cuda/random_fill.h"
#include "backend/cuda/read_roof.h"

using namespace latentserve;
using cuda::DeviceBuffer;

namespace {

constexpr int kNHead = 32, kHeadDim = 128, kBlockSize = 16;
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

struct Row {
  std::string kind, kv_dtype;
  int batch = 0, context = 0, n_head_kv = 0, n_splits = 0, n_ctas = 0, replicas = 0;
  double kv_bytes = 0, time_s = 0, floor_s = 0, gb_per_s = 0, roof_fraction = 0;
};

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

// One shape: its block tables (one per replica), lengths, q, out, workspace; timed.
Row run_shape(const Kind& kind, cuda::KvDtype dtype, int batch, int context, DeviceBuffer& k_pool,
              DeviceBuffer& v_pool, double roof, cudaStream_t s, std::mt19937& rng) {
  const int elt = cuda::kv_element_bytes(dtype);
  const int blocks_per_seq = context / kBlockSize;
  const int64_t blocks = int64_t(batch) * blocks_per_seq;
  const size_t block_bytes = size_t(kBlockSize) * kind.n_head_kv * kHeadDim * elt;  // one of K, V
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
  DeviceBuffer q(size_t(batch) * q_stride * 2), out(size_t(batch) * kNHead * kHeadDim * 2);
  cuda::fill_uniform_bf16(q.data(), int64_t(batch) * q_stride, 0.f, 1.f, 7, s);
  DeviceBuffer ws(cuda::paged_decode_workspace_bytes(batch, kNHead, kHeadDim, context));
  DeviceBuffer scales(2 * sizeof(float));
  const float scale_values[2] = {0.0625f, 0.0625f};
  scales.upload(scale_values, sizeof(scale_values));

  cuda::PagedDecodeParams p{};
  p.q = q.data();
  p.q_seq_stride = q_stride;
  p.kv.k = k_pool.data();
  p.kv.v = v_pool.data();
  p.kv.dtype = dtype;
  if (dtype == cuda::KvDtype::Fp8E4M3) {
    p.kv.k_scale = scales.as<float>();
    p.kv.v_scale = scales.as<float>() + 1;
    p.kv.scale_head_stride = 0;
  }
  p.out = out.data();
  p.seq_lens = lens_dev.as<int32_t>();
  p.n_seqs = batch;
  p.max_blocks_per_seq = blocks_per_seq;
  p.block_size = kBlockSize;
  p.n_head = kNHead;
  p.n_head_kv = kind.n_head_kv;
  p.head_dim = kHeadDim;
  p.softmax_scale = 1.f / std::sqrt(float(kHeadDim));
  p.max_seq_len_bound = context;
  p.workspace = ws.data();
  p.workspace_bytes = ws.bytes();

  const double t = median_seconds(s, 50, [&](int i) {
    p.block_tables = tables[size_t(i % replicas)].as<int32_t>();
    cuda::paged_decode_attention(p, s);
  });
  const cuda::PagedDecodePlan plan = cuda::paged_decode_plan(batch, kNHead, kind.n_head_kv, kHeadDim, dtype, context);
  Row row;
  row.kind = kind.name;
  row.kv_dtype = dtype == cuda::KvDtype::Bf16 ? "bf16" : "fp8";
  row.batch = batch;
  row.context = context;
  row.n_head_kv = kind.n_head_kv;
  row.n_splits = plan.n_splits;
  row.n_ctas = plan.n_ctas;
  row.replicas = replicas;
  row.kv_bytes = kv_bytes;
  row.time_s = t;
  row.floor_s = kv_bytes / roof;
  row.gb_per_s = kv_bytes / t * 1e-9;
  row.roof_fraction = kv_bytes / t / roof;
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  std::string json_path;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--quick")) quick = true;
    else if (!std::strcmp(argv[i], "--json") && i + 1 < argc) json_path = argv[++i];
    else {
      fmt::print(stderr, "usage: {} [--quick] [--json FILE]\n", argv[0]);
      return 2;
    }
  }
  try {
    cuda::CudaDevice device;
    cudaStream_t s = device.stream();
    fmt::print("device: {} ({} SMs)\n", device.name(), device.n_sm());

    const double roof = read_roof_bytes_per_s(s);
    fmt::print("read roof (read_only_pass, 4 GiB, median of 20): {:.3f} TB/s\n\n", roof * 1e-12);

    const std::vector<Kind> kinds = {{"MHA", 32}, {"GQA-8", 8}, {"MQA", 1}};
    const std::vector<int> batches = quick ? std::vector<int>{16, 64} : std::vector<int>{1, 16, 64, 128};
    const std::vector<int> contexts = quick ? std::vector<int>{4096} : std::vector<int>{4096, 16384};

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
      fmt::print("{:<6} {:<4} batch {:>3} ctx {:>5}: {:>9.1f} us  {:>8.1f} GB/s  {:>5.1f}% of roof\n", r.kind, r.kv_dtype,
                 r.batch, r.context, r.time_s * 1e6, r.gb_per_s, 100 * r.roof_fraction);
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
            rows.push_back(run_shape(kind, dtype, batch, context, k_pool, v_pool, roof, s, rng));
            print_row(rows.back());
          }
      }
    }

    fmt::print("\n{:<6} {:<4} {:>5} {:>6} {:>6} {:>6} {:>9} {:>10} {:>10} {:>9} {:>7}\n", "kind", "kv", "batch", "ctx",
               "splits", "CTAs", "KV MB", "time us", "floor us", "GB/s", "% roof");
    for (const Row& r : rows)
      fmt::print("{:<6} {:<4} {:>5} {:>6} {:>6} {:>6} {:>9.1f} {:>10.1f} {:>10.1f} {:>9.1f} {:>6.1f}%\n", r.kind,
                 r.kv_dtype, r.batch, r.context, r.n_splits, r.n_ctas, r.kv_bytes * 1e-6, r.time_s * 1e6,
                 r.floor_s * 1e6, r.gb_per_s, 100 * r.roof_fraction);
    fmt::print("(goal: >= 4000 GB/s at batch >= 16, context >= 4096; floor = K+V bytes / read roof)\n");

    if (!json_path.empty()) {
      nlohmann::json j;
      j["device"] = device.name();
      j["read_roof_bytes_per_s"] = roof;
      j["head_dim"] = kHeadDim;
      j["n_head"] = kNHead;
      j["block_size"] = kBlockSize;
      for (const Row& r : rows)
        j["rows"].push_back({{"kind", r.kind},         {"kv_dtype", r.kv_dtype},     {"batch", r.batch},
                             {"context", r.context},   {"n_head_kv", r.n_head_kv},   {"n_splits", r.n_splits},
                             {"n_ctas", r.n_ctas},     {"replicas", r.replicas},     {"kv_bytes", r.kv_bytes},
                             {"time_s", r.time_s},     {"floor_s", r.floor_s},       {"gb_per_s", r.gb_per_s},
                             {"roof_fraction", r.roof_fraction}});
      std::ofstream(json_path) << j.dump(2) << "\n";
      fmt::print("wrote {}\n", json_path);
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_cuda_decode_attention: {}\n", e.what());
    return 1;
  }
  return 0;
}
