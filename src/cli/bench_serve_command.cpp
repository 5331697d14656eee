// `latentserve bench serve`: a load generator for a running `latentserve serve` (or any
// OpenAI-compatible server that streams token ids: vLLM's "return_token_ids"). For each
// concurrency level, that many clients send streaming completions of random token-id prompts
// back to back; the table gives what a user sees (TTFT, TPOT, inter-token latency, output
// tokens/s) next to what the engine spent (its mean step and forward time, from /metrics),
// so the gap between a client's TPOT and the GPU's step time is a printed figure.
#include <fmt/format.h>
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "cli/commands.h"
#include "core/error.h"
#include "engine/engine_metrics.h"

namespace latentserve::cli {

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

struct BenchServeArgs {
  std::string url = "http://127.0.0.1:8000";
  std::string model;  // empty: the first of /v1/models
  std::string concurrency = "1,8,32";
  int64_t requests = 0;  // per level; 0: 4 x concurrency, at least 8
  int64_t prompt_tokens = 512, max_tokens = 128;
  int64_t vocab = 1000;  // prompt ids are drawn from [1, vocab)
  uint64_t seed = 1;
  double temperature = 0.0, top_p = 1.0;  // 0: greedy
  std::string api_key;
  std::string json_path = "bench-serve.json";
};

struct RequestTiming {
  bool ok = false;
  std::string error;
  int64_t n_tokens = 0;
  double ttft_ms = 0, last_token_ms = 0, e2e_ms = 0;
  std::vector<double> itl_ms;  // gaps between consecutive token arrivals
};

httplib::Client make_client(const BenchServeArgs& a) {
  httplib::Client c(a.url);
  c.set_read_timeout(600, 0);
  c.set_decompress(false);
  if (!a.api_key.empty()) c.set_bearer_token_auth(a.api_key);
  return c;
}

// One streaming completion; token arrival times from each chunk's "token_ids".
// ok: [DONE] arrived after exactly `expected_tokens` tokens (the requests ignore EOS).
RequestTiming run_request(httplib::Client& client, const std::string& body, int64_t expected_tokens) {
  RequestTiming t;
  std::string buffer;
  const auto start = Clock::now();
  std::optional<Clock::time_point> last;
  bool done = false;
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.set_header("Content-Type", "application/json");
  req.body = body;
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    const auto now = Clock::now();
    buffer.append(data, n);
    for (size_t end; (end = buffer.find("\n\n")) != std::string::npos; buffer.erase(0, end + 2)) {
      const std::string event = buffer.substr(0, end);
      if (event == "data: [DONE]") done = true;
      if (event.rfind("data: {", 0) != 0) continue;  // [DONE], keep-alive comments
      const json chunk = json::parse(event.substr(6), nullptr, false);
      if (chunk.contains("error")) {
        t.error = chunk["error"].dump();
        return false;
      }
      if (!chunk.contains("choices") || chunk["choices"].empty()) continue;
      const json& choice = chunk["choices"][0];
      const int64_t n_new = choice.contains("token_ids") ? int64_t(choice["token_ids"].size()) : 0;
      for (int64_t i = 0; i < n_new; ++i) {
        if (!last) t.ttft_ms = std::chrono::duration<double, std::milli>(now - start).count();
        else if (i == 0) t.itl_ms.push_back(std::chrono::duration<double, std::milli>(now - *last).count());
        ++t.n_tokens;
      }
      if (n_new) {
        last = now;
        t.last_token_ms = std::chrono::duration<double, std::milli>(now - start).count();
      }
    }
    return true;
  };
  auto res = client.send(req);
  t.e2e_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  if (!t.error.empty()) {
    // an error event inside the stream: keep it (the cancelled read says less)
  } else if (!res)
    t.error = fmt::format("no response: {} after {:.0f} ms and {} tokens", httplib::to_string(res.error()), t.e2e_ms,
                          t.n_tokens);
  else if (res->status != 200) t.error = fmt::format("HTTP {}: {}", res->status, res->body.substr(0, 300));
  if (t.error.empty() && t.n_tokens == 0) t.error = "no token ids in the stream (does the server honour return_token_ids?)";
  if (t.error.empty() && (!done || t.n_tokens != expected_tokens))
    t.error = fmt::format("the stream ended after {} of {} tokens{}", t.n_tokens, expected_tokens, done ? "" : " without [DONE]");
  t.ok = t.error.empty();
  return t;
}

