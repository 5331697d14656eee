// `latentserve bench decode`: real decode steps through the engine on the CPU for one
// synthetic backbone in several attention kinds (only the KV head count changes), each
// printed next to the roofline floor the planner predicts from this machine's measured
// read bandwidth and GEMM rate (perf/machine_probe.h, measured at start).
//
// Per (attention, context, batch): every sequence's cache holds `context` tokens, then
// `--warmup` untimed and `--steps` timed decode steps run at that batch; the median of
// the timed steps is the measured TPOT. The context is
// put in the cache once per attention kind: `--fill prefill` runs a real prefill of one
// sequence of the longest context and copies its K/V rows into every sequence (a shorter
// context uses its prefix, which is what a shorter prefill computes, attention being
// causal); `--fill random` writes random K/V instead (default: a decode step reads the
// same bytes and does the same FLOPs whatever the values, and 8K-token prefills take
// minutes on a small CPU).
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/error.h"
#include "engine/batch_builder.h"
#include "kv/block_pool.h"
#include "model/architectures.h"
#include "perf/planner.h"
#include "perf/presets.h"
#ifdef LATENTSERVE_HAVE_CUDA
#include "backend/cuda/cuda_kv_cache.h"
#include "backend/cuda/cuda_machine_probe.h"
#endif

namespace latentserve::cli {

namespace {

struct BenchArgs {
  std::string synthetic = "tiny-bench", attention = "mha,gqa8,mqa", batch = "1,8", context = "1024,8192";
  std::string json_path = "bench-decode.json", fill = "random";
  std::string device = "cpu", kv_cache_dtype = "auto", model_dir, plot;
  double gpu_memory_utilization = 0.9;
  int64_t steps = 5, warmup = 1, block_size = 16, prefill_chunk = 512;
  int threads = 0;
};

// The --attention name of a checkpoint's attention: mla, mha, mqa or gqaN.
std::string attention_label(const AttentionSpec& a) {
  if (a.kind == AttentionKind::MLA) return "mla";
  if (a.n_head_kv == a.n_head) return "mha";
  if (a.n_head_kv == 1) return "mqa";
  return "gqa" + std::to_string(a.n_head / a.n_head_kv);
}

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

std::vector<int64_t> positive_list(const std::string& text, const std::string& flag) {
  std::vector<int64_t> out;
  for (const auto& item : split(text)) {
    size_t used = 0;
    int64_t v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || v <= 0) fail("{}: expected a comma-separated list of positive integers, found '{}'", flag, item);
    out.push_back(v);
  }
  if (out.empty()) fail("{}: the list is empty", flag);
  return out;
}

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown CPU";
}

// The KV rows of one sequence: per layer, K and V rows of row_floats floats at its slots.
struct SourceKv {
  int64_t row_floats = 0;
  std::vector<std::vector<float>> k, v;  // [layer][position * row_floats]
};

SourceKv random_source(int64_t n_layer, int64_t context, int64_t row_floats, uint64_t seed) {
  SourceKv s;
  s.row_floats = row_floats;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int64_t l = 0; l < n_layer; ++l) {
    s.k.emplace_back(static_cast<size_t>(context * row_floats));
    s.v.emplace_back(static_cast<size_t>(context * row_floats));
    for (auto* a : {&s.k.back(), &s.v.back()})
      for (auto& x : *a) x = u(rng);
  }
  return s;
}

// A real prefill of `tokens` through the engine (chunks of `chunk`), K/V read back out.
SourceKv prefill_source(CausalLM& model, const std::vector<int32_t>& tokens, int64_t row_floats, int64_t bs,
                        int64_t chunk) {
  const int64_t n = int64_t(tokens.size());
  BlockPool pool((n + bs - 1) / bs, bs);
  cpu::CpuKvCache kv(model.attention_spec(), model.n_layer(), pool.n_blocks(), bs);
  Sequence seq(0, tokens, bs);
  if (!seq.block_table.reserve(n, pool)) fail("prefill: block pool too small");
  std::vector<float> logits(size_t(model.vocab_size()));
  while (seq.n_uncomputed_tokens() > 0) {
    const int64_t take = std::min(chunk, seq.n_uncomputed_tokens());
    ForwardBatch b = build_forward_batch({{&seq, take, false}}, bs);
    logits.resize(b.logits_indices.size() * size_t(model.vocab_size()) + 1);
    model.forward(b, kv, logits.data());
    seq.n_computed_tokens += take;
  }
  SourceKv s;
  s.row_floats = row_floats;
  for (int64_t l = 0; l < model.n_layer(); ++l) {
    s.k.emplace_back(static_cast<size_t>(n * row_floats));
    s.v.emplace_back(static_cast<size_t>(n * row_floats));
    for (int64_t p = 0; p < n; ++p) {
      const int64_t slot = seq.block_table.slot(p);
      std::memcpy(&s.k.back()[size_t(p * row_floats)], kv.k(l) + slot * row_floats, size_t(row_floats) * 4);
      if (kv.v(l))  // MLA caches one latent row, no V
        std::memcpy(&s.v.back()[size_t(p * row_floats)], kv.v(l) + slot * row_floats, size_t(row_floats) * 4);
    }
  }
  return s;
}

