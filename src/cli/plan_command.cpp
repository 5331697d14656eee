// `latentserve plan`: what a model will cost on a device, from bytes and FLOPs alone
// (perf/planner.h): KV sizes, capacity, predicted TPOT/TTFT, regime, TP layout.
// `--sweep` prints the batch x context table per attention kind and plots it (gnuplot).
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>

#include <fmt/format.h>

#include "cli/commands.h"
#include "core/error.h"
#include "perf/planner.h"
#include "perf/presets.h"
#include "perf/sweep.h"

namespace latentserve::cli {

namespace {

struct PlanArgs {
  std::string model_dir, preset, gpu = "h100", kv_dtype = "bf16", attention, plot = "plan-sweep.png";
  int64_t context = 8192, batch = 1, tp = 1;
  double memory_utilization = 0.9;
  int threads = 0;
  bool json = false, sweep = false;
};

perf::HardwareSpec hardware(const PlanArgs& a) {
  if (a.gpu != "cpu") return perf::gpu_spec(a.gpu);
  ThreadPool pool(a.threads);
  return perf::measure_cpu_spec(pool);
}

int run_sweep(const PlanArgs& a, const perf::ModelShape& model, const perf::HardwareSpec& hw, perf::Workload w) {
  w.batch = 1;
  w.context_tokens = 1;
  perf::validate(w);
  const perf::Sweep sweep = perf::make_sweep(model, hw, w);
  if (a.json) {
    fmt::print("{}\n", perf::sweep_to_json(sweep).dump(2));
  } else {
    fmt::print("{}", perf::sweep_to_text(sweep));
  }
  const std::string data = a.plot + ".dat", script = a.plot + ".gp";
  std::ofstream(data) << perf::sweep_gnuplot_data(sweep);
  std::ofstream(script) << perf::sweep_gnuplot_script(sweep, data, a.plot);
  const int rc = std::system(fmt::format("gnuplot '{}' 2>&1", script).c_str());
  std::FILE* note = a.json ? stderr : stdout;
  if (rc == 0) fmt::print(note, "wrote {} (data {}, script {})\n", a.plot, data, script);
  else fmt::print(note, "gnuplot failed or is missing (apt install gnuplot-nox); data {} and script {} written\n", data, script);
  return 0;
}

int run_plan(const PlanArgs& a) {
  if (a.model_dir.empty() == a.preset.empty()) fail("give exactly one of --model DIR or --preset NAME");
  perf::ModelShape model = a.preset.empty() ? perf::shape_from_model_dir(a.model_dir) : perf::model_preset(a.preset);
  if (!a.attention.empty()) model = perf::with_attention(model, a.attention, "--attention");
  perf::Workload w;
  w.context_tokens = a.context;
  w.batch = a.batch;
  w.tp = a.tp;
  w.kv_dtype = perf::parse_kv_dtype(a.kv_dtype);
  w.memory_utilization = a.memory_utilization;
  if (a.gpu != "cpu") perf::gpu_spec(a.gpu);  // unknown names fail before any measuring
  if (a.sweep) return run_sweep(a, model, hardware(a), w);
  perf::validate(w);
  perf::tp_kv_layout(model.attention, model.n_layer, w.kv_dtype, w.tp);
  const perf::Plan plan = perf::make_plan(model, hardware(a), w);
  if (a.json) fmt::print("{}\n", perf::plan_to_json(plan).dump(2));
  else fmt::print("{}", perf::plan_to_text(plan));
  return 0;
}

}  // namespace

Command add_plan_command(CLI::App& app) {
  auto a = std::make_shared<PlanArgs>();
  auto* cmd = app.add_subcommand("plan", "predict KV size, capacity, TPOT/TTFT and regime of a model on a GPU");
  auto* model = cmd->add_option("--model", a->model_dir, "Hugging Face checkpoint folder (reads config.json)");
  auto* preset = cmd->add_option("--preset", a->preset,
                                 "published model shape: llama2-7b, llama2-70b, llama-70b-mha, llama-70b-mqa, "
                                 "llama3-70b, llama3-8b, llama-3.2-1b, tiny-bench, deepseek-v2, deepseek-v3, "
                                 "deepseek-v2-lite");
  model->excludes(preset);
  cmd->add_option("--gpu", a->gpu, "a100, h100, h200 (datasheet) or cpu (measured now)");
  cmd->add_option("--context", a->context, "tokens in each sequence's KV cache (and the prompt for TTFT)");
  cmd->add_option("--batch", a->batch, "concurrent sequences");
  cmd->add_option("--tp", a->tp, "tensor-parallel GPUs");
  cmd->add_option("--kv-cache-dtype", a->kv_dtype, "bf16, f16, f32, fp8_e4m3, fp8_e5m2");
  cmd->add_option("--attention", a->attention, "replace the attention: mha, gqaN, mqa, mla (same backbone)");
  cmd->add_option("--gpu-memory-utilization", a->memory_utilization, "share of GPU memory for weights + KV");
  cmd->add_option("--threads", a->threads, "CPU threads for --gpu cpu's measurement (0 = all)");
  cmd->add_flag("--json", a->json, "print JSON");
  cmd->add_flag("--sweep", a->sweep, "batch x context table of TPOT per attention kind, and a PNG plot");
  cmd->add_option("--plot", a->plot, "PNG path of the --sweep plot");
  return {cmd, [a] { return run_plan(*a); }};
}

}  // namespace latentserve::cli
