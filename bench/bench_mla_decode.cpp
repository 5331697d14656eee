// One MLA layer's attention on the CPU at DeepSeek-V3 dimensions (128 heads, kv_lora_rank 512,
// qk_nope 128, qk_rope 64, v 128; kv_b_proj bf16, latent cache f32): the decode step time of the
// naive path (materialise K and V for the whole context) and the absorbed path (attend in latent
// space) at contexts 512 .. 32K, the bytes each step reads and the GB/s that is next to this
// machine's measured read bandwidth; which path is faster for a prefill of 16 .. 2048 tokens
// (one sequence) and where they cross; and the KV bytes per token of MLA against the same
// backbone as MHA / GQA-8 / MQA. A benchmark: prints a table, writes JSON, asserts nothing.
//
// What is timed is MlaAttention::forward (kv_b_proj's absorption included; q_proj, kv_a_proj,
// RoPE and o_proj, which both paths share and which do not depend on the context, are not).
//
//   bench_mla_decode [--threads N] [--json FILE] [--naive-max-context 4096] [--max-context 32768]
//                    [--max-prefill 2048] [--budget-s 2]
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <vector>

#include "attention/attention_spec.h"
#include "attention/mla_attention.h"
#include "attention/mla_verify.h"
#include "core/bf16.h"
#include "perf/machine_probe.h"
#include "bench_args.h"

using namespace latentserve;

namespace {

using Clock = std::chrono::steady_clock;

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown CPU";
}

// Deterministic values in [-1, 1).
void fill(float* x, size_t n, uint64_t seed) {
  uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
  for (size_t i = 0; i < n; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x[i] = float(int32_t(s >> 32)) * 0x1.0p-31f;
  }
}

// One sequence whose last n_new of seq_len tokens are this step's queries, blocks in order.
AttentionMetadata one_sequence(int64_t seq_len, int64_t n_new, int64_t block_size) {
  AttentionMetadata m;
  m.block_size_tokens = block_size;
  m.max_blocks_per_seq = (seq_len + block_size - 1) / block_size;
  m.block_tables.resize(size_t(m.max_blocks_per_seq));
  std::iota(m.block_tables.begin(), m.block_tables.end(), 0);
  m.query_start_loc = {0, int32_t(n_new)};
  m.seq_lens = {int32_t(seq_len)};
  for (int64_t p = seq_len - n_new; p < seq_len; ++p) m.slot_mapping.push_back(p);
  return m;
}

struct Timing {
  double median_ms = 0;      // wall time
  double median_cpu_ms = 0;  // process CPU time (all threads): less sensitive to other load on the machine
  int reps = 0;
};

double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return a + " " + b + " " + c;
}