struct Measured {
  double tpot_ms = 0;
  double mean_context_tokens = 0;
};

// warmup + steps decode steps of every sequence, one token each: `step(batch, next)` runs the
// model and writes each sequence's greedy next token. Returns the median timed step (robust to
// other processes taking the cores for a moment) at the mean context of the timed steps.
template <typename Step>
Measured time_steps(std::vector<Sequence>& seqs, int64_t context, const BenchArgs& a, Step step) {
  std::vector<int32_t> next(seqs.size());
  std::vector<double> seconds;
  for (int64_t i = 0; i < a.warmup + a.steps; ++i) {
    std::vector<ScheduledChunk> chunks;
    for (auto& s : seqs) chunks.push_back({&s, 1, false});
    const ForwardBatch b = build_forward_batch(chunks, a.block_size);
    const auto t0 = std::chrono::steady_clock::now();
    step(b, next);
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (i >= a.warmup) seconds.push_back(dt);
    for (size_t j = 0; j < seqs.size(); ++j) {
      seqs[j].n_computed_tokens += 1;
      seqs[j].tokens.push_back(next[j]);
    }
  }
  std::sort(seconds.begin(), seconds.end());
  const size_t n = seconds.size();
  const double median = n % 2 ? seconds[n / 2] : (seconds[n / 2 - 1] + seconds[n / 2]) / 2;
  return {median * 1e3, double(context + a.warmup) + double(a.steps - 1) / 2};
}

// batch sequences at `context` cached tokens (`source`'s rows, stored in the cache's dtype),
// timed by time_steps.
Measured time_decode(CausalLM& model, const SourceKv& source, const std::vector<int32_t>& prompt, int64_t batch,
                     int64_t context, const BenchArgs& a, const cpu::KvCacheOptions& kv_options) {
  const int64_t bs = a.block_size, total = context + a.warmup + a.steps;
  const int64_t blocks_per_seq = (total + bs - 1) / bs;
  BlockPool pool(batch * blocks_per_seq, bs);
  cpu::CpuKvCache kv(model.attention_spec(), model.n_layer(), pool.n_blocks(), bs, kv_options);
  std::vector<Sequence> seqs;
  seqs.reserve(size_t(batch));
  for (int64_t i = 0; i < batch; ++i) {
    std::vector<int32_t> tokens(prompt.begin(), prompt.begin() + context + 1);  // context cached + the next input
    seqs.emplace_back(i, std::move(tokens), bs);
    Sequence& s = seqs.back();
    if (!s.block_table.reserve(total, pool)) fail("bench: block pool too small");
    s.n_computed_tokens = context;
    std::vector<int64_t> slots(static_cast<size_t>(context));
    for (int64_t p = 0; p < context; ++p) slots[size_t(p)] = s.block_table.slot(p);
    const bool has_v = kv.v_rows(0).data != nullptr;  // MLA caches one latent row, no V
    for (int64_t l = 0; l < model.n_layer(); ++l)
      kv.write(l, source.k[size_t(l)].data(), source.row_floats, has_v ? source.v[size_t(l)].data() : nullptr,
               source.row_floats, slots.data(), context);
  }
  std::vector<float> logits(size_t(batch * model.vocab_size()));
  return time_steps(seqs, context, a, [&](const ForwardBatch& b, std::vector<int32_t>& next) {
    model.forward(b, kv, logits.data());
    for (size_t i = 0; i < next.size(); ++i) {  // greedy next token
      const float* row = &logits[i * size_t(model.vocab_size())];
      next[i] = int32_t(std::max_element(row, row + model.vocab_size()) - row);
    }
  });
}

