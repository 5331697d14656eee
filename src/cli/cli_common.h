#pragma once
// Helpers shared by the latentserve subcommands.
#include <CLI/CLI.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/offline_runner.h"
#include "model/causal_lm.h"
#include "model/model_options.h"
#include "perf/model_shape.h"

namespace latentserve::cli {

// A subcommand: its CLI11 parser and what to run when the user picked it.
struct Command {
  CLI::App* parser;
  std::function<int()> run;
};

// Arguments every model-running subcommand takes.
struct ModelArgs {
  std::string model_dir;
  int64_t block_size = 0;  // 0: the model's default
  std::string attention = "auto";  // MLA compute path
  std::string kv_cache_dtype = "auto";
  std::string kv_scale = "";  // empty: per-block on the CPU, per-head on cuda (static scales only there)
  int threads = 0;
  int64_t max_batched_tokens = 512;
  std::string device = "cpu";
  int gpu = 0;
  bool enforce_eager = false;
  double gpu_memory_utilization = 0.9;
  int tensor_parallel_size = 1;
  std::string synthetic;  // a preset built with random bf16 weights instead of --model (serve)

  void add_to(CLI::App* cmd);
  // --synthetic PRESET as the alternative to --model (which then stops being required).
  void add_synthetic_to(CLI::App* cmd);
  // The model of --model DIR, or of --synthetic PRESET (exactly one of them); with
  // --tensor-parallel-size > 1 it prints the ranks' layout to stderr.
  std::unique_ptr<CausalLM> load(ThreadPool& pool) const;
  std::string name() const { return synthetic.empty() ? model_dir : "synthetic:" + synthetic; }
  RunnerOptions runner_options() const { return {block_size, max_batched_tokens, kv_options()}; }
  cpu::KvCacheOptions kv_options() const;  // validates --kv-cache-dtype and --kv-scale
  latentserve::ModelOptions model_options() const;  // validates --attention
};

// The prompt of logits / generate: --tokens IDS or --prompt TEXT (encoded with the
// checkpoint's tokenizer.json), exactly one of them.
struct PromptArgs {
  std::string tokens;
  std::string prompt;

  void add_to(CLI::App* cmd);
  std::vector<int32_t> ids(const std::string& model_dir) const;
};

// The model of a preset shape with random bf16 weights (seed 1234): `bench decode --synthetic`
// and `serve --synthetic`.
std::unique_ptr<CausalLM> synthetic_causal_lm(const perf::ModelShape& shape, ThreadPool& pool,
                                              const latentserve::ModelOptions& options);

// "1,17,250" -> {1, 17, 250}; an entry that is not an integer is an Error naming it.
std::vector<int32_t> parse_token_list(const std::string& text, const std::string& flag);

// Shortest text that reads back as the same f32.
std::string format_float(float value);

}  // namespace latentserve::cli
