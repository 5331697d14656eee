// What an FP8 (or bf16) KV cache costs in accuracy, per scale granularity, on a standard
// (GQA) and an MLA fixture, and what dequantising inside the attention kernel costs in time.
// A benchmark: it prints figures and writes JSON; the one assertion is a sanity bound (no
// NaN logit, mean |Δ logit| vs f32 under 0.25 for every format; exit status 1 otherwise).
//
// Accuracy, per fixture and KV format, over the fixture's prompts each followed by the f32
// engine's own 64-token greedy continuation (teacher forced, so every format sees the same
// tokens at every position):
//   max / mean |Δ logit| vs the f32 cache and vs the bf16 cache, over every position, and the
//   median over positions of each position's max |Δ| (a typical position, as max is the worst);
//   argmax agreement with the f32 cache at the 64 generated positions (teacher forced);
//   free-running greedy: generated tokens equal to the f32 cache's before the first difference.
// Granularity: synthetic K/V where the scale granularity matters (outlier heads, late outliers).
// Kernel: paged decode attention over a long context, f32 / bf16 / fp8 caches.
//
//   bench_kv_fp8 [--fixtures DIR] [--threads N] [--json FILE]
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <string>

#include "backend/cpu/cpu_kv_cache.h"
#include "backend/cpu/paged_attention.h"
#include "model/architectures.h"
#include "bench_args.h"

using namespace latentserve;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kGenerated = 64;

struct Format {
  std::string name;
  cpu::KvCacheOptions kv;
  MlaPath mla_path = MlaPath::Absorbed;
};

std::vector<Format> formats(bool mla) {
  std::vector<Format> f = {{"f32", {}}, {"bf16", {DType::BF16}}};
  for (auto g :
       {cpu::KvScaleGranularity::PerTensor, cpu::KvScaleGranularity::PerHead, cpu::KvScaleGranularity::PerBlock})
    for (bool rope_bf16 : mla ? std::vector<bool>{true, false} : std::vector<bool>{true}) {
      cpu::KvCacheOptions o;
      o.dtype = DType::F8_E4M3;
      o.scale = g;
      o.mla_rope_bf16 = rope_bf16;
      f.push_back({"fp8 " + std::string(cpu::kv_scale_granularity_name(g)) +
                       (mla ? (rope_bf16 ? " rope-bf16" : " rope-fp8") : ""),
                   o});
    }
  if (mla) {
    Format naive = f.back();
    naive.kv.mla_rope_bf16 = true;
    naive.name = "fp8 per-block rope-bf16 naive";
    naive.mla_path = MlaPath::Naive;
    f.push_back(naive);
  }
  return f;
}

// One sequence through a model step by step: the prompt in one prefill step, then one token per
// step. forward() returns the logits of every new token.
class SequenceRunner {
 public:
  SequenceRunner(CausalLM& model, const cpu::KvCacheOptions& kv, int64_t max_tokens)
      : model_(model),
        block_size_(model.attention_spec().kind == AttentionKind::MLA ? 64 : 16),
        n_blocks_((max_tokens + block_size_ - 1) / block_size_),
        cache_(model.attention_spec(), model.n_layer(), n_blocks_, block_size_, kv) {
    // blocks in a shuffled order, as a pool would hand them out
    table_.resize(size_t(n_blocks_));
    std::iota(table_.begin(), table_.end(), 0);
    std::shuffle(table_.begin(), table_.end(), std::mt19937(42));
  }

  // [tokens.size(), vocab]
  std::vector<float> forward(const std::vector<int32_t>& tokens, int64_t prompt_len) {
    ForwardBatch b;
    const int64_t n = int64_t(tokens.size());
    b.token_ids = tokens;
    b.attention.block_size_tokens = block_size_;
    b.attention.query_start_loc = {0, int32_t(n)};
    b.attention.seq_lens = {int32_t(len_ + n)};
    b.attention.block_tables = table_;
    b.attention.max_blocks_per_seq = n_blocks_;
    b.prompt_lens = {int32_t(prompt_len)};
    for (int64_t i = 0; i < n; ++i) {
      const int64_t pos = len_ + i;
      b.positions.push_back(int32_t(pos));
      b.attention.slot_mapping.push_back(int64_t(table_[size_t(pos / block_size_)]) * block_size_ + pos % block_size_);
      b.logits_indices.push_back(int32_t(i));
    }
    std::vector<float> logits(size_t(n * model_.vocab_size()));
    model_.forward(b, cache_, logits.data());
    len_ += n;
    return logits;
  }

