#pragma once
// Helpers shared by the latentserve subcommands.
#include <CLI/CLI.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/offline_runner.h"

namespace latentserve::cli {

// A subcommand: its CLI11 parser and what to run when the user picked it.
struct Command {
  CLI::App* parser;
  std::function<int()> run;
};

// Options every model-running subcommand takes.
struct ModelOptions {
  std::string model_dir;
  int64_t block_size = 16;
  int threads = 0;
  int64_t max_batched_tokens = 512;

  void add_to(CLI::App* cmd);
  RunnerOptions runner_options() const { return {block_size, max_batched_tokens}; }
};

// "1,17,250" -> {1, 17, 250}; an entry that is not an integer is an Error naming it.
std::vector<int32_t> parse_token_list(const std::string& text, const std::string& flag);

// Shortest text that reads back as the same f32.
std::string format_float(float value);

}  // namespace latentserve::cli
