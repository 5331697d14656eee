// `latentserve batch`: offline inference over a JSONL file of requests in one engine.
// Each input line: {"id", "prompt" (text; needs tokenizer.json) or "tokens": [...],
// "max_tokens", "temperature", "top_k", "top_p", "min_p", "repetition_penalty",
// "presence_penalty", "frequency_penalty", "seed", "stop": [...], "stop_token_ids",
// "ignore_eos", "logprobs", "n"}. Each output line: id, tokens, text, finish_reason and the
// request's TTFT, TPOT and prompt / cached / generated token counts (and, when asked,
// "logprobs": per token its logprob and the top ones); with n > 1, "choices": one such
// object per completion with its "index". Engine metrics
// are printed at the end; a progress bar shows on a terminal.
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/engine_args.h"
#include "core/error.h"
#include "engine/llm_engine.h"
#include "model/architectures.h"
#include "tokenizer/tokenizer.h"

namespace latentserve::cli {

namespace {

struct BatchArgs {
  ModelArgs model;
  EngineArgs engine;
  std::string input, output;
};

SamplingParams sampling_params_from(const nlohmann::json& j, const std::string& where) {
  SamplingParams p;
  auto number = [&](const char* key, auto& field) {
    if (!j.contains(key) || j[key].is_null()) return;
    if (!j[key].is_number()) fail("{}: field '{}' must be a number, found {}", where, key, j[key].dump());
    field = j[key].get<std::decay_t<decltype(field)>>();
  };
  number("temperature", p.temperature);
  number("top_k", p.top_k);
  number("top_p", p.top_p);
  number("min_p", p.min_p);
  number("repetition_penalty", p.repetition_penalty);
  number("presence_penalty", p.presence_penalty);
  number("frequency_penalty", p.frequency_penalty);
  number("max_tokens", p.max_tokens);
  number("n", p.n);
  if (j.contains("seed") && !j["seed"].is_null()) {
    if (!j["seed"].is_number_integer()) fail("{}: field 'seed' must be an integer", where);
    p.seed = j["seed"].get<uint64_t>();
  }
  if (j.contains("logprobs") && !j["logprobs"].is_null()) {
    if (!j["logprobs"].is_number_integer()) fail("{}: field 'logprobs' must be an integer", where);
    p.logprobs = j["logprobs"].get<int32_t>();
  }
  if (j.contains("ignore_eos")) {
    if (!j["ignore_eos"].is_boolean()) fail("{}: field 'ignore_eos' must be true or false", where);
    p.ignore_eos = j["ignore_eos"].get<bool>();
  }
  if (j.contains("stop_token_ids")) {
    if (!j["stop_token_ids"].is_array()) fail("{}: field 'stop_token_ids' must be a list of ids", where);
    p.stop_token_ids = j["stop_token_ids"].get<std::vector<int32_t>>();
  }
  try {
    p.validate();
  } catch (const Error& e) {
    fail("{}: {}", where, e.what());
  }
  return p;
}

void draw_progress(int64_t done, int64_t total, int64_t generated, double seconds) {
  const int width = 30;
  const int filled = total ? int(width * done / total) : width;
  fmt::print(stderr, "\r[{}{}] {}/{} requests  {:.1f} tok/s ", std::string(size_t(filled), '='),
             std::string(size_t(width - filled), ' '), done, total, seconds > 0 ? double(generated) / seconds : 0.0);
}

int run_batch(const BatchArgs& a) {
  std::ifstream in(a.input);
  if (!in) fail("--input {}: cannot open", a.input);
  ThreadPool pool(a.model.threads);
  auto model = a.model.load(pool);
  std::optional<tokenizer::Tokenizer> tok;
  const auto tok_path = std::filesystem::path(a.model.model_dir) / "tokenizer.json";
  if (std::filesystem::exists(tok_path)) tok = tokenizer::Tokenizer::from_file(tok_path.string());

  const EngineConfig config = a.engine.engine_config(*model, a.model);
  LLMEngine engine(*model, config, pool, tok ? &*tok : nullptr);

  // Read and validate every line before running anything: a bad line names its number.
  std::string line;
  int64_t line_no = 0, total = 0;
  std::vector<std::string> order;
  std::map<std::string, int32_t> n_completions;  // id -> n
  while (std::getline(in, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = fmt::format("{} line {}", a.input, line_no);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      fail("{}: not valid JSON ({})", where, e.what());
    }
    if (!j.is_object()) fail("{}: expected a JSON object", where);
    const std::string id = j.contains("id") ? (j["id"].is_string() ? j["id"].get<std::string>() : j["id"].dump())
                                            : std::to_string(line_no);
    std::vector<int32_t> prompt;
    if (j.contains("tokens")) {
      if (!j["tokens"].is_array()) fail("{}: field 'tokens' must be a list of token ids", where);
      prompt = j["tokens"].get<std::vector<int32_t>>();
    } else if (j.contains("prompt")) {
      if (!j["prompt"].is_string()) fail("{}: field 'prompt' must be a string", where);
      if (!tok) fail("{}: field 'prompt' needs {} (give 'tokens' instead)", where, tok_path.string());
      prompt = tok->encode(j["prompt"].get<std::string>());
    } else {
      fail("{}: needs 'prompt' or 'tokens'", where);
    }
    std::vector<std::string> stop;
    if (j.contains("stop")) {
      if (j["stop"].is_string()) stop = {j["stop"].get<std::string>()};
      else if (j["stop"].is_array()) stop = j["stop"].get<std::vector<std::string>>();
      else fail("{}: field 'stop' must be a string or a list of strings", where);
    }
    try {
      SamplingParams params = sampling_params_from(j, where);
      n_completions[id] = params.n;
      engine.add_request(id, std::move(prompt), std::move(params), std::move(stop));
    } catch (const Error& e) {
      fail("{}: {}", where, e.what());
    }
    order.push_back(id);
    ++total;
  }

  std::ofstream out(a.output);
  if (!out) fail("--output {}: cannot open for writing", a.output);
  const bool tty = isatty(fileno(stderr));
  const auto start = std::chrono::steady_clock::now();
  std::map<std::string, nlohmann::json> results;
  std::map<std::string, nlohmann::json> logprobs;  // per request that asked: one entry per token
  while (engine.has_unfinished()) {
    for (auto& o : engine.step()) {
      for (const auto& sample : o.new_samples) {
        nlohmann::json top = nlohmann::json::array();
        for (const auto& t : sample.top_logprobs) top.push_back({{"token", t.token}, {"logprob", t.logprob}});
        logprobs[o.index == 0 ? o.id : fmt::format("{}\x1f{}", o.id, o.index)].push_back({{"token", sample.token}, {"logprob", sample.logprob}, {"top_logprobs", top}});
      }
      if (!o.finished) continue;
      nlohmann::json result = {{"id", o.id},
                       {"tokens", o.output_tokens},
                       {"text", o.text},
                       {"finish_reason", o.finish_reason},
                       {"ttft_ms", o.ttft_ms},
                       {"tpot_ms", o.tpot_ms},
                       {"prompt_tokens", o.n_prompt_tokens},
                       {"cached_tokens", o.n_cached_tokens},
                       {"generated_tokens", o.output_tokens.size()},
                       {"preemptions", o.n_preemptions}};
      const std::string key = o.index == 0 ? o.id : fmt::format("{}\x1f{}", o.id, o.index);
      if (logprobs.count(key)) result["logprobs"] = std::move(logprobs[key]);
      if (n_completions[o.id] == 1) {
        results[o.id] = std::move(result);
      } else {  // n > 1: one line with a "choices" list in index order (OpenAI's shape)
        result.erase("id");
        result["index"] = o.index;
        nlohmann::json& line = results[o.id];
        line["id"] = o.id;
        if (!line.contains("choices")) line["choices"] = nlohmann::json::array();
        line["choices"].push_back(std::move(result));
        std::sort(line["choices"].begin(), line["choices"].end(),
                  [](const auto& x, const auto& y) { return x["index"].template get<int>() < y["index"].template get<int>(); });
      }
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (tty) draw_progress(int64_t(results.size()), total, engine.metrics().generated_tokens, seconds);
  }
  if (tty) fmt::print(stderr, "\n");
  for (const auto& id : order) out << results.at(id).dump() << "\n";
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  fmt::print(stderr, "{}", engine.metrics().summary(wall));
  return 0;
}

}  // namespace

Command add_batch_command(CLI::App& app) {
  auto args = std::make_shared<BatchArgs>();
  auto* cmd = app.add_subcommand("batch", "offline inference over a JSONL file of requests in one engine");
  args->model.add_to(cmd);
  cmd->add_option("--input", args->input, "requests, one JSON object per line")->required();
  cmd->add_option("--output", args->output, "results, one JSON object per line, in input order")->required();
  args->engine.add_to(cmd);
  return {cmd, [args] { return run_batch(*args); }};
}

}  // namespace latentserve::cli