// latentserve:NAME{...} VALUE lines of /metrics (0 for a metric the server does not have).
std::map<std::string, double> scrape_metrics(httplib::Client& client) {
  std::map<std::string, double> out;
  auto res = client.Get("/metrics");
  if (!res || res->status != 200) return out;
  std::istringstream in(res->body);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("latentserve:", 0) != 0) continue;
    const size_t name_end = line.find_first_of("{ ");
    const size_t value_at = line.rfind(' ');
    out[line.substr(12, name_end - 12)] = std::strtod(line.c_str() + value_at + 1, nullptr);
  }
  return out;
}

std::string served_model(httplib::Client& client) {
  auto res = client.Get("/v1/models");
  if (!res) fail("bench serve: no answer from the server ({})", httplib::to_string(res.error()));
  if (res->status != 200) fail("bench serve: GET /v1/models gave HTTP {}: {}", res->status, res->body);
  const json models = json::parse(res->body);
  if (!models.contains("data") || models["data"].empty()) fail("bench serve: /v1/models lists no model");
  return models["data"][0]["id"];
}

int run_bench_serve(const BenchServeArgs& a) {
  std::vector<int64_t> levels;
  {
    std::stringstream in(a.concurrency);
    for (std::string item; std::getline(in, item, ',');) {
      const int64_t c = std::atoll(item.c_str());
      if (c < 1 || c > 1024) fail("--concurrency: expected a list of integers in [1, 1024], found '{}'", item);
      levels.push_back(c);
    }
  }
  if (a.prompt_tokens < 1 || a.max_tokens < 1 || a.vocab < 2)
    fail("--prompt-tokens, --max-tokens must be >= 1 and --vocab >= 2");
  httplib::Client probe = make_client(a);
  const std::string model = a.model.empty() ? served_model(probe) : a.model;
  fmt::print("bench serve: {} model '{}', prompts of {} random ids in [1, {}), {} tokens out each (ignore_eos), "
             "temperature {} top_p {}\n", a.url, model, a.prompt_tokens, a.vocab, a.max_tokens, a.temperature, a.top_p);
  fmt::print("{:>5} {:>5} {:>8} {:>10} {:>18} {:>18} {:>18} {:>12} {:>12} {:>10}\n", "conc", "reqs", "time_s",
             "out_tok/s", "ttft_ms p50/p90", "tpot_ms p50/p90", "itl_ms p50/p99", "step_ms", "forward_ms", "tok/step");
  json results = json::array();
  uint64_t request_serial = 0;
  for (const int64_t conc : levels) {
    const int64_t n_requests = a.requests > 0 ? a.requests : std::max<int64_t>(8, 4 * conc);
    std::vector<std::string> bodies;
    for (int64_t i = 0; i < n_requests; ++i) {
      std::mt19937_64 rng(a.seed * 1'000'003 + request_serial++);  // a fresh prompt each: no prefix cache hits
      std::uniform_int_distribution<int64_t> id(1, a.vocab - 1);
      std::vector<int64_t> prompt(size_t(a.prompt_tokens));
      for (auto& t : prompt) t = id(rng);
      bodies.push_back(json{{"model", model}, {"prompt", prompt}, {"max_tokens", a.max_tokens}, {"temperature", a.temperature},
                            {"top_p", a.top_p}, {"seed", int64_t(request_serial)},
                            {"ignore_eos", true}, {"stream", true}, {"return_token_ids", true}}.dump());
    }
    const auto before = scrape_metrics(probe);
    std::vector<RequestTiming> timings(static_cast<size_t>(n_requests));
    std::atomic<int64_t> next{0};
    const auto start = Clock::now();
    std::vector<std::thread> clients;
    for (int64_t c = 0; c < conc; ++c)
      clients.emplace_back([&] {
        httplib::Client client = make_client(a);
        for (int64_t i; (i = next++) < n_requests;) timings[size_t(i)] = run_request(client, bodies[size_t(i)], a.max_tokens);
      });
    for (auto& t : clients) t.join();
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    const auto after = scrape_metrics(probe);
    const auto delta = [&](const char* k) { return after.count(k) ? after.at(k) - (before.count(k) ? before.at(k) : 0) : 0.0; };

    std::vector<double> ttft, tpot, itl;
    int64_t tokens = 0, failed = 0;
    std::string first_error;
    for (const auto& t : timings) {
      if (!t.ok) {
        if (!failed++) first_error = t.error;
        continue;
      }
      tokens += t.n_tokens;
      ttft.push_back(t.ttft_ms);
      if (t.n_tokens > 1) tpot.push_back((t.last_token_ms - t.ttft_ms) / double(t.n_tokens - 1));
      itl.insert(itl.end(), t.itl_ms.begin(), t.itl_ms.end());
    }
    if (failed) fmt::print(stderr, "bench serve: {} of {} requests failed, the first: {}\n", failed, n_requests, first_error);
    const Percentiles p_ttft = percentiles(ttft), p_tpot = percentiles(tpot), p_itl = percentiles(itl);
    const double steps = delta("engine_steps_total");
    const double step_ms = steps > 0 ? 1e3 * delta("engine_step_seconds_total") / steps : 0;
    const double forward_ms = steps > 0 ? 1e3 * delta("engine_forward_seconds_total") / steps : 0;
    const double tokens_per_step = steps > 0 ? delta("generation_tokens_total") / steps : 0;
    fmt::print("{:>5} {:>5} {:>8.2f} {:>10.1f} {:>18} {:>18} {:>18} {:>12.3f} {:>12.3f} {:>10.1f}\n", conc, n_requests,
               seconds, double(tokens) / seconds, fmt::format("{:.1f} / {:.1f}", p_ttft.p50, p_ttft.p90),
               fmt::format("{:.2f} / {:.2f}", p_tpot.p50, p_tpot.p90), fmt::format("{:.2f} / {:.2f}", p_itl.p50, p_itl.p99),
               step_ms, forward_ms, tokens_per_step);
    results.push_back({{"concurrency", conc}, {"requests", n_requests}, {"failed", failed}, {"seconds", seconds},
                       {"output_tokens", tokens}, {"output_tokens_per_s", double(tokens) / seconds},
                       {"ttft_ms", {{"p50", p_ttft.p50}, {"p90", p_ttft.p90}, {"p99", p_ttft.p99}, {"mean", p_ttft.mean}}},
                       {"tpot_ms", {{"p50", p_tpot.p50}, {"p90", p_tpot.p90}, {"p99", p_tpot.p99}, {"mean", p_tpot.mean}}},
                       {"itl_ms", {{"p50", p_itl.p50}, {"p90", p_itl.p90}, {"p99", p_itl.p99}, {"mean", p_itl.mean}}},
                       {"engine_step_ms", step_ms}, {"engine_forward_ms", forward_ms},
                       {"generated_tokens_per_step", tokens_per_step}});
    if (failed == n_requests) fail("bench serve: every request at concurrency {} failed: {}", conc, first_error);
  }
  fmt::print("step_ms / forward_ms: the server's mean engine step and model forward over the level (/metrics), prefill\n"
             "chunks included; tok/step: tokens generated per step (the decode batch). With long outputs most steps are\n"
             "decodes, and tpot - step_ms is about what HTTP, detokenizing and the engine thread add per token.\n");
  std::ofstream out(a.json_path);
  if (!out) fail("--json {}: cannot open for writing", a.json_path);
  out << json{{"url", a.url}, {"model", model}, {"prompt_tokens", a.prompt_tokens}, {"max_tokens", a.max_tokens},
              {"temperature", a.temperature}, {"top_p", a.top_p}, {"levels", results}}.dump(2) << "\n";
  return 0;
}

}  // namespace