  const cpu::CpuKvCache& cache() const { return cache_; }

 private:
  CausalLM& model_;
  int64_t block_size_, n_blocks_, len_ = 0;
  cpu::CpuKvCache cache_;
  std::vector<int32_t> table_;
};

int32_t argmax(const float* x, int64_t n) { return int32_t(std::max_element(x, x + n) - x); }

struct PromptRun {
  std::vector<float> logits;      // teacher forced: [prompt + kGenerated, vocab]
  std::vector<int32_t> argmaxes;  // teacher forced argmax at the generated positions' inputs
  std::vector<int32_t> greedy;    // free running: kGenerated tokens
  cpu::KvQuantStats stats;
  double bytes_per_token = 0;
};

// Teacher forcing feeds `forced` (the f32 greedy continuation; empty: this run is the f32 one,
// which feeds its own argmax and so is its own greedy run).
PromptRun run_prompt(CausalLM& model, const cpu::KvCacheOptions& kv, const std::vector<int32_t>& prompt,
                     const std::vector<int32_t>& forced) {
  const int64_t vocab = model.vocab_size(), P = int64_t(prompt.size());
  PromptRun r;
  {
    SequenceRunner seq(model, kv, P + kGenerated);
    r.logits = seq.forward(prompt, P);
    int32_t next = argmax(&r.logits[size_t((P - 1) * vocab)], vocab);
    for (int64_t i = 0; i < kGenerated; ++i) {
      r.argmaxes.push_back(next);
      const int32_t feed = forced.empty() ? next : forced[size_t(i)];
      if (i + 1 == kGenerated) break;
      const std::vector<float> l = seq.forward({feed}, P);
      r.logits.insert(r.logits.end(), l.begin(), l.end());
      next = argmax(l.data(), vocab);
    }
    r.stats = seq.cache().stats();
    r.bytes_per_token = seq.cache().bytes_per_token();
  }
  if (forced.empty()) {
    r.greedy = r.argmaxes;
    return r;
  }
  SequenceRunner seq(model, kv, P + kGenerated);
  std::vector<float> l = seq.forward(prompt, P);
  int32_t next = argmax(&l[size_t((P - 1) * vocab)], vocab);
  for (int64_t i = 0; i < kGenerated; ++i) {
    r.greedy.push_back(next);
    if (i + 1 == kGenerated) break;
    l = seq.forward({next}, P);
    next = argmax(l.data(), vocab);
  }
  return r;
}

struct Row {
  std::string name;
  double max_vs_f32 = 0, sum_vs_f32 = 0, max_vs_bf16 = 0, sum_vs_bf16 = 0;
  std::vector<double> position_max_vs_f32;  // per position: max over the vocab of |Δ| vs f32
  int64_t n_logits = 0, argmax_agree = 0, argmax_total = 0, greedy_prefix = 0, greedy_total = 0;
  int64_t saturated = 0, rescaled = 0;
  double bytes_per_token = 0;
  bool nan = false;
};

