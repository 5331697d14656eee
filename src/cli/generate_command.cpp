// `latentserve generate`: greedy continuation as JSON {"tokens":[...]}.
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "model/architectures.h"
#include "tokenizer/tokenizer.h"

namespace latentserve::cli {

namespace {
struct GenerateArgs {
  ModelArgs model;
  PromptArgs prompt;
  int64_t max_tokens = 16;
  bool ignore_eos = false;
};

int run_generate(const GenerateArgs& a) {
  auto tokens = a.prompt.ids(a.model.model_dir);
  ThreadPool pool(a.model.threads);
  auto model = a.model.load(pool);
  OfflineRunner runner(*model, a.model.runner_options(), pool);
  auto results = runner.run({{tokens, a.max_tokens, !a.ignore_eos}}, false);
  nlohmann::json out = {{"tokens", results[0].generated}};
  if (!a.prompt.prompt.empty())  // text in, text out
    out["text"] = tokenizer::Tokenizer::from_file(a.model.model_dir + "/tokenizer.json").decode(results[0].generated, true);
  std::cout << out.dump() << "\n";
  return 0;
}
}  // namespace

Command add_generate_command(CLI::App& app) {
  auto args = std::make_shared<GenerateArgs>();
  auto* cmd = app.add_subcommand("generate", "greedy continuation as JSON {\"tokens\": [...]}");
  args->model.add_to(cmd);
  args->prompt.add_to(cmd);
  cmd->add_option("--max-tokens", args->max_tokens, "tokens to generate");
  cmd->add_flag("--ignore-eos", args->ignore_eos, "keep generating after an end-of-sequence token");
  return {cmd, [args] { return run_generate(*args); }};
}

}  // namespace latentserve::cli
