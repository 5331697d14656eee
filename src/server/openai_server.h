#pragma once
// OpenAiServer: the OpenAI-compatible HTTP front end over an AsyncEngine.
//   POST /v1/completions, POST /v1/chat/completions   (JSON, or SSE with "stream": true)
//   GET  /v1/models, GET /health, GET /metrics (Prometheus text)
// Bad input gets a 4xx and OpenAI's error object naming the parameter; a request whose
// client goes away is aborted at once (its KV blocks return to the pool): a streamed
// response notices on its next write, a plain one through a whitespace heartbeat.
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "server/async_engine.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace latentserve::server {

struct ServerConfig {
  std::string host = "127.0.0.1";
  int port = 8000;                      // 0: any free port (bind() says which)
  std::string served_model_name;        // what /v1/models lists and requests must name
  std::string model_root;               // the checkpoint folder (shown in /v1/models)
  int64_t max_model_len = 0;            // prompt + completion tokens
  std::string api_key;                  // non-empty: /v1/* need "Authorization: Bearer <key>"
  int n_http_threads = 64;              // connections served at once; generations may hold all but 8
  int heartbeat_ms = 1000;              // a waiting response writes a keep-alive this often
};

class OpenAiServer {
 public:
  // tokenizer: needed for text prompts, stop strings and text output; chat_template: for
  // /v1/chat/completions. Either may be null (those requests then get a 400 saying why).
  OpenAiServer(AsyncEngine& engine, const tokenizer::Tokenizer* tokenizer, const tokenizer::ChatTemplate* chat_template,
               ServerConfig config);
  ~OpenAiServer();

  int bind();   // binds host:port, returns the port (throws Error when it cannot)
  void run();   // serves until stop(); call after bind()
  // Safe from any thread. New generations get 503; open ones are aborted and given up to
  // `drain` to write their last chunk ("abort", [DONE]) or body; then the sockets close.
  // stop() does nothing while run() has not started listening: call it until run() returns.
  void stop(std::chrono::milliseconds drain = std::chrono::milliseconds(2000));

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace latentserve::server
