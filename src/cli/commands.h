#pragma once
// Every latentserve subcommand, one file each; main.cpp lists them.
#include "cli/cli_common.h"

namespace latentserve::cli {

Command add_logits_command(CLI::App& app);
Command add_generate_command(CLI::App& app);
Command add_check_command(CLI::App& app);
Command add_batch_command(CLI::App& app);
Command add_tokenize_command(CLI::App& app);
Command add_plan_command(CLI::App& app);
Command add_bench_command(CLI::App& app);
Command add_verify_mla_command(CLI::App& app);
Command add_serve_command(CLI::App& app);
Command add_bench_serve_command(CLI::App& app);  // after add_bench_command

}  // namespace latentserve::cli
