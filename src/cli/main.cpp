// latentserve command line. Each subcommand lives in its own file (commands.h).
#include <cstdio>
#include <exception>

#include "cli/commands.h"

int main(int argc, char** argv) {
  using namespace latentserve::cli;
  CLI::App app{"latentserve: an LLM inference engine centred on attention and its KV cache"};
  app.require_subcommand(1);
  const Command commands[] = {
      add_logits_command(app),
      add_generate_command(app),
      add_check_command(app),
      add_batch_command(app),
      add_tokenize_command(app),
      add_plan_command(app),
      add_bench_command(app),
      add_verify_mla_command(app),
      add_serve_command(app),
      add_bench_serve_command(app),
  };
  CLI11_PARSE(app, argc, argv);
  try {
    for (const Command& c : commands)
      if (c.parser->parsed()) return c.run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "latentserve: error: %s\n", e.what());
    return 1;
  }
  return 1;
}
