// `latentserve serve`: the OpenAI-compatible HTTP server (src/server) over one engine.
// SIGINT / SIGTERM stop it: requests in flight end with finish_reason "abort".
#include <fmt/format.h>
#include <signal.h>

#include <atomic>
#include <csignal>
#include <chrono>
#include <filesystem>
#include <optional>
#include <thread>

#include "cli/commands.h"
#include "cli/engine_args.h"
#include "core/error.h"
#include "model/architectures.h"
#include "server/async_engine.h"
#include "server/openai_server.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace latentserve::cli {

namespace {

volatile std::sig_atomic_t g_stop_requested = 0;

struct ServeArgs {
  ModelArgs model;
  EngineArgs engine;
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string served_model_name;
  std::string api_key;
};

int run_serve(const ServeArgs& a) {
  // SIGINT / SIGTERM set a flag (whichever thread takes them: BLAS libraries start threads of
  // their own before main); the watcher thread below stops the server when it sees it.
  struct sigaction on_stop {};
  on_stop.sa_handler = [](int) { g_stop_requested = 1; };
  sigemptyset(&on_stop.sa_mask);
  sigaction(SIGINT, &on_stop, nullptr);
  sigaction(SIGTERM, &on_stop, nullptr);

  const std::filesystem::path dir(a.model.model_dir);
  std::optional<tokenizer::Tokenizer> tok;
  if (!a.model.model_dir.empty() && std::filesystem::exists(dir / "tokenizer.json")) tok = tokenizer::Tokenizer::from_file((dir / "tokenizer.json").string());
  std::optional<tokenizer::ChatTemplate> chat;
  if (tok && std::filesystem::exists(dir / "tokenizer_config.json")) {
    try {
      chat.emplace(tokenizer::ChatTemplate::from_config_file((dir / "tokenizer_config.json").string()));
    } catch (const Error& e) {
      fmt::print(stderr, "latentserve serve: no chat template, /v1/chat/completions will answer 400 ({})\n", e.what());
    }
  }
  if (!tok) fmt::print(stderr, "latentserve serve: no tokenizer.json: prompts must be token ids, outputs carry no text\n");

  ThreadPool pool(a.model.threads);
  auto model = a.model.load(pool);
  const EngineConfig config = a.engine.engine_config(*model, a.model);
  LLMEngine engine(*model, config, pool, tok ? &*tok : nullptr);
  server::AsyncEngine async_engine(engine);

  server::ServerConfig sc;
  sc.host = a.host;
  sc.port = a.port;
  sc.served_model_name = a.served_model_name.empty() ? a.model.name() : a.served_model_name;
  sc.model_root = a.model.name();
  sc.max_model_len = config.scheduler.max_model_len;
  sc.api_key = a.api_key;
  // Requests past max_num_seqs wait in the engine's queue, each holding an HTTP thread.
  sc.n_http_threads = int(std::max<int64_t>(32, 4 * a.engine.max_num_seqs + 16));
  server::OpenAiServer http(async_engine, tok ? &*tok : nullptr, chat ? &*chat : nullptr, sc);
  const int port = http.bind();
  const KvCacheStats kv = engine.kv_manager().stats();
  fmt::print(stderr, "latentserve serve: '{}' on http://{}:{} (device {}, max_model_len {}, KV cache {} blocks of {} tokens)\n",
             sc.served_model_name, a.host, port, a.model.device, sc.max_model_len, kv.n_blocks_total,
             engine.block_size_tokens());
  std::fflush(stderr);

  const auto serving_since = std::chrono::steady_clock::now();
  std::atomic<bool> serving_done{false};
  std::thread watcher([&] {
    while (!serving_done && !g_stop_requested) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    // Responses in flight end with "abort" (up to 2 s), then the sockets close. stop() is a
    // no-op until listening has begun: repeat until run() has returned.
    while (!serving_done) {
      http.stop(std::chrono::milliseconds(2000));
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  http.run();
  serving_done = true;
  watcher.join();
  async_engine.shutdown();
  const double uptime = std::chrono::duration<double>(std::chrono::steady_clock::now() - serving_since).count();
  fmt::print(stderr, "latentserve serve: stopped after {:.1f} s\n{}", uptime, engine.metrics().summary(uptime));
  return 0;
}

}  // namespace

Command add_serve_command(CLI::App& app) {
  auto args = std::make_shared<ServeArgs>();
  auto* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server (/v1/completions, /v1/chat/completions, /v1/models)");
  args->model.add_to(cmd);
  args->model.add_synthetic_to(cmd);
  args->engine.add_to(cmd);
  cmd->add_option("--host", args->host, "address to listen on (default 127.0.0.1; 0.0.0.0 for every interface)");
  cmd->add_option("--port", args->port, "port (default 8000; 0 = any free port, printed at start)");
  cmd->add_option("--served-model-name", args->served_model_name, "the model name clients use (default: the --model path)");
  cmd->add_option("--api-key", args->api_key, "require \"Authorization: Bearer KEY\" on /v1/*");
  return {cmd, [args] { return run_serve(*args); }};
}

}  // namespace latentserve::cli
