#pragma once
// The batch x context sweep of predicted TPOT for each attention kind of one backbone
// (`latentserve plan --sweep`): a text table and the gnuplot data and script of its plot.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "perf/planner.h"

namespace latentserve::perf {

struct SweepCell {
  std::string attention;  // "mha", "gqa8", "mqa", "mla", "mla-dp"
  int64_t batch = 0;
  int64_t context_tokens = 0;
  double tpot_ms = 0;
  std::string dominant_term;  // weights, kv, compute
  bool fits = true;           // false: capacity-bound (the batch's KV does not fit)
};

struct Sweep {
  std::string backbone;
  std::string hardware;
  Workload workload;  // tp and kv dtype; batch and context are the table's axes
  std::vector<std::string> attentions;
  std::vector<int64_t> batches{1, 8, 32, 64, 128};
  std::vector<int64_t> contexts{1024, 2048, 8192, 32768};
  std::vector<SweepCell> cells;  // attention-major, then batch, then context

  const SweepCell& at(size_t attention, size_t batch, size_t context) const;
};

// Every attention kind of `backbone` (mha, gqa8, mqa, mla; plus mla-dp, data-parallel
// attention, when tp > 1); a kind that tp cannot split is left out.
Sweep make_sweep(const ModelShape& backbone, const HardwareSpec& hw, const Workload& workload,
                 std::vector<std::string> attentions = {"mha", "gqa8", "mqa", "mla"});
std::string sweep_to_text(const Sweep& sweep);
nlohmann::json sweep_to_json(const Sweep& sweep);
// Whitespace-separated columns: batch, then TPOT ms for each attention x context.
std::string sweep_gnuplot_data(const Sweep& sweep);
// A 2x2 multiplot (one panel per context) of TPOT vs batch, one line per attention.
std::string sweep_gnuplot_script(const Sweep& sweep, const std::string& data_path, const std::string& png_path);

}  // namespace latentserve::perf
