// `latentserve check`: runs a fixture's prompts in one ragged batch and compares the
// logits and greedy continuations with the reference.json transformers wrote.
#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/error.h"
#include "model/architectures.h"

namespace latentserve::cli {

namespace {
int run_check(const ModelArgs& o) {
  std::ifstream file(o.model_dir + "/reference.json");
  if (!file) fail("{}/reference.json: cannot open (check needs a fixture made by tools/make_fixtures.py)", o.model_dir);
  nlohmann::json ref = nlohmann::json::parse(file);
  ThreadPool pool(o.threads);
  auto model = o.load(pool);
  OfflineRunner runner(*model, o.runner_options(), pool);
  std::vector<SequenceRequest> requests;
  for (size_t i = 0; i < ref.at("prompts").size(); ++i)
    requests.push_back({ref["prompts"][i].get<std::vector<int32_t>>(), int64_t(ref.at("greedy").at(i).size()), false});
  auto results = runner.run(requests, true);  // every prompt in one ragged batch
  const size_t vocab = size_t(model->vocab_size());
  bool all_ok = true;
  fmt::print("{:<8} {:>7} {:>16} {:>14}\n", "prompt", "tokens", "max|dlogit|", "greedy");
  for (size_t i = 0; i < requests.size(); ++i) {
    double max_diff = 0;
    const auto& rows = ref.at("logits").at(i);
    for (size_t t = 0; t < rows.size(); ++t)
      for (size_t v = 0; v < vocab; ++v)
        max_diff = std::max(max_diff, std::abs(double(results[i].prompt_logits[t * vocab + v]) - rows[t][v].get<double>()));
    const bool greedy_ok = results[i].generated == ref.at("greedy").at(i).get<std::vector<int32_t>>();
    all_ok &= greedy_ok;
    fmt::print("{:<8} {:>7} {:>16.3e} {:>14}\n", i, requests[i].prompt.size(), max_diff,
               greedy_ok ? "identical" : "DIFFERENT");
  }
  const AttentionSpec spec = model->attention_spec();
  const auto& stats = runner.stats();  // the cache as built: every tensor-parallel rank's slice counted
  fmt::print("{} attention, KV cache {} blocks of {} tokens, {} bytes per token (f32, all layers{})\n",
             attention_kind_name(spec.kind), stats.n_kv_blocks, runner.block_size_tokens(),
             stats.kv_cache_bytes / (stats.n_kv_blocks * runner.block_size_tokens()),
             o.tensor_parallel_size > 1 ? fmt::format(", {} ranks", o.tensor_parallel_size) : "");
  return all_ok ? 0 : 1;
}
}  // namespace

Command add_check_command(CLI::App& app) {
  auto args = std::make_shared<ModelArgs>();
  auto* cmd = app.add_subcommand("check", "compare with a fixture's reference.json (Hugging Face transformers)");
  args->add_to(cmd);
  return {cmd, [args] { return run_check(*args); }};
}

}  // namespace latentserve::cli