#ifdef LATENTSERVE_HAVE_CUDA
// The GPU version of time_decode: `batch` sequences with `context` random tokens in a
// device KV cache (random rows: a decode step reads the same bytes whatever the values),
// then warmup + steps decode steps through forward_choose (greedy tokens picked on the device).
// Each step's time is the host's wall clock around the whole call: the batch upload, the
// graph replay (or eager kernels) and the copy of the tokens back, so it is the TPOT an
// engine step pays. Returns nullopt when the cache would not fit in device memory.
std::optional<Measured> time_decode_cuda(CausalLM& model, const std::vector<int32_t>& prompt, int64_t batch,
                                         int64_t context, const BenchArgs& a, const cpu::KvCacheOptions& kv_options) {
  const int64_t bs = a.block_size, total = context + a.warmup + a.steps;
  const int64_t blocks_per_seq = (total + bs - 1) / bs;
  const int64_t budget = model.plan_device_memory(batch, batch, a.gpu_memory_utilization);
  const int64_t n_blocks = batch * blocks_per_seq + 1;
  if (n_blocks * model.kv_block_bytes(bs, kv_options) > budget) return std::nullopt;
  BlockPool pool(n_blocks, bs);
  std::unique_ptr<KvCacheMemory> kv = model.make_kv_cache(pool.n_blocks(), bs, kv_options);
  cuda::as_cuda_kv_cache(*kv).fill_random(uint64_t(batch * 1000003 + context));
  std::vector<Sequence> seqs;
  seqs.reserve(size_t(batch));
  for (int64_t i = 0; i < batch; ++i) {
    std::vector<int32_t> tokens(prompt.begin(), prompt.begin() + context + 1);
    seqs.emplace_back(i, std::move(tokens), bs);
    if (!seqs.back().block_table.reserve(total, pool)) fail("bench: block pool too small");
    seqs.back().n_computed_tokens = context;
  }
  return time_steps(seqs, context, a, [&](const ForwardBatch& b, std::vector<int32_t>& next) {
    model.forward_choose(b, *kv, {}, next.data());
  });
}
#endif

// Measured TPOT (solid) and the floor (dashed) against batch, one colour per (attention,
// context): gnuplot data and script beside the PNG, rendered when gnuplot is installed.
void write_plot(const nlohmann::json& rows, const std::string& png, const std::string& machine) {
  std::vector<std::pair<std::string, int64_t>> series;
  for (const auto& r : rows) {
    const std::pair<std::string, int64_t> key{r["attention"].get<std::string>(), r["context_tokens"].get<int64_t>()};
    if (std::find(series.begin(), series.end(), key) == series.end()) series.push_back(key);
  }
  std::ofstream data(png + ".dat");
  for (const auto& [kind, ctx] : series) {
    data << "# " << kind << " " << ctx << "\n";
    for (const auto& r : rows)
      if (r["attention"] == kind && r["context_tokens"] == ctx)
        data << r["batch"].get<int64_t>() << " "
             << (r.contains("measured_tpot_ms") ? fmt::format("{}", r["measured_tpot_ms"].get<double>()) : "NaN") << " "
             << r["predicted_floor_ms"].get<double>() << "\n";
    data << "\n\n";
  }
  data.close();  // gnuplot reads it below
  std::ofstream gp(png + ".gp");
  gp << "set terminal pngcairo size 1000,650\nset output '" << png << "'\n"
     << "set title 'bench decode: measured TPOT (solid) vs predicted floor (dashed), " << machine << "'\n"
     << "set xlabel 'batch'\nset ylabel 'ms per decode step'\nset logscale xy\nset key outside right\nset grid\n"
     << "plot ";
  for (size_t i = 0; i < series.size(); ++i) {
    const int64_t ctx = series[i].second;
    const std::string label = ctx % 1024 == 0 ? fmt::format("{} {}K", series[i].first, ctx / 1024)
                                              : fmt::format("{} {}", series[i].first, ctx);
    gp << (i ? ", " : "") << "'" << png << ".dat' index " << i << " using 1:2 with linespoints lw 2 lc " << i + 1
       << " title '" << label << "', '' index " << i << " using 1:3 with lines dt 2 lc " << i + 1 << " notitle";
  }
  gp << "\n";
  gp.close();
  if (std::system(fmt::format("gnuplot '{}.gp' 2>&1", png).c_str()) != 0)
    fmt::print("gnuplot failed or is missing: {}.dat and {}.gp are written, the PNG is not\n", png, png);
  else
    fmt::print("wrote {}\n", png);
}