nlohmann::json accuracy(const fs::path& dir, ThreadPool& pool, std::vector<Row>* rows_out) {
  std::ifstream in(dir / "reference.json");
  const auto prompts = nlohmann::json::parse(in).at("prompts").get<std::vector<std::vector<int32_t>>>();
  auto model = load_causal_lm(dir, pool);
  const bool mla = model->attention_spec().kind == AttentionKind::MLA;
  std::unique_ptr<CausalLM> naive_model;
  if (mla) {
    ModelOptions o;
    o.mla_path = MlaPath::Naive;
    naive_model = load_causal_lm(dir, pool, o);
  }
  const int64_t vocab = model->vocab_size();
  std::vector<PromptRun> f32_runs, bf16_runs;
  for (const auto& p : prompts) f32_runs.push_back(run_prompt(*model, {}, p, {}));
  for (size_t i = 0; i < prompts.size(); ++i)
    bf16_runs.push_back(run_prompt(*model, {DType::BF16}, prompts[i], f32_runs[i].greedy));

  std::vector<Row> rows;
  for (const Format& f : formats(mla)) {
    CausalLM& m = f.mla_path == MlaPath::Naive ? *naive_model : *model;
    Row row;
    row.name = f.name;
    for (size_t i = 0; i < prompts.size(); ++i) {
      const PromptRun r = f.kv.dtype == DType::F32 && f.mla_path == MlaPath::Absorbed ? f32_runs[i]
                          : f.kv.dtype == DType::BF16                                 ? bf16_runs[i]
                                                      : run_prompt(m, f.kv, prompts[i], f32_runs[i].greedy);
      const PromptRun& ref = f32_runs[i];
      for (size_t j = 0; j < r.logits.size(); ++j) {
        if (j % size_t(vocab) == 0) row.position_max_vs_f32.push_back(0.0);
        row.nan |= !std::isfinite(r.logits[j]);
        const double d32 = std::fabs(double(r.logits[j]) - ref.logits[j]),
                     d16 = std::fabs(double(r.logits[j]) - bf16_runs[i].logits[j]);
        row.position_max_vs_f32.back() = std::max(row.position_max_vs_f32.back(), d32);
        row.max_vs_f32 = std::max(row.max_vs_f32, d32);
        row.sum_vs_f32 += d32;
        row.max_vs_bf16 = std::max(row.max_vs_bf16, d16);
        row.sum_vs_bf16 += d16;
      }
      row.n_logits += int64_t(r.logits.size());
      for (int64_t g = 0; g < kGenerated; ++g) row.argmax_agree += r.argmaxes[size_t(g)] == ref.greedy[size_t(g)];
      row.argmax_total += kGenerated;
      int64_t prefix = 0;
      while (prefix < kGenerated && r.greedy[size_t(prefix)] == ref.greedy[size_t(prefix)]) ++prefix;
      row.greedy_prefix += prefix;
      row.greedy_total += kGenerated;
      row.saturated += r.stats.saturated_elements;
      row.rescaled += r.stats.rescaled_block_groups;
      row.bytes_per_token = r.bytes_per_token;
    }
    rows.push_back(row);
  }

  const auto& c = model->config();
  std::string lens;
  for (const auto& p : prompts) lens += (lens.empty() ? "" : "/") + std::to_string(p.size());
  fmt::print("\n{} ({}, {} layers, {}): {} prompts of {} tokens, each + {} generated; block size {}\n",
             dir.filename().string(), attention_kind_name(model->attention_spec().kind), c.n_layer,
             mla ? fmt::format("kv_lora_rank {}, rope {}", c.mla->kv_lora_rank, c.mla->qk_rope_head_dim)
                 : fmt::format("{} KV heads x {}", c.n_head_kv, c.head_dim),
             prompts.size(), lens, kGenerated, mla ? 64 : 16);
  fmt::print("  {:<30} {:>7} {:>9} {:>9} {:>7} {:>9} {:>9} {:>9} {:>11} {:>13} {:>9} {:>8}\n", "KV format", "B/token",
             "max|Δ|", "p50 max", "pos>0.5", "mean|Δ|", "max|Δ|", "mean|Δ|", "argmax (TF)", "greedy prefix",
             "saturated", "rescaled");
  fmt::print("  {:<30} {:>7} {:>37} {:>19}\n", "", "", "-------------- vs f32 --------------", "---- vs bf16 ----");
  nlohmann::json j = nlohmann::json::array();
  for (Row& r : rows) {
    std::vector<double> sorted = r.position_max_vs_f32;
    std::sort(sorted.begin(), sorted.end());
    const double p50 = sorted[sorted.size() / 2];
    const int64_t over = std::count_if(sorted.begin(), sorted.end(), [](double x) { return x > 0.5; });
    fmt::print(
        "  {:<30} {:>7.1f} {:>9.2e} {:>9.2e} {:>3}/{:<3} {:>9.2e} {:>9.2e} {:>9.2e} {:>5}/{:<5} {:>6}/{:<6} {:>9} "
        "{:>8}{}\n",
        r.name, r.bytes_per_token, r.max_vs_f32, p50, over, sorted.size(), r.sum_vs_f32 / double(r.n_logits),
        r.max_vs_bf16, r.sum_vs_bf16 / double(r.n_logits), r.argmax_agree, r.argmax_total, r.greedy_prefix,
        r.greedy_total, r.saturated, r.rescaled, r.nan ? "  NaN!" : "");
    j.push_back({{"format", r.name},
                 {"bytes_per_token", r.bytes_per_token},
                 {"max_abs_vs_f32", r.max_vs_f32},
                 {"median_position_max_abs_vs_f32", p50},
                 {"positions_max_abs_over_0_5", over},
                 {"positions", sorted.size()},
                 {"mean_abs_vs_f32", r.sum_vs_f32 / double(r.n_logits)},
                 {"max_abs_vs_bf16", r.max_vs_bf16},
                 {"mean_abs_vs_bf16", r.sum_vs_bf16 / double(r.n_logits)},
                 {"argmax_agree", r.argmax_agree},
                 {"argmax_total", r.argmax_total},
                 {"greedy_prefix", r.greedy_prefix},
                 {"greedy_total", r.greedy_total},
                 {"saturated", r.saturated},
                 {"rescaled_block_groups", r.rescaled},
                 {"nan", r.nan}});
  }
  *rows_out = rows;
  return j;
}