Command add_bench_serve_command(CLI::App& app) {
  auto a = std::make_shared<BenchServeArgs>();
  CLI::App* bench = app.get_subcommand("bench");  // made by add_bench_command
  auto* cmd = bench->add_subcommand("serve", "load a running server with concurrent streaming clients: TTFT, TPOT, tokens/s");
  cmd->add_option("--url", a->url, "the server (default http://127.0.0.1:8000)");
  cmd->add_option("--model", a->model, "model name to request (default: the first of /v1/models)");
  cmd->add_option("--concurrency", a->concurrency, "comma-separated numbers of clients at once (default 1,8,32)");
  cmd->add_option("--requests", a->requests, "requests per level (default 4 x concurrency, at least 8)");
  cmd->add_option("--prompt-tokens", a->prompt_tokens, "random prompt ids per request (default 512)");
  cmd->add_option("--max-tokens", a->max_tokens, "tokens generated per request (default 128)");
  cmd->add_option("--vocab", a->vocab, "prompt ids are drawn from [1, vocab) (default 1000)");
  cmd->add_option("--seed", a->seed, "seed of the prompts (request i samples with seed i)");
  cmd->add_option("--temperature", a->temperature, "sampling temperature (default 0: greedy)");
  cmd->add_option("--top-p", a->top_p, "nucleus sampling (default 1: off)");
  cmd->add_option("--api-key", a->api_key, "sent as Authorization: Bearer");
  cmd->add_option("--json", a->json_path, "where to write the results (default bench-serve.json)");
  return {cmd, [a] { return run_bench_serve(*a); }};
}

}  // namespace latentserve::cli