int run_bench_decode(const BenchArgs& a) {
  if (a.steps <= 0) fail("--steps must be at least 1, got {}", a.steps);
  // --model DIR: that checkpoint's own weights and attention; else the synthetic backbone in
  // each --attention kind.
  const bool from_checkpoint = !a.model_dir.empty();
  const perf::ModelShape backbone = from_checkpoint ? perf::shape_from_model_dir(a.model_dir)
                                                    : perf::model_preset(a.synthetic, "--synthetic");
  const auto kinds = from_checkpoint ? std::vector<std::string>{attention_label(backbone.attention)} : split(a.attention);
  if (kinds.empty()) fail("--attention: the list is empty");
  if (!from_checkpoint)
    for (const auto& k : kinds) perf::with_attention(backbone, k, "--attention");  // validate before measuring
  const auto batches = positive_list(a.batch, "--batch"), contexts = positive_list(a.context, "--context");
  if (a.warmup < 0) fail("--warmup must be >= 0, got {}", a.warmup);
  if (!is_supported_block_size(a.block_size)) fail("--block-size must be 16, 32, 64 or 128, got {}", a.block_size);
  if (a.fill != "random" && a.fill != "prefill") fail("--fill must be random or prefill, got '{}'", a.fill);
  if (a.prefill_chunk <= 0) fail("--prefill-chunk must be positive, got {}", a.prefill_chunk);

  const bool on_gpu = a.device == "cuda";
  if (a.device != "cpu" && !on_gpu) fail("--device: expected cpu or cuda, found '{}'", a.device);
  if (on_gpu && a.fill != "random") fail("--fill prefill is CPU-only: on cuda the context is random KV rows");
#ifndef LATENTSERVE_HAVE_CUDA
  if (on_gpu) fail("--device cuda: this latentserve was built without the CUDA backend");
#endif
  cpu::KvCacheOptions kv_options;
  kv_options.dtype = cpu::parse_kv_cache_dtype(a.kv_cache_dtype);
  if (on_gpu && kv_options.dtype == DType::F32) kv_options.dtype = DType::BF16;  // auto on the GPU
  kv_options.scale = cpu::KvScaleGranularity::PerHead;
  const DType kv_dtype = kv_options.dtype;

  ThreadPool pool(a.threads);
  perf::HardwareSpec cpu;  // the machine whose roofs give the floor: this CPU, or the GPU
  std::string machine;
  nlohmann::json machine_json;
  if (on_gpu) {
#ifdef LATENTSERVE_HAVE_CUDA
    const cuda::CudaDevice device(0);
    fmt::print("measuring this GPU ({})...\n", device.name());
    cpu = cuda::measured_gpu_spec(device, cuda::measure_roofs(device));
    machine = device.name();
    machine_json = {{"gpu", machine}, {"read_roof_tb_per_s", cpu.memory_bandwidth_bytes_per_s / 1e12},
                    {"bf16_gemm_tflop_per_s", cpu.peak_flops_per_s / 1e12}, {"memory_bytes", cpu.memory_bytes}};
    fmt::print("  read roof {:.2f} TB/s, bf16 GEMM {:.0f} TFLOP/s, memory {}\n", cpu.memory_bandwidth_bytes_per_s / 1e12,
               cpu.peak_flops_per_s / 1e12, perf::format_bytes(double(cpu.memory_bytes)));
#endif
  } else {
    fmt::print("measuring this machine ({}, {} threads)...\n", cpu_model_name(), pool.n_threads());
    cpu = perf::measure_cpu_spec(pool);
    machine = cpu_model_name();
    machine_json = {{"cpu", machine}, {"threads", pool.n_threads()},
                    {"read_bandwidth_gb_per_s", cpu.memory_bandwidth_bytes_per_s / 1e9},
                    {"sgemm_gflop_per_s", cpu.peak_flops_per_s / 1e9}, {"memory_bytes", cpu.memory_bytes}};
    fmt::print("  read bandwidth {:.2f} GB/s, sgemm {:.1f} GFLOP/s, memory {}\n", cpu.memory_bandwidth_bytes_per_s / 1e9,
               cpu.peak_flops_per_s / 1e9, perf::format_bytes(double(cpu.memory_bytes)));
  }
  fmt::print("{} {} ({} layers, hidden {}, {} heads x {}), {} weights, {} KV cache, "
             "context filled by {}, {} timed steps after {} warm-up{}\n\n",
             from_checkpoint ? "checkpoint" : "backbone", from_checkpoint ? a.model_dir : backbone.name,
             backbone.n_layer, backbone.hidden_size, backbone.attention.n_head, backbone.attention.head_dim_qk,
             from_checkpoint ? dtype_name(backbone.weight_dtype) : "bf16", cpu::kv_cache_dtype_name(kv_dtype), a.fill,
             a.steps, a.warmup, on_gpu ? ", CUDA graphs for decode" : "");
  fmt::print("{:<6} {:>6} {:>8} {:>12} {:>12} {:>8} {:>10} {:>10} {:>8}\n", "attn", "batch", "context",
             "measured ms", "floor ms", "ratio", "weights MB", "KV MB", "bound");

  nlohmann::json rows = nlohmann::json::array();
  const int64_t max_ctx = *std::max_element(contexts.begin(), contexts.end());
  std::vector<int32_t> prompt(static_cast<size_t>(max_ctx + 1));
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t((int64_t(i) * 7919 + 13) % backbone.vocab_size);

  for (const auto& kind : kinds) {
    perf::ModelShape shape = backbone;
    if (!from_checkpoint) {
      shape = perf::with_attention(backbone, kind, "--attention");
      shape.weight_dtype = DType::BF16;
    }
    const perf::TpKvLayout layout = perf::tp_kv_layout(shape.attention, shape.n_layer, kv_dtype, 1);
    const bool is_mla = shape.attention.kind == AttentionKind::MLA;
    const bool runnable = !(is_mla && on_gpu);  // MLA runs on the CPU engine only (no CUDA MLA kernels yet)
    std::unique_ptr<CausalLM> model;
    SourceKv source;
    if (runnable) {
      ModelOptions options;
      options.device = a.device;
      model = from_checkpoint ? load_causal_lm(a.model_dir, pool, options) : synthetic_causal_lm(shape, pool, options);
      // Cached floats per token and layer: K (and as many V) rows, or MLA's one latent row.
      const int64_t row = is_mla ? shape.attention.kv_lora_rank + shape.attention.qk_rope_head_dim
                                 : shape.attention.n_head_kv * shape.attention.head_dim_qk;
      const auto t0 = std::chrono::steady_clock::now();
      if (!on_gpu)
        source = a.fill == "prefill"
                     ? prefill_source(*model, {prompt.begin(), prompt.begin() + max_ctx}, row, a.block_size, a.prefill_chunk)
                     : random_source(shape.n_layer, max_ctx, row, 42);
      if (a.fill == "prefill")
        fmt::print("  ({}: prefill of {} tokens took {:.1f} s)\n", kind, max_ctx,
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    } else {
      fmt::print("{:<6} MLA has no CUDA kernels yet: predicted floors only\n", kind);
    }
    for (int64_t ctx : contexts)
      for (int64_t batch : batches) {
        Measured m{0, double(ctx + a.warmup) + double(a.steps - 1) / 2};
        bool measured_here = runnable;
        if (runnable && !on_gpu) m = time_decode(*model, source, prompt, batch, ctx, a, kv_options);
#ifdef LATENTSERVE_HAVE_CUDA
        if (runnable && on_gpu) {
          const auto gpu_m = time_decode_cuda(*model, prompt, batch, ctx, a, kv_options);
          if (gpu_m) m = *gpu_m;
          measured_here = gpu_m.has_value();
        }
#endif
        // The floor at the mean context of the timed steps.
        const perf::StepCost floor =
            perf::decode_step(shape, cpu, batch, int64_t(m.mean_context_tokens + 0.5), layout);
        const std::string measured = measured_here ? fmt::format("{:.2f}", m.tpot_ms) : runnable ? "no room" : "n/a";
        const std::string ratio = measured_here ? fmt::format("{:.2f}", m.tpot_ms / floor.time_ms) : "n/a";
        fmt::print("{:<6} {:>6} {:>8} {:>12} {:>12.2f} {:>8} {:>10.1f} {:>10.1f} {:>8}\n", kind, batch, ctx, measured,
                   floor.time_ms, ratio, floor.weight_bytes / 1e6, floor.kv_bytes / 1e6, floor.dominant_term());
        nlohmann::json row = {{"attention", kind}, {"batch", batch}, {"context_tokens", ctx},
                              {"mean_context_tokens", m.mean_context_tokens}, {"runnable", runnable},
                              {"predicted_floor_ms", floor.time_ms}, {"predicted_memory_ms", floor.memory_ms},
                              {"predicted_compute_ms", floor.compute_ms}, {"weight_bytes", floor.weight_bytes},
                              {"kv_bytes", floor.kv_bytes}, {"flops", floor.flops},
                              {"dominant_term", floor.dominant_term()}};
        if (runnable && !measured_here) row["not_measured"] = "the KV cache does not fit in device memory";
        if (measured_here) {
          row["measured_tpot_ms"] = m.tpot_ms;
          row["measured_over_floor"] = m.tpot_ms / floor.time_ms;
          row["achieved_bandwidth_gb_per_s"] = floor.bytes() / (m.tpot_ms / 1e3) / 1e9;
        }
        rows.push_back(row);
        std::fflush(stdout);
      }
  }
  const nlohmann::json out = {
      {"machine", machine_json}, {"device", a.device},
      {"backbone", from_checkpoint ? a.model_dir : backbone.name},
      {"weight_dtype", from_checkpoint ? std::string(dtype_name(backbone.weight_dtype)) : "bf16"}, {"kv_cache_dtype", cpu::kv_cache_dtype_name(kv_dtype)}, {"fill", a.fill},
      {"steps", a.steps}, {"warmup", a.warmup}, {"block_size_tokens", a.block_size}, {"rows", rows}};
  std::ofstream(a.json_path) << out.dump(2) << "\n";
  if (!a.plot.empty()) write_plot(rows, a.plot, machine);
  fmt::print("\nratio = measured / floor; floor = max(bytes / measured {}, FLOPs / measured {})\n",
             on_gpu ? "read roof" : "bandwidth", on_gpu ? "bf16 GEMM rate" : "sgemm rate");
  fmt::print("wrote {}\n", a.json_path);
  return 0;
}

}  // namespace