// Where the scale granularity matters: attention outputs of an fp8 cache vs an f32 one on
// synthetic K/V with (a) no structure, (b) one V head 4096x the others (one scale for all heads
// pushes the small heads into e4m3's subnormals), (c) V rows after the first 64 tokens (the
// static calibration) 32x larger (static scales saturate, per-block grows). The worst head's
// RMS output error relative to its RMS output.
nlohmann::json granularity_stress(ThreadPool& pool) {
  const int64_t n_head = 8, n_head_kv = 4, hd = 64, bs = 16, ctx = 1024, n_query = 16, calib = 64;
  const AttentionSpec spec = AttentionSpec::standard(n_head, n_head_kv, hd, hd);
  const int64_t n_blocks = ctx / bs;
  std::vector<int64_t> slots(static_cast<size_t>(ctx));
  std::iota(slots.begin(), slots.end(), 0);
  std::vector<int32_t> table(static_cast<size_t>(n_blocks));
  std::iota(table.begin(), table.end(), 0);
  const int32_t qsl[2] = {0, int32_t(n_query)}, len = int32_t(ctx);
  const char* scenarios[] = {"N(0,1)", "V head 0 x4096", "late V x32"};
  fmt::print(
      "\nwhere granularity matters: paged attention, fp8 vs f32 cache, synthetic K/V ({} tokens, {} KV heads x {},"
      " first {} written first)\n  RMS output error / RMS output\n",
      ctx, n_head_kv, hd, calib);
  fmt::print("  {:<18}", "scenario");
  const std::vector<Format> fs_all = formats(false);
  for (const Format& f : fs_all)
    if (f.kv.dtype != DType::F32) fmt::print(" {:>15}", f.name);
  fmt::print("\n");
  nlohmann::json j;
  for (int sc = 0; sc < 3; ++sc) {
    std::mt19937 rng(uint32_t(100 + sc));
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> k(static_cast<size_t>(ctx * n_head_kv * hd)), v(k.size()),
        q(static_cast<size_t>(n_query * n_head * hd));
    for (auto& x : k) x = normal(rng);
    for (auto& x : v) x = normal(rng);
    for (auto& x : q) x = normal(rng);
    for (int64_t t = 0; t < ctx; ++t)
      for (int64_t i = 0; i < n_head_kv * hd; ++i) {
        if (sc == 1 && i < hd) v[size_t(t * n_head_kv * hd + i)] *= 4096.0f;
        if (sc == 2 && t >= calib) v[size_t(t * n_head_kv * hd + i)] *= 32.0f;
      }
    std::vector<float> reference;
    fmt::print("  {:<18}", scenarios[sc]);
    for (const Format& f : fs_all) {
      cpu::CpuKvCache cache(spec, 1, n_blocks, bs, f.kv);
      for (int64_t b = 0; b < ctx; b = b == 0 ? calib : b + bs) {  // the calibration batch, then a block at a time
        const int64_t n = b == 0 ? calib : bs;
        cache.write(0, &k[size_t(b * n_head_kv * hd)], n_head_kv * hd, &v[size_t(b * n_head_kv * hd)], n_head_kv * hd,
                    &slots[size_t(b)], n);
      }
      std::vector<float> out(static_cast<size_t>(n_query * n_head * hd));
      cpu::PagedAttentionParams p{};
      p.q = q.data();
      p.q_token_stride = n_head * hd;
      p.k_cache = cache.k_rows(0);
      p.v_cache = cache.v_rows(0);
      p.out = out.data();
      p.query_start_loc = qsl;
      p.seq_lens = &len;
      p.block_tables = table.data();
      p.n_seqs = 1;
      p.max_blocks_per_seq = n_blocks;
      p.block_size = bs;
      p.n_head = n_head;
      p.n_head_kv = n_head_kv;
      p.head_dim_qk = hd;
      p.head_dim_v = hd;
      p.softmax_scale = float(1.0 / std::sqrt(double(hd)));
      cpu::paged_attention(p, pool);
      if (f.kv.dtype == DType::F32) {
        reference = out;
        continue;
      }
      // per head, relative to that head's RMS output (so the small heads of (b) count)
      double worst = 0;
      for (int64_t h = 0; h < n_head; ++h) {
        double e2 = 0, r2 = 0;
        for (int64_t t = 0; t < n_query; ++t)
          for (int64_t d = 0; d < hd; ++d) {
            const size_t i = size_t((t * n_head + h) * hd + d);
            e2 += (double(out[i]) - reference[i]) * (double(out[i]) - reference[i]);
            r2 += double(reference[i]) * reference[i];
          }
        worst = std::max(worst, std::sqrt(e2 / r2));
      }
      fmt::print(" {:>15.2e}", worst);
      j[scenarios[sc]][f.name] = {{"worst_head_rms_rel_error", worst},
                                  {"saturated", cache.stats().saturated_elements},
                                  {"rescaled_block_groups", cache.stats().rescaled_block_groups}};
    }
    fmt::print("\n");
  }
  fmt::print("  (worst head's RMS error / its RMS output)\n");
  return j;
}