// Median of timed runs until `budget_s` has passed (at least min_reps, at most max_reps).
template <typename Fn>
Timing time_runs(Fn&& fn, double budget_s, int min_reps, int max_reps) {
  std::vector<double> t, cpu;
  auto once = [&] {
    const auto t0 = Clock::now();
    const double c0 = process_cpu_seconds();
    fn();
    cpu.push_back(process_cpu_seconds() - c0);
    t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    return t.back();
  };
  // Warm-up: a run under 2 s is repeated (untimed) until two in a row agree within 25% (oneDNN
  // creates its primitives and scratch on the first calls of a shape), at most 4 times. A longer
  // first run is measured as it is: the one-time cost is small beside it.
  double prev = once(), spent = 0;
  if (prev < 2.0) {
    for (int w = 0; w < 4; ++w) {
      const double cur = once();
      const bool stable = cur < 1.25 * prev && prev < 1.25 * cur;
      prev = cur;
      if (stable) break;
    }
    t.clear();
    cpu.clear();
  } else {
    spent = prev;
  }
  while ((int(t.size()) < min_reps || spent < budget_s) && int(t.size()) < max_reps) spent += once();
  std::sort(t.begin(), t.end());
  std::sort(cpu.begin(), cpu.end());
  return {t[t.size() / 2] * 1e3, cpu[cpu.size() / 2] * 1e3, int(t.size())};
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 0;
  std::string json_path = "bench_mla_decode.json";
  int64_t naive_max_context = 4096, max_context = 32768, max_prefill = 2048;
  double budget_s = 2.0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--threads") threads = int(bench::int_arg(flag, argv[i + 1]));
    else if (flag == "--json") json_path = argv[i + 1];
    else if (flag == "--naive-max-context") naive_max_context = bench::int_arg(flag, argv[i + 1], 1);
    else if (flag == "--max-context") max_context = bench::int_arg(flag, argv[i + 1], 1);
    else if (flag == "--max-prefill") max_prefill = bench::int_arg(flag, argv[i + 1], 1);
    else if (flag == "--budget-s") budget_s = bench::double_arg(flag, argv[i + 1], 0.01, 3600);
    else { fmt::print(stderr, "unknown flag {}\n", flag); return 2; }
  }
  const auto bench_start = Clock::now();
  ThreadPool pool(threads);
  const ModelConfig v3 = ModelConfig::from_json(deepseek_v3_config_json(), "DeepSeek-V3 config");
  const MlaShape s = deepseek_v3_mla_shape();
  const int64_t nh = s.n_head, r = s.kv_lora_rank, dn = s.qk_nope_head_dim, dr = s.qk_rope_head_dim,
                dv = s.v_head_dim, dq = s.qk_head_dim(), row = s.latent_row(), block = 64;
  const std::string cpu = cpu_model_name();
  fmt::print("latentserve bench: one MLA layer, DeepSeek-V3 attention dims (n_h {}, d_c {}, d_nope {}, d_R {}, d_v {})\n",
             nh, r, dn, dr, dv);
  fmt::print("  CPU {}, {} threads; kv_b_proj bf16, latent cache f32 ({} B/token), block size {}\n", cpu,
             pool.n_threads(), row * 4, block);
  const std::string load_before = load_average();
  const double read_gb_s = measure_read_bandwidth_gb_per_s(pool);
  fmt::print("  measured read bandwidth {:.2f} GB/s; load average at start {}\n", read_gb_s, load_before);
  const char* omp_wait = std::getenv("OMP_WAIT_POLICY");
  const std::string omp_wait_policy = omp_wait ? omp_wait : "unset";
  fmt::print("  OMP_WAIT_POLICY {} (oneDNN's OpenMP team; see docs/mla.md)\n", omp_wait_policy);
  fmt::print("  (times are wall-clock medians; 'cpu' is the process CPU time per run, all threads)\n\n");

  // kv_b_proj [nh (dn + dv), r] in bf16, values ~ U(-1/sqrt(r), 1/sqrt(r)).
  std::vector<uint16_t> kv_b(size_t(nh * (dn + dv) * r));
  {
    std::vector<float> tmp(kv_b.size());
    fill(tmp.data(), tmp.size(), 1);
    for (size_t i = 0; i < kv_b.size(); ++i) kv_b[i] = bf16::from_f32(tmp[i] / std::sqrt(float(r))).bits;
  }
  const TensorView kv_b_view = TensorView::contiguous(kv_b.data(), DType::BF16, {nh * (dn + dv), r});
  MlaAttention mla(s, kv_b_view, float(v3.softmax_scale));

  std::vector<int64_t> contexts;
  for (int64_t L = 512; L <= max_context; L *= 2) contexts.push_back(L);
  const int64_t max_len = std::max(max_context, max_prefill);
  std::vector<float> latent(size_t((max_len + block) * row));
  fill(latent.data(), latent.size(), 2);
  std::vector<float> q(size_t(max_prefill * nh * dq)), out(size_t(max_prefill * nh * dv));
  fill(q.data(), q.size(), 3);

  // Bytes a decode step reads. Both: the latent rows (c_kv | k_pe) of the context.
  // absorbed: + W_UKᵀ (f32, made at load) + W_UV (bf16) once per step;
  // naive: + kv_b_proj (bf16), and it writes then reads K [L, nh, dq] and V [L, nh, dv] in f32
  //        plus the intermediate [L, nh (dn + dv)] (counted as "materialised").
  const double w_uk_bytes = double(nh * r * dn) * 4, w_uv_bytes = double(nh * dv * r) * 2, kv_b_bytes = double(kv_b.size()) * 2;
  auto flops_absorbed = [&](double T, double ctx_sum) {  // ctx_sum: Σ over queries of their context length
    return 2.0 * T * double(nh * dn * r) * 2 + 2.0 * double(nh) * ctx_sum * double(row + r);
  };
  auto flops_naive = [&](double L, double ctx_sum) {
    return 2.0 * L * double(r) * double(nh * (dn + dv)) + 2.0 * double(nh) * ctx_sum * double(dq + dv);
  };

  // ---- decode ----
  fmt::print("decode, batch 1: one query over L cached tokens (median step time)\n");
  fmt::print("  {:>6} | {:>11} {:>8} {:>10} {:>7} {:>7} {:>7} | {:>10} {:>8} {:>11} {:>7} {:>7} | {:>7}\n", "L",
             "absorbed ms", "cpu ms", "latent MB", "GB/s", "%bw", "GFLOP/s", "naive ms", "cpu ms", "materialise",
             "GFLOP/s", "reps", "speedup");
  // The naive path's scratch (K, V and kv for L tokens) only grows: one untimed run at the largest
  // naive context takes its first-touch page faults (seconds per GB on this VM) out of the table.
  if (naive_max_context >= contexts.front()) {
    const int64_t L = std::min(naive_max_context, contexts.back());
    mla.forward(MlaPath::Naive, q.data(), one_sequence(L, 1, block), latent.data(), out.data(), pool);
  }
  nlohmann::json decode_rows = nlohmann::json::array();
  double last_naive_ms = 0;
  int64_t last_naive_L = 0;
  for (int64_t L : contexts) {
    const AttentionMetadata meta = one_sequence(L, 1, block);
    const double latent_bytes = double(L) * double(row) * 4;
    const Timing ab = time_runs([&] { mla.forward(MlaPath::Absorbed, q.data(), meta, latent.data(), out.data(), pool); },
                                budget_s / 2, 3, 50);
    const double ab_bytes = latent_bytes + w_uk_bytes + w_uv_bytes;
    const double ab_gb_s = ab_bytes / (ab.median_ms * 1e-3) / 1e9;
    const double ab_gflop_s = flops_absorbed(1, double(L)) / (ab.median_ms * 1e-3) / 1e9;
    nlohmann::json jr = {{"context_tokens", L}, {"latent_bytes_read", latent_bytes},
                         {"absorbed", {{"ms", ab.median_ms}, {"cpu_ms", ab.median_cpu_ms}, {"reps", ab.reps},
                                       {"bytes_read", ab_bytes},
                                       {"gb_s", ab_gb_s}, {"fraction_of_bandwidth", ab_gb_s / read_gb_s},
                                       {"latent_gb_s", latent_bytes / (ab.median_ms * 1e-3) / 1e9},
                                       {"flops", flops_absorbed(1, double(L))}, {"gflop_s", ab_gflop_s}}}};
    const double materialised = double(L) * double(nh) * double((dn + dv) + dq + dv) * 4 * 2;  // written + read
    std::string naive_text;
    if (L <= naive_max_context) {
      const Timing nv = time_runs([&] { mla.forward(MlaPath::Naive, q.data(), meta, latent.data(), out.data(), pool); },
                                  budget_s / 2, 1, 5);
      const double nv_gflop_s = flops_naive(double(L), double(L)) / (nv.median_ms * 1e-3) / 1e9;
      jr["naive"] = {{"ms", nv.median_ms}, {"cpu_ms", nv.median_cpu_ms}, {"reps", nv.reps},
                     {"bytes_read", latent_bytes + kv_b_bytes},
                     {"materialised_bytes", materialised}, {"flops", flops_naive(double(L), double(L))},
                     {"gflop_s", nv_gflop_s}};
      jr["naive_over_absorbed"] = nv.median_ms / ab.median_ms;
      last_naive_ms = nv.median_ms;
      last_naive_L = L;
      naive_text = fmt::format("{:>10.1f} {:>8.1f} {:>9.0f}MB {:>7.1f} {:>7} | {:>6.1f}x", nv.median_ms,
                               nv.median_cpu_ms, materialised / 1e6, nv_gflop_s, nv.reps, nv.median_ms / ab.median_ms);
    } else {
      jr["naive"] = nullptr;
      // Linear in L (the materialisation dominates): an estimate from the largest measured context.
      const std::string est = last_naive_ms > 0 ? fmt::format("~{:.0f}", last_naive_ms * double(L) / double(last_naive_L)) : "";
      if (last_naive_ms > 0) jr["naive_estimated_ms"] = last_naive_ms * double(L) / double(last_naive_L);
      naive_text = fmt::format("{:>10} {:>8} {:>9.0f}MB {:>7} {:>7} | {:>7}", est + " est", "", materialised / 1e6, "",
                               "skipped", "");
    }
    fmt::print("  {:>6} | {:>11.2f} {:>8.2f} {:>10.1f} {:>7.2f} {:>6.1f}% {:>7.1f} | {}\n", L, ab.median_ms,
               ab.median_cpu_ms, latent_bytes / 1e6, ab_gb_s, 100 * ab_gb_s / read_gb_s, ab_gflop_s, naive_text);
    decode_rows.push_back(jr);
  }
  if (naive_max_context < contexts.back())
    fmt::print("  naive not run above L = {} (--naive-max-context): it materialises K and V for the whole context\n"
               "  every step (the 'materialise' column: bytes written then read; L x 33.5 MFLOP); 'est' scales the\n"
               "  largest measured step linearly in L.\n",
               naive_max_context);
  fmt::print("  absorbed bytes = latent + W_UK^T (f32, {:.1f} MB) + W_UV (bf16, {:.1f} MB) per step;\n"
             "  the weights dominate below ~{}K tokens at batch 1.\n\n",
             w_uk_bytes / 1e6, w_uv_bytes / 1e6, int64_t((w_uk_bytes + w_uv_bytes) / (double(row) * 4) / 1024));

  // ---- prefill ----
  // Longest first: the scratch buffers of MlaAttention only grow, so the first (largest) run takes
  // the first-touch page faults of every later one; shorter runs are warmed up (time_runs).
  fmt::print("prefill: one sequence of T tokens, causal (median time; measured longest first)\n");
  struct PrefillRow {
    int64_t T;
    Timing ab, nv;
  };
  std::vector<PrefillRow> prefill;
  for (int64_t T = 16; T <= max_prefill; T *= 2) prefill.push_back({T, {}, {}});
  for (auto it = prefill.rbegin(); it != prefill.rend(); ++it) {
    const AttentionMetadata meta = one_sequence(it->T, it->T, block);
    it->ab = time_runs([&] { mla.forward(MlaPath::Absorbed, q.data(), meta, latent.data(), out.data(), pool); },
                       budget_s / 2, 1, 20);
    it->nv = time_runs([&] { mla.forward(MlaPath::Naive, q.data(), meta, latent.data(), out.data(), pool); },
                       budget_s / 2, 1, 20);
  }
  fmt::print("  {:>6} | {:>11} {:>9} {:>8} | {:>11} {:>9} {:>8} | {:>14}\n", "T", "absorbed ms", "cpu ms", "GFLOP/s",
             "naive ms", "cpu ms", "GFLOP/s", "naive/absorbed");
  nlohmann::json prefill_rows = nlohmann::json::array();
  for (const auto& row : prefill) {
    const double T = double(row.T), ctx_sum = T * (T + 1) / 2;
    const double fa = flops_absorbed(T, ctx_sum) / (row.ab.median_ms * 1e-3) / 1e9;
    const double fn = flops_naive(T, ctx_sum) / (row.nv.median_ms * 1e-3) / 1e9;
    const double ratio = row.nv.median_ms / row.ab.median_ms;  // > 1: absorbed faster
    const char* verdict = ratio > 1.2 ? "absorbed" : ratio < 1 / 1.2 ? "naive" : "~tie";
    fmt::print("  {:>6} | {:>11.2f} {:>9.2f} {:>8.1f} | {:>11.2f} {:>9.2f} {:>8.1f} | {:>5.2f} {:>8}\n", row.T,
               row.ab.median_ms, row.ab.median_cpu_ms, fa, row.nv.median_ms, row.nv.median_cpu_ms, fn, ratio, verdict);
    prefill_rows.push_back({{"tokens", row.T}, {"absorbed_ms", row.ab.median_ms},
                            {"absorbed_cpu_ms", row.ab.median_cpu_ms}, {"absorbed_reps", row.ab.reps},
                            {"absorbed_gflop_s", fa}, {"naive_ms", row.nv.median_ms},
                            {"naive_cpu_ms", row.nv.median_cpu_ms}, {"naive_reps", row.nv.reps}, {"naive_gflop_s", fn},
                            {"naive_over_absorbed", ratio}, {"faster", ratio > 1 ? "absorbed" : "naive"}});
  }
  // Crossover: the first length from which absorbed stays faster to the end of the sweep (or
  // naive, whichever wins at the longest), and where the time ratio crosses 1 between that
  // length and the one before it (interpolated in log T, log ratio).
  std::string crossover;
  nlohmann::json crossover_json;
  {
    auto ratio = [&](size_t i) { return prefill[i].nv.median_ms / prefill[i].ab.median_ms; };
    const bool last_abs = ratio(prefill.size() - 1) > 1;
    size_t i = prefill.size();
    while (i > 0 && (ratio(i - 1) > 1) == last_abs) --i;
    const char* tail = last_abs ? "absorbed" : "naive";
    const char* head = last_abs ? "naive" : "absorbed";
    if (i == 0) {
      crossover = fmt::format("{} is faster at every length measured ({}..{})", tail, prefill.front().T,
                              prefill.back().T);
      crossover_json = {{"faster_everywhere", tail}};
    } else {
      const double la = std::log(double(prefill[i - 1].T)), lb = std::log(double(prefill[i].T));
      const double ra = std::log(ratio(i - 1)), rb = std::log(ratio(i));
      const double t_star = std::exp(la + (lb - la) * (0 - ra) / (rb - ra));
      crossover = fmt::format("{} faster up to T = {}, {} faster from T = {} on (ratio 1 at T ~ {:.0f})", head,
                              prefill[i - 1].T, tail, prefill[i].T, t_star);
      crossover_json = {{"below", head}, {"from_tokens", prefill[i].T}, {"from", tail},
                        {"interpolated_tokens", t_star}};
    }
    fmt::print("  crossover: {}\n  (naive/absorbed > 1.2: absorbed clearly faster; < 1/1.2: naive; between: a tie "
               "within this machine's noise)\n\n",
               crossover);
  }

  // ---- KV bytes per token: the same backbone as MHA / GQA-8 / MQA ----
  const KvFootprintResult fp = check_kv_footprint(s, 32768);
  fmt::print("KV cache per token, DeepSeek-V3 backbone (n_h {}, K {} + V {} per head for the standard kinds), bf16\n",
             nh, dn, dv);
  fmt::print("  {:<6} {:>14} {:>20} {:>22}\n", "kind", "B/token/layer", "B/token (61 layers)", "GiB per 32K sequence");
  nlohmann::json kv_rows = nlohmann::json::array();
  for (const auto& k : fp.rows) {
    const double all_layers = double(k.bytes_per_token) * double(v3.n_layer);
    fmt::print("  {:<6} {:>14} {:>20.0f} {:>22.2f}\n", k.name, k.bytes_per_token, all_layers,
               all_layers * 32768 / double(1ull << 30));
    kv_rows.push_back({{"kind", k.name}, {"bytes_per_token_per_layer", k.bytes_per_token},
                       {"bytes_per_token_all_layers", all_layers}, {"n_layer", v3.n_layer}});
  }
  fmt::print("  MLA saves {:.2f}% vs MHA, {:.2f}% vs GQA-8 (and is {:.2f}x MQA)\n", fp.saving_vs_mha_percent,
             *fp.saving_vs_gqa8_percent, double(fp.rows[3].bytes_per_token) / double(fp.rows[2].bytes_per_token));

  const double total_s = std::chrono::duration<double>(Clock::now() - bench_start).count();
  nlohmann::json j = {{"bench", "mla_decode"}, {"cpu", cpu}, {"threads", pool.n_threads()},
                      {"shape", {{"n_head", nh}, {"kv_lora_rank", r}, {"qk_nope_head_dim", dn},
                                 {"qk_rope_head_dim", dr}, {"v_head_dim", dv}}},
                      {"kv_b_proj_dtype", "bf16"}, {"latent_cache_dtype", "f32"}, {"block_size", block},
                      {"read_bandwidth_gb_s", read_gb_s}, {"decode", decode_rows}, {"prefill", prefill_rows},
                      {"prefill_crossover", crossover_json}, {"prefill_crossover_text", crossover},
                      {"kv_bytes_per_token", kv_rows}, {"seconds", total_s},
                      {"load_average_start", load_before}, {"omp_wait_policy", omp_wait_policy}, {"load_average_end", load_average()}};
  std::ofstream(json_path) << j.dump(2) << "\n";
  fmt::print("\n  wrote {} ({:.0f} s; load average at the end {})\n", json_path, total_s, load_average());
  return 0;
}