Command add_bench_command(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  auto* cmd = app.add_subcommand("bench", "benchmarks that print measured figures next to the performance model");
  cmd->require_subcommand(1);
  auto* decode = cmd->add_subcommand("decode", "measured decode TPOT per attention kind vs the predicted floor (cpu or cuda)");
  auto* synthetic = decode->add_option("--synthetic", a->synthetic, "preset backbone built with random bf16 weights (default tiny-bench)");
  auto* attention = decode->add_option("--attention", a->attention, "comma-separated: mha, gqaN, mqa, mla (mla: a dense DeepSeek-V2 layout of the backbone; CPU only)");
  decode->add_option("--model", a->model_dir, "a Hugging Face checkpoint folder instead: its own weights and attention")
      ->excludes(synthetic)
      ->excludes(attention);
  decode->add_option("--batch", a->batch, "comma-separated batch sizes");
  decode->add_option("--context", a->context, "comma-separated context lengths (tokens cached per sequence)");
  decode->add_option("--steps", a->steps, "timed decode steps per point");
  decode->add_option("--warmup", a->warmup, "untimed decode steps before them");
  decode->add_option("--fill", a->fill, "how the context gets into the cache: random (default) or prefill");
  decode->add_option("--prefill-chunk", a->prefill_chunk, "tokens per prefill step with --fill prefill");
  decode->add_option("--block-size", a->block_size, "KV block size in tokens: 16, 32, 64, 128");
  decode->add_option("--threads", a->threads, "CPU threads (0 = all cores)");
  decode->add_option("--json", a->json_path, "where to write the results");
  decode->add_option("--device", a->device, "cpu (default) or cuda");
  decode->add_option("--plot", a->plot, "also plot measured vs floor to this PNG (gnuplot)");
  decode->add_option("--kv-cache-dtype", a->kv_cache_dtype, "cpu: f32 (auto), bf16 or fp8_e4m3; cuda: bf16 (auto) or fp8_e4m3 (FP8: per-head scales)");
  decode->add_option("--gpu-memory-utilization", a->gpu_memory_utilization, "cuda: share of GPU memory for weights + activations + KV");
  return {decode, [a] { return run_bench_decode(*a); }};
}

}  // namespace latentserve::cli