// Decode attention over a long context: n_seqs sequences of ctx tokens, one query token each.
// Standard: GQA, K and V rows per KV head. MLA: the absorbed path's MQA over the latent row
// (key = the whole row, value = its first kv_lora_rank elements, dequantised once for both).
nlohmann::json kernel_timing(ThreadPool& pool, bool mla) {
  const int64_t n_seqs = 4, ctx = 4096;
  const int64_t n_head = mla ? 16 : 32, n_head_kv = mla ? 1 : 8, bs = mla ? 64 : 16;
  const int64_t dk = mla ? 512 + 64 : 128, dv = mla ? 512 : 128;
  const int64_t n_blocks = n_seqs * ctx / bs;
  const AttentionSpec spec =
      mla ? AttentionSpec::latent(n_head, 512, 128, 64, 128) : AttentionSpec::standard(n_head, n_head_kv, dk, dv);
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> k(static_cast<size_t>(n_blocks * bs * n_head_kv * dk)),
      v(static_cast<size_t>(n_blocks * bs * n_head_kv * dv));
  std::vector<float> q(static_cast<size_t>(n_seqs * n_head * dk)), out(static_cast<size_t>(n_seqs * n_head * dv));
  for (auto& x : k) x = normal(rng);
  for (auto& x : v) x = normal(rng);
  for (auto& x : q) x = normal(rng);
  std::vector<int64_t> slots(static_cast<size_t>(n_blocks * bs));
  std::iota(slots.begin(), slots.end(), 0);
  std::vector<int32_t> tables(static_cast<size_t>(n_blocks)), qsl, lens;
  std::iota(tables.begin(), tables.end(), 0);
  for (int64_t s = 0; s <= n_seqs; ++s) qsl.push_back(int32_t(s));
  for (int64_t s = 0; s < n_seqs; ++s) lens.push_back(int32_t(ctx));

  if (mla)
    fmt::print(
        "\npaged decode attention, MLA absorbed: {} seqs x {} context, {} heads over a 512 + 64 latent, {} threads\n",
        n_seqs, ctx, n_head, pool.n_threads());
  else
    fmt::print("\npaged decode attention, GQA: {} seqs x {} context, {} heads / {} KV heads x {}, {} threads\n", n_seqs,
               ctx, n_head, n_head_kv, dk, pool.n_threads());
  fmt::print("  {:<24} {:>10} {:>12} {:>14}\n", "KV format", "ms/call", "KV MB read", "KV GB/s");
  nlohmann::json j = nlohmann::json::array();
  for (const Format& f : formats(mla)) {
    if (f.mla_path == MlaPath::Naive) continue;
    if (f.kv.dtype == DType::F8_E4M3 && f.kv.scale != cpu::KvScaleGranularity::PerBlock) continue;
    cpu::CpuKvCache cache(spec, 1, n_blocks, bs, f.kv);
    cache.write(0, k.data(), n_head_kv * dk, mla ? nullptr : v.data(), n_head_kv * dv, slots.data(),
                int64_t(slots.size()));
    cpu::PagedAttentionParams p{};
    p.q = q.data();
    p.q_token_stride = n_head * dk;
    p.k_cache = cache.k_rows(0);
    p.v_cache = mla ? cache.k_rows(0) : cache.v_rows(0);
    p.out = out.data();
    p.query_start_loc = qsl.data();
    p.seq_lens = lens.data();
    p.block_tables = tables.data();
    p.n_seqs = n_seqs;
    p.max_blocks_per_seq = ctx / bs;
    p.block_size = bs;
    p.n_head = n_head;
    p.n_head_kv = n_head_kv;
    p.head_dim_qk = dk;
    p.head_dim_v = dv;
    p.softmax_scale = float(1.0 / std::sqrt(double(dk)));
    cpu::paged_attention(p, pool);  // warm up
    const int reps = 10;
    const auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < reps; ++r) cpu::paged_attention(p, pool);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
    const double kv_bytes = double(n_seqs * ctx) * (cache.bytes_per_token());
    fmt::print("  {:<24} {:>10.2f} {:>12.1f} {:>14.2f}\n", f.name, s * 1e3, kv_bytes / 1e6, kv_bytes / s / 1e9);
    j.push_back(
        {{"format", f.name}, {"ms_per_call", s * 1e3}, {"kv_bytes", kv_bytes}, {"kv_gb_s", kv_bytes / s / 1e9}});
  }
  return j;
}

}  // namespace

