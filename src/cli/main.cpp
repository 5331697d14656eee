// latentserve command line: `logits`, `generate`, `check`. The JSON printed by
// logits and generate is a stable contract that other tools call.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/cli_common.h"
#include "core/error.h"
#include "engine/offline_runner.h"
#include "model/architectures.h"

namespace latentserve::cli {
namespace {

struct CommonOptions {
  std::string model_dir;
  int64_t block_size = 16;
  int threads = 0;
  int64_t max_batched_tokens = 512;
};

void add_common(CLI::App* cmd, CommonOptions& o) {
  cmd->add_option("--model", o.model_dir, "Hugging Face checkpoint folder (config.json, *.safetensors)")->required();
  cmd->add_option("--block-size", o.block_size, "KV cache block size in tokens: 16, 32, 64 or 128");
  cmd->add_option("--threads", o.threads, "CPU threads (0 = all cores)");
  cmd->add_option("--max-batched-tokens", o.max_batched_tokens, "tokens per engine step (prefill is chunked)");
}

RunnerOptions runner_options(const CommonOptions& o) { return {o.block_size, o.max_batched_tokens}; }

int run_logits(const CommonOptions& o, const std::string& tokens_text) {
  auto tokens = parse_token_list(tokens_text, "--tokens");
  ThreadPool pool(o.threads);
  auto model = load_causal_lm(o.model_dir, pool);
  OfflineRunner runner(*model, runner_options(o), pool);
  auto results = runner.run({{tokens, 0, true}}, /*keep_prompt_logits=*/true);
  const int64_t vocab = model->vocab_size();
  std::string out = "{\"tokens\":[";
  for (size_t i = 0; i < tokens.size(); ++i) out += (i ? "," : "") + std::to_string(tokens[i]);
  out += "],\"logits\":[";
  for (size_t t = 0; t < tokens.size(); ++t) {
    out += t ? ",[" : "[";
    for (int64_t v = 0; v < vocab; ++v) {
      if (v) out += ',';
      out += format_float(results[0].prompt_logits[t * size_t(vocab) + size_t(v)]);
    }
    out += ']';
  }
  out += "]}\n";
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

int run_generate(const CommonOptions& o, const std::string& tokens_text, int64_t max_tokens, bool ignore_eos) {
  auto tokens = parse_token_list(tokens_text, "--tokens");
  ThreadPool pool(o.threads);
  auto model = load_causal_lm(o.model_dir, pool);
  OfflineRunner runner(*model, runner_options(o), pool);
  auto results = runner.run({{tokens, max_tokens, !ignore_eos}}, false);
  std::cout << nlohmann::json{{"tokens", results[0].generated}}.dump() << "\n";
  return 0;
}

// Compares the model with the reference.json that tools/make_fixtures.py wrote beside it.
int run_check(const CommonOptions& o) {
  std::ifstream file(o.model_dir + "/reference.json");
  if (!file) fail("{}/reference.json: cannot open (check needs a fixture made by tools/make_fixtures.py)", o.model_dir);
  nlohmann::json ref = nlohmann::json::parse(file);
  ThreadPool pool(o.threads);
  auto model = load_causal_lm(o.model_dir, pool);
  OfflineRunner runner(*model, runner_options(o), pool);
  std::vector<SequenceRequest> requests;
  for (const auto& p : ref.at("prompts"))
    requests.push_back({p.get<std::vector<int32_t>>(), int64_t(ref.at("greedy").at(requests.size()).size()), false});
  auto results = runner.run(requests, true);  // every prompt in one ragged batch
  const int64_t vocab = model->vocab_size();
  bool all_ok = true;
  fmt::print("{:<8} {:>7} {:>16} {:>14}\n", "prompt", "tokens", "max|dlogit|", "greedy");
  for (size_t i = 0; i < requests.size(); ++i) {
    double max_diff = 0;
    const auto& rows = ref.at("logits").at(i);
    for (size_t t = 0; t < rows.size(); ++t)
      for (int64_t v = 0; v < vocab; ++v)
        max_diff = std::max(max_diff, std::abs(double(results[i].prompt_logits[t * size_t(vocab) + size_t(v)]) -
                                               rows[t][size_t(v)].get<double>()));
    const bool greedy_ok = results[i].generated == ref.at("greedy").at(i).get<std::vector<int32_t>>();
    all_ok &= greedy_ok;
    fmt::print("{:<8} {:>7} {:>16.3e} {:>14}\n", i, requests[i].prompt.size(), max_diff,
               greedy_ok ? "identical" : "DIFFERENT");
  }
  fmt::print("KV cache: {} blocks of {} tokens, {} bytes per token ({})\n", runner.stats().n_kv_blocks, o.block_size,
             model->attention_spec().kv_bytes_per_token(DType::F32, model->n_layer()),
             attention_kind_name(model->attention_spec().kind));
  return all_ok ? 0 : 1;
}

}  // namespace
}  // namespace latentserve::cli

int main(int argc, char** argv) {
  using namespace latentserve::cli;
  CLI::App app{"latentserve: an LLM inference engine centred on attention and its KV cache"};
  app.require_subcommand(1);

  CommonOptions logits_opts, generate_opts, check_opts;
  std::string logits_tokens, generate_tokens;
  int64_t max_tokens = 16;
  bool ignore_eos = false;

  auto* logits = app.add_subcommand("logits", "print f32 logits for every input position as JSON");
  add_common(logits, logits_opts);
  logits->add_option("--tokens", logits_tokens, "comma-separated token ids")->required();

  auto* generate = app.add_subcommand("generate", "greedy continuation as JSON {\"tokens\": [...]}");
  add_common(generate, generate_opts);
  generate->add_option("--tokens", generate_tokens, "comma-separated prompt token ids")->required();
  generate->add_option("--max-tokens", max_tokens, "tokens to generate");
  generate->add_flag("--ignore-eos", ignore_eos, "keep generating after an end-of-sequence token");

  auto* check = app.add_subcommand("check", "compare with a fixture's reference.json (Hugging Face transformers)");
  add_common(check, check_opts);

  CLI11_PARSE(app, argc, argv);
  try {
    if (*logits) return run_logits(logits_opts, logits_tokens);
    if (*generate) return run_generate(generate_opts, generate_tokens, max_tokens, ignore_eos);
    if (*check) return run_check(check_opts);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "latentserve: error: %s\n", e.what());
    return 1;
  }
  return 1;
}
