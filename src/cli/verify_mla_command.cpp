// `latentserve verify-mla [--model DIR] [--json]`: the five MLA checks of issue 3 (see
// attention/mla_verify.h and docs/mla.md) on DeepSeek-V3 attention dimensions with random
// weights, and on a checkpoint's layer-0 weights when --model is given. Prints one line per
// check (pass/fail and its figure), or the same as JSON; exits 1 when a check fails.
#include <cstdio>
#include <memory>

#include "attention/mla_verify.h"
#include "cli/commands.h"

namespace latentserve::cli {

namespace {
struct VerifyMlaArgs {
  std::string model_dir;
  bool json = false;
  int threads = 0;
  uint64_t seed = 1234;
  double max_e2e_gb = 4.0;
};

int run_verify_mla(const VerifyMlaArgs& a) {
  ThreadPool pool(a.threads);
  MlaVerifyOptions options;
  options.seed = a.seed;
  std::vector<MlaVerifyReport> reports;
  // The checkpoint first, so a folder that is not an MLA model fails before the long random run.
  if (!a.model_dir.empty())
    reports.push_back(verify_mla_checkpoint(a.model_dir, options, pool, int64_t(a.max_e2e_gb * 1e9)));
  reports.insert(reports.begin(), verify_mla_random(options, pool));
  bool passed = true;
  for (const auto& r : reports) passed = passed && r.passed();
  std::string out;
  if (a.json) {
    nlohmann::json j = {{"passed", passed}, {"reports", nlohmann::json::array()}};
    for (const auto& r : reports) j["reports"].push_back(r.to_json());
    out = j.dump(2) + "\n";
  } else {
    for (const auto& r : reports) out += r.to_text();
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  return passed ? 0 : 1;
}
}  // namespace

Command add_verify_mla_command(CLI::App& app) {
  auto args = std::make_shared<VerifyMlaArgs>();
  auto* cmd = app.add_subcommand("verify-mla", "run the five MLA checks (footprint, low rank, decoupled RoPE, "
                                               "absorption, end-to-end decode); exit 1 if one fails");
  cmd->add_option("--model", args->model_dir, "also check this deepseek_v2/v3 checkpoint's layer-0 weights");
  cmd->add_flag("--json", args->json, "print the results as JSON");
  cmd->add_option("--threads", args->threads, "CPU threads (0 = all cores)");
  cmd->add_option("--seed", args->seed, "seed of the random weights and inputs (default 1234)");
  cmd->add_option("--max-e2e-gb", args->max_e2e_gb,
                  "largest checkpoint (GB of safetensors) the end-to-end check runs itself; above, it runs the "
                  "checkpoint's attention config on a small random backbone (default 4)");
  return {cmd, [args] { return run_verify_mla(*args); }};
}

}  // namespace latentserve::cli