int main(int argc, char** argv) {
  fs::path fixtures = fs::path(__FILE__).parent_path().parent_path() / "tests" / "fixtures";
  int threads = 0;
  std::string json_path = "bench_kv_fp8.json";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--fixtures")
      fixtures = argv[i + 1];
    else if (flag == "--threads")
      threads = int(bench::int_arg(flag, argv[i + 1]));
    else if (flag == "--json")
      json_path = argv[i + 1];
    else {
      fmt::print(stderr, "unknown flag {}\n", flag);
      return 2;
    }
  }
  ThreadPool pool(threads);
  fmt::print("latentserve bench: KV cache formats (f32 / bf16 / fp8 e4m3), logits vs the f32 cache\n");
  fmt::print(
      "  TF = teacher forced on the f32 greedy tokens; greedy prefix = free-running tokens equal to f32's before the "
      "first difference\n");
  nlohmann::json out;
  bool sane = true;
  for (const char* name : {"llama_gqa_f32", "deepseek_v3_f32"}) {
    std::vector<Row> rows;
    out["accuracy"][name] = accuracy(fixtures / name, pool, &rows);
    for (const Row& r : rows)  // a broken cache gives errors of the order of the logits' spread (about 2)
      if (r.nan || !(r.sum_vs_f32 / double(r.n_logits) < 0.25)) sane = false;
  }
  out["granularity_stress"] = granularity_stress(pool);
  out["kernel"]["gqa"] = kernel_timing(pool, false);
  out["kernel"]["mla"] = kernel_timing(pool, true);
  std::ofstream(json_path) << out.dump(2) << "\n";
  fmt::print("\n  wrote {}\n", json_path);
  if (!sane) {
    fmt::print(stderr, "SANITY BOUND FAILED: a NaN logit, or a mean |Δ logit| vs f32 of 0.25 or more\n");
    return 1;
  }
  return 0;
}
