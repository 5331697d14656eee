#include "perf/sweep.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/error.h"

namespace latentserve::perf {

namespace {

std::string context_label(int64_t tokens) {
  return tokens % 1024 == 0 ? fmt::format("{}K", tokens / 1024) : std::to_string(tokens);
}

char term_letter(const SweepCell& c) {
  if (!c.fits) return '!';
  return c.dominant_term == "compute" ? 'c' : c.dominant_term == "weights" ? 'w' : 'k';
}

}  // namespace

const SweepCell& Sweep::at(size_t a, size_t b, size_t c) const {
  return cells[(a * batches.size() + b) * contexts.size() + c];
}

Sweep make_sweep(const ModelShape& backbone, const HardwareSpec& hw, const Workload& workload,
                 std::vector<std::string> attentions) {
  Sweep s;
  s.backbone = backbone.name;
  s.hardware = hw.description;
  s.workload = workload;
  if (workload.tp > 1 && std::find(attentions.begin(), attentions.end(), "mla") != attentions.end())
    attentions.push_back("mla-dp");
  for (const auto& kind : attentions) {
    const bool dp = kind == "mla-dp";
    const ModelShape m = with_attention(backbone, dp ? "mla" : kind, "--attention");
    std::vector<SweepCell> cells;
    try {
      for (int64_t b : s.batches)
        for (int64_t ctx : s.contexts) {
          Workload w = workload;
          w.batch = b;
          w.context_tokens = ctx;
          const Plan p = make_plan(m, hw, w);
          const StepCost& d = dp && p.dp_attention ? p.dp_attention->decode : p.decode;
          const int64_t max_seqs = dp && p.dp_attention ? p.dp_attention->max_concurrent_sequences : p.max_concurrent_sequences;
          cells.push_back({kind, b, ctx, d.time_ms, d.dominant_term(), max_seqs >= b});
        }
    } catch (const Error&) {
      continue;  // e.g. tp does not split this kind's KV heads
    }
    s.attentions.push_back(kind);
    s.cells.insert(s.cells.end(), cells.begin(), cells.end());
  }
  return s;
}

std::string sweep_to_text(const Sweep& s) {
  std::string out = fmt::format(
      "Predicted TPOT (ms) of {} on {} x {}, KV cache {}: rows batch, columns context per attention kind\n",
      s.backbone, s.workload.tp, s.hardware, kv_dtype_name(s.workload.kv_dtype));
  const int cell = 8;
  out += fmt::format("{:>6} ", "");
  for (const auto& a : s.attentions)
    out += fmt::format("| {:^{}}", a, int(s.contexts.size()) * cell);
  out += "\n";
  out += fmt::format("{:>6} ", "batch");
  for (size_t a = 0; a < s.attentions.size(); ++a) {
    out += "| ";
    for (int64_t c : s.contexts) out += fmt::format("{:>{}}", context_label(c), cell);
  }
  out += "\n";
  for (size_t b = 0; b < s.batches.size(); ++b) {
    out += fmt::format("{:>6} ", s.batches[b]);
    for (size_t a = 0; a < s.attentions.size(); ++a) {
      out += "| ";
      for (size_t c = 0; c < s.contexts.size(); ++c) {
        const SweepCell& x = s.at(a, b, c);
        const std::string v = x.tpot_ms >= 100 ? fmt::format("{:.0f}", x.tpot_ms) : fmt::format("{:.1f}", x.tpot_ms);
        out += fmt::format("{:>{}}{}", v, cell - 1, term_letter(x));
      }
    }
    out += "\n";
  }
  out += "dominant term: w weights, k KV cache, c compute; ! the batch's KV does not fit in memory (capacity-bound)\n";
  return out;
}

nlohmann::json sweep_to_json(const Sweep& s) {
  nlohmann::json cells = nlohmann::json::array();
  for (const auto& c : s.cells)
    cells.push_back({{"attention", c.attention}, {"batch", c.batch}, {"context_tokens", c.context_tokens},
                     {"tpot_ms", c.tpot_ms}, {"dominant_term", c.dominant_term}, {"fits", c.fits}});
  return {{"backbone", s.backbone}, {"hardware", s.hardware}, {"tp", s.workload.tp},
          {"kv_cache_dtype", kv_dtype_name(s.workload.kv_dtype)}, {"attentions", s.attentions},
          {"batches", s.batches}, {"contexts", s.contexts}, {"cells", cells}};
}

std::string sweep_gnuplot_data(const Sweep& s) {
  std::string out = "# batch";
  for (const auto& a : s.attentions)
    for (int64_t c : s.contexts) out += fmt::format(" {}@{}", a, context_label(c));
  out += "\n";
  for (size_t b = 0; b < s.batches.size(); ++b) {
    out += std::to_string(s.batches[b]);
    for (size_t a = 0; a < s.attentions.size(); ++a)
      for (size_t c = 0; c < s.contexts.size(); ++c) out += fmt::format(" {:.6g}", s.at(a, b, c).tpot_ms);
    out += "\n";
  }
  return out;
}

std::string sweep_gnuplot_script(const Sweep& s, const std::string& data_path, const std::string& png_path) {
  std::string g = fmt::format(
      "set terminal pngcairo size 1400,1000 font ',11'\nset output '{}'\n"
      "set multiplot layout 2,2 title 'Predicted TPOT floor: {} on {} x {}, KV {}'\n"
      "set logscale xy\nset xlabel 'batch (sequences)'\nset ylabel 'TPOT (ms)'\nset key top left\nset grid\n"
      "set xtics (1, 8, 32, 64, 128)\nset xrange [0.8:170]\n",
      png_path, s.backbone, s.workload.tp, s.hardware, kv_dtype_name(s.workload.kv_dtype));
  for (size_t c = 0; c < s.contexts.size(); ++c) {
    g += fmt::format("set title 'context {}'\nplot ", context_label(s.contexts[c]));
    for (size_t a = 0; a < s.attentions.size(); ++a) {
      const size_t column = 2 + a * s.contexts.size() + c;
      g += fmt::format("{}'{}' using 1:{} with linespoints lw 2 title '{}'", a ? ", " : "", data_path, column,
                       s.attentions[a]);
    }
    g += "\n";
  }
  g += "unset multiplot\n";
  return g;
}

}  // namespace latentserve::perf
