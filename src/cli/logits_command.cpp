// `latentserve logits`: f32 logits for every input position, as JSON
// {"tokens":[...],"logits":[[...],...]} (a stable contract other tools parse).
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "model/architectures.h"

namespace latentserve::cli {

namespace {
struct LogitsArgs {
  ModelArgs model;
  PromptArgs prompt;
};

int run_logits(const LogitsArgs& a) {
  auto tokens = a.prompt.ids(a.model.model_dir);
  ThreadPool pool(a.model.threads);
  auto model = a.model.load(pool);
  OfflineRunner runner(*model, a.model.runner_options(), pool);
  auto results = runner.run({{tokens, 0, true}}, /*keep_prompt_logits=*/true);
  const size_t vocab = size_t(model->vocab_size());
  std::string out = "{\"tokens\":[";
  for (size_t i = 0; i < tokens.size(); ++i) out += (i ? "," : "") + std::to_string(tokens[i]);
  out += "],\"logits\":[";
  for (size_t t = 0; t < tokens.size(); ++t) {
    out += t ? ",[" : "[";
    for (size_t v = 0; v < vocab; ++v) {
      if (v) out += ',';
      out += format_float(results[0].prompt_logits[t * vocab + v]);
    }
    out += ']';
  }
  out += "]}\n";
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}
}  // namespace

Command add_logits_command(CLI::App& app) {
  auto args = std::make_shared<LogitsArgs>();
  auto* cmd = app.add_subcommand("logits", "print f32 logits for every input position as JSON");
  args->model.add_to(cmd);
  args->prompt.add_to(cmd);
  return {cmd, [args] { return run_logits(*args); }};
}

}  // namespace latentserve::cli
