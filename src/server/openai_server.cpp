#include "server/openai_server.h"

#include <fmt/format.h>
#include <httplib.h>

#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "core/error.h"
#include "server/openai_protocol.h"

namespace latentserve::server {

namespace {

using json = nlohmann::json;

int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string random_hex(size_t n_chars) {
  static std::mutex mutex;
  static std::mt19937_64 rng{std::random_device{}()};
  std::lock_guard lock(mutex);
  std::string s;
  while (s.size() < n_chars) s += fmt::format("{:016x}", rng());
  return s.substr(0, n_chars);
}

// Text from a model is valid UTF-8 (the detokenizer replaces broken bytes); a client's
// strings echoed back may not be: replace, never throw, while writing a response.
std::string to_text(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// "; charset=utf-8" also keeps cpp-httplib from gzipping a body whose heartbeat spaces must
// reach the client as they are written (it compresses only the bare "application/json").
constexpr const char* kJson = "application/json; charset=utf-8";

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(to_text(error_body(e)), kJson);
}

// One response in flight: what the HTTP thread writing it keeps between provider calls.
struct ResponseState {
  GenerationRequest request;
  ResponseMeta meta;
  std::string engine_id;
  std::shared_ptr<OutputStream> stream;
  std::string echo_text;                        // completions with echo: the prompt's text
  bool with_token_ids = false;                  // choices list their token ids (asked for, or no tokenizer)
  std::map<int32_t, ChoiceResult> choices;      // non-streaming: gathered per index
  bool started = false;                         // streaming: the first chunks are out
  std::map<int32_t, int64_t> text_offset;       // per choice: bytes of its text so far (logprobs' text_offset)
  Usage usage;
  TokenText token_text;
  std::chrono::steady_clock::time_point last_write = std::chrono::steady_clock::now();
};

void add_usage(Usage& usage, const RequestOutput& o) {
  if (!o.finished) return;
  usage.completion_tokens += int64_t(o.output_tokens.size());
  if (usage.prompt_tokens == 0) {  // the first to finish: the n completions share one prompt
    usage.prompt_tokens = o.n_prompt_tokens;
    usage.cached_tokens = o.n_cached_tokens;
  }
}

}  // namespace

struct OpenAiServer::Impl {
  AsyncEngine& engine;
  const tokenizer::Tokenizer* tokenizer;
  const tokenizer::ChatTemplate* chat_template;
  ServerConfig config;
  httplib::Server http;
  int64_t started_at = unix_seconds();
  int bound_port = -1;
  std::atomic<int64_t> responses_in_flight{0};  // generation requests from arrival to the response's release
  std::atomic<bool> draining{false};            // stop(): no new generations, let the open ones end

  Impl(AsyncEngine& e, const tokenizer::Tokenizer* t, const tokenizer::ChatTemplate* c, ServerConfig cfg)
      : engine(e), tokenizer(t), chat_template(c), config(std::move(cfg)) {
    const size_t n_threads = size_t(std::max(config.n_http_threads, 2));
    http.new_task_queue = [n_threads] { return new httplib::ThreadPool(n_threads); };
    http.set_payload_max_length(size_t(64) << 20);
    http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (config.api_key.empty() || req.path.rfind("/v1/", 0) != 0) return httplib::Server::HandlerResponse::Unhandled;
      if (req.get_header_value("Authorization") == "Bearer " + config.api_key)
        return httplib::Server::HandlerResponse::Unhandled;
      send_error(res, ApiError(401, "missing or wrong API key: send \"Authorization: Bearer <key>\"", "", "authentication_error", "invalid_api_key"));
      return httplib::Server::HandlerResponse::Handled;
    });
    http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      const EngineSnapshot s = engine.snapshot();
      if (s.healthy) res.set_content("", "text/plain");
      else send_error(res, ApiError(503, s.failure, "", "server_error"));
    });
    http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      json model = {{"id", config.served_model_name}, {"object", "model"}, {"created", started_at},
                    {"owned_by", "latentserve"}, {"root", config.model_root}, {"parent", nullptr},
                    {"max_model_len", config.max_model_len}};
      res.set_content(to_text(json{{"object", "list"}, {"data", json::array({model})}}), kJson);
    });
    http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(metrics_text(), "text/plain; version=0.0.4");
    });
    http.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) { tokenize(req, res); });
    http.Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) { detokenize(req, res); });
    http.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
      generate(req, res, Endpoint::Completions);
    });
    http.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
      generate(req, res, Endpoint::ChatCompletions);
    });
    http.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty() || res.content_provider_) return;
      if (res.status == 404)
        send_error(res, ApiError(404, fmt::format("no route {} {}", req.method, req.path), "", "not_found_error"));
      else
        send_error(res, ApiError(res.status, fmt::format("HTTP {} on {} {}", res.status, req.method, req.path)));
    });
    http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
      std::string what = "unknown error";
      try {
        std::rethrow_exception(ep);
      } catch (const std::exception& e) {
        what = e.what();
      } catch (...) {
      }
      send_error(res, ApiError(500, "internal error: " + what, "", "server_error"));
    });
  }

  std::vector<int32_t> prompt_tokens(const GenerationRequest& r) const {
    if (r.endpoint == Endpoint::ChatCompletions) {
      if (!chat_template)
        throw ApiError(400, "this model has no chat template (tokenizer_config.json 'chat_template'); use /v1/completions", "messages");
      std::string text;
      try {
        text = chat_template->apply(r.messages, r.add_generation_prompt, r.chat_template_kwargs);
      } catch (const std::exception& e) {
        throw ApiError(400, fmt::format("the chat template failed on these messages: {}", e.what()), "messages");
      }
      // The template writes the special tokens (BOS) itself, as transformers' apply_chat_template.
      return tokenizer->encode(text, /*add_special_tokens=*/false);
    }
    if (!r.prompt_text) return r.prompt_ids;
    if (!tokenizer) throw ApiError(400, "a text prompt needs the model's tokenizer.json; send token ids instead", "prompt");
    return tokenizer->encode(*r.prompt_text);
  }

  // A place among the responses in flight, taken before anything else (so stop() waits for it
  // and the busy limit cannot be overrun by a burst); given back unless handed to the releaser.
  struct InFlightSlot {
    std::atomic<int64_t>& count;
    bool handed_over = false;
    explicit InFlightSlot(std::atomic<int64_t>& c) : count(c) { ++count; }
    ~InFlightSlot() {
      if (!handed_over) --count;
    }
  };

  static json parse_body(const httplib::Request& req) {
    try {
      return json::parse(req.body);
    } catch (const json::exception& e) {
      throw ApiError(400, fmt::format("the request body is not valid JSON: {}", e.what()));
    }
  }

  // vLLM's /tokenize: {"prompt", "add_special_tokens"} or chat {"messages", "add_generation_prompt"}.
  void tokenize(const httplib::Request& req, httplib::Response& res) {
    try {
      const json body = parse_body(req);
      if (!tokenizer) throw ApiError(400, "this model has no tokenizer.json", "prompt");
      std::vector<int32_t> ids;
      if (body.is_object() && body.contains("messages")) {
        ids = prompt_tokens(parse_chat_request(body));
      } else {
        if (!body.is_object() || !body.contains("prompt") || !body["prompt"].is_string())
          throw ApiError(400, "/tokenize needs 'prompt' (a string) or 'messages'", "prompt");
        bool add_special = true;
        if (body.contains("add_special_tokens")) {
          if (!body["add_special_tokens"].is_boolean())
            throw ApiError(400, "'add_special_tokens' must be true or false", "add_special_tokens");
          add_special = body["add_special_tokens"].get<bool>();
        }
        ids = tokenizer->encode(body["prompt"].get<std::string>(), add_special);
      }
      res.set_content(to_text(json{{"count", ids.size()}, {"max_model_len", config.max_model_len}, {"tokens", ids}}), kJson);
    } catch (const ApiError& e) {
      send_error(res, e);
    }
  }

  // vLLM's /detokenize: {"tokens": [ids]} -> {"prompt": text}.
  void detokenize(const httplib::Request& req, httplib::Response& res) {
    try {
      const json body = parse_body(req);
      if (!tokenizer) throw ApiError(400, "this model has no tokenizer.json", "tokens");
      if (!body.is_object() || !body.contains("tokens") || !body["tokens"].is_array())
        throw ApiError(400, "/detokenize needs 'tokens', a list of token ids", "tokens");
      std::vector<int32_t> ids;
      for (const auto& t : body["tokens"]) {
        if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= tokenizer->vocab_size())
          throw ApiError(400, fmt::format("'tokens' must hold ids in [0, {}), found {}", tokenizer->vocab_size(), t.dump()),
                         "tokens");
        ids.push_back(t.get<int32_t>());
      }
      std::string text;
      try {
        text = tokenizer->decode(ids);
      } catch (const Error& e) {
        throw ApiError(400, e.what(), "tokens");
      }
      res.set_content(to_text(json{{"prompt", text}}), kJson);
    } catch (const ApiError& e) {
      send_error(res, e);
    }
  }

  void generate(const httplib::Request& req, httplib::Response& res, Endpoint endpoint) {
    auto state = std::make_shared<ResponseState>();
    InFlightSlot slot(responses_in_flight);
    try {
      if (draining) throw ApiError(503, "the server is shutting down", "", "server_error");
      // Each open response holds an HTTP thread: past this, /health and /metrics would queue.
      if (responses_in_flight > max_responses())
        throw ApiError(503, fmt::format("the server is busy: {} responses in flight; retry later", max_responses()), "",
                       "server_error");
      const json body = parse_body(req);
      state->request = endpoint == Endpoint::Completions ? parse_completion_request(body) : parse_chat_request(body);
      GenerationRequest& r = state->request;
      if (!r.model.empty() && r.model != config.served_model_name)
        throw ApiError(404, fmt::format("the model '{}' does not exist; this server serves '{}'", r.model,
                                        config.served_model_name), "model", "invalid_request_error", "model_not_found");
      std::vector<int32_t> prompt = prompt_tokens(r);
      if (prompt.empty()) throw ApiError(400, "the prompt is empty", endpoint == Endpoint::Completions ? "prompt" : "messages");
      if (!r.max_tokens_given) {  // chat without a limit: up to the model length
        r.params.max_tokens = config.max_model_len - int64_t(prompt.size());
        if (r.params.max_tokens < 1)
          throw ApiError(400, fmt::format("the messages take {} tokens, which leaves no room under the maximum model length {}",
                                          prompt.size(), config.max_model_len), "messages");
      }
      if (r.echo) state->echo_text = r.prompt_text ? *r.prompt_text : tokenizer ? tokenizer->decode(prompt) : "";
      const bool chat = endpoint == Endpoint::ChatCompletions;
      state->meta = {(chat ? "chatcmpl-" : "cmpl-") + random_hex(32), unix_seconds(), config.served_model_name};
      state->engine_id = state->meta.id;
      state->with_token_ids = r.return_token_ids || !tokenizer;
      // A token by its id: when asked, without a tokenizer, or past the tokenizer's vocabulary
      // (embedding rows are often padded); else its text.
      state->token_text = [tok = r.tokens_as_ids ? nullptr : tokenizer](int32_t id) {
        if (!tok || !tok->id_to_token(id)) return fmt::format("token_id:{}", id);
        return tok->decode(std::span<const int32_t>(&id, 1));
      };
      try {
        state->stream = engine.submit(state->engine_id, std::move(prompt), r.params, r.stop);
      } catch (const EngineUnavailable& e) {
        throw ApiError(503, e.what(), "", "server_error");
      } catch (const Error& e) {  // the engine's admission checks (length, vocabulary, stop strings)
        throw ApiError(400, e.what(), endpoint == Endpoint::Completions ? "prompt" : "messages");
      }
    } catch (const ApiError& e) {
      send_error(res, e);
      return;
    }
    // The client may leave at any point from here: the releaser aborts what is unfinished.
    slot.handed_over = true;
    auto release = [this, state](bool) {
      if (!state->stream->all_finished()) engine.abort(state->engine_id);
      --responses_in_flight;
    };
    // A provider that throws would end the worker thread (and the process): end the response.
    auto guarded = [state](auto write) {
      return [state, write](size_t, httplib::DataSink& sink) {
        try {
          return write(*state, sink);
        } catch (const std::exception& e) {
          std::fprintf(stderr, "latentserve serve: response %s failed: %s\n", state->meta.id.c_str(), e.what());
          return false;
        }
      };
    };
    if (state->request.stream) {
      res.set_header("Cache-Control", "no-cache");
      res.set_chunked_content_provider("text/event-stream",
          guarded([this](ResponseState& s, httplib::DataSink& sink) { return write_events(s, sink); }), release);
    } else {
      res.set_chunked_content_provider(kJson,
          guarded([this](ResponseState& s, httplib::DataSink& sink) { return write_body(s, sink); }), release);
    }
  }

  int64_t max_responses() const { return std::max(1, config.n_http_threads - 8); }

  // Non-streaming: gather the choices; until they are done, a space every heartbeat (JSON
  // allows leading whitespace) is what tells us the client is still there.
  bool write_body(ResponseState& s, httplib::DataSink& sink) {
    auto outputs = s.stream->wait(std::chrono::milliseconds(config.heartbeat_ms));
    for (auto& o : outputs) {
      ChoiceResult& c = s.choices[o.index];
      c.index = o.index;
      c.with_token_ids = s.with_token_ids;
      for (auto& x : o.new_samples) c.samples.push_back(std::move(x));
      if (o.finished) {
        add_usage(s.usage, o);
        c.finish_reason = o.finish_reason;
        c.tokens = o.output_tokens;
        c.text = s.echo_text + (tokenizer ? o.text : "");
        c.text_offset = int64_t(s.echo_text.size());
      }
    }
    if (auto why = s.stream->failure()) {
      const std::string body = to_text(error_body(ApiError(500, *why, "", "server_error")));
      sink.write(body.data(), body.size());
      sink.done();
      return true;
    }
    if (!s.stream->finished()) return keep_alive(s, sink, " ");
    std::vector<ChoiceResult> choices;
    for (auto& [i, c] : s.choices) choices.push_back(std::move(c));
    const json body = s.request.endpoint == Endpoint::Completions
                          ? completion_response(s.meta, choices, s.usage, s.token_text)
                          : chat_response(s.meta, choices, s.usage, s.token_text);
    const std::string text = to_text(body);
    sink.write(text.data(), text.size());
    sink.done();
    return true;
  }

  // Writes `filler` when nothing was written for a heartbeat: a write to a client that has
  // gone fails, which ends the response and aborts the request. False then.
  bool keep_alive(ResponseState& s, httplib::DataSink& sink, std::string_view filler) const {
    const auto now = std::chrono::steady_clock::now();
    if (now - s.last_write < std::chrono::milliseconds(config.heartbeat_ms)) return true;
    s.last_write = now;
    return sink.write(filler.data(), filler.size());
  }

  static bool send_event(ResponseState& s, httplib::DataSink& sink, const json& data) {
    const std::string event = "data: " + to_text(data) + "\n\n";
    s.last_write = std::chrono::steady_clock::now();
    return sink.write(event.data(), event.size());
  }

  // Streaming: one SSE event per choice per step, then the usage (when asked) and [DONE].
  bool write_events(ResponseState& s, httplib::DataSink& sink) {
    const bool chat = s.request.endpoint == Endpoint::ChatCompletions;
    if (!s.started) {  // chat: every choice opens with its role; completions: the echoed prompt
      s.started = true;
      for (int32_t i = 0; i < s.request.params.n; ++i) {
        ChoiceResult open;
        open.index = i;
        open.text = s.echo_text;
        if (chat ? !send_event(s, sink, chat_chunk(s.meta, open, true, s.token_text))
                 : !s.echo_text.empty() && !send_event(s, sink, completion_chunk(s.meta, open, s.token_text)))
          return false;
        s.text_offset[i] = int64_t(s.echo_text.size());
      }
    }
    auto outputs = s.stream->wait(std::chrono::milliseconds(config.heartbeat_ms));
    for (auto& o : outputs) {
      ChoiceResult delta;
      delta.index = o.index;
      delta.with_token_ids = s.with_token_ids;
      delta.text = tokenizer ? o.new_text : "";
      delta.text_offset = s.text_offset[o.index];
      for (const auto& x : o.new_samples) s.text_offset[o.index] += int64_t(s.token_text(x.token).size());
      delta.tokens = o.new_tokens;
      delta.samples = std::move(o.new_samples);
      delta.finish_reason = o.finished ? o.finish_reason : "";
      add_usage(s.usage, o);
      // Text held back (a possible stop string, an unfinished character) sends nothing yet,
      // unless the client reads token ids.
      if (delta.text.empty() && delta.samples.empty() && delta.finish_reason.empty() &&
          !(delta.with_token_ids && !delta.tokens.empty()))
        continue;
      const json chunk = chat ? chat_chunk(s.meta, delta, false, s.token_text) : completion_chunk(s.meta, delta, s.token_text);
      if (!send_event(s, sink, chunk)) return false;
    }
    if (auto why = s.stream->failure()) {
      send_event(s, sink, error_body(ApiError(500, *why, "", "server_error")));
    } else if (!s.stream->finished()) {
      return keep_alive(s, sink, ": keep-alive\n\n");  // an SSE comment: clients skip it
    } else if (s.request.include_usage && !send_event(s, sink, usage_chunk(s.meta, s.request.endpoint, s.usage))) {
      return false;
    }
    static const char kDone[] = "data: [DONE]\n\n";
    sink.write(kDone, sizeof(kDone) - 1);
    sink.done();
    return true;
  }

  std::string metrics_text() const {
    const EngineSnapshot s = engine.snapshot();
    const std::string label = fmt::format("{{model_name=\"{}\"}}", config.served_model_name);
    std::string out;
    auto metric = [&](const char* name, const char* type, const char* help, double value) {
      out += fmt::format("# HELP latentserve:{} {}\n# TYPE latentserve:{} {}\nlatentserve:{}{} {}\n", name, help, name,
                         type, name, label, value);
    };
    metric("num_requests_running", "gauge", "Completions in the running batch.", double(s.n_running));
    metric("num_requests_waiting", "gauge", "Completions waiting to be admitted.", double(s.n_waiting));
    metric("kv_cache_usage_perc", "gauge", "Fraction of KV blocks referenced by live sequences (0 to 1).", s.kv.usage());
    metric("kv_blocks_total", "gauge", "Usable KV blocks.", double(s.kv.n_blocks_total));
    metric("kv_blocks_used", "gauge", "KV blocks with a reference count above zero.", double(s.kv.n_blocks_used));
    metric("kv_blocks_cached", "gauge", "KV blocks registered in the prefix cache.", double(s.kv.n_blocks_cached));
    metric("prefix_cache_queries_total", "counter", "Prompt tokens looked up in the prefix cache.", double(s.kv.prefix_queried_tokens));
    metric("prefix_cache_hits_total", "counter", "Of those, tokens found cached.", double(s.kv.prefix_hit_tokens));
    metric("prompt_tokens_total", "counter", "Prompt tokens of admitted requests.", double(s.prompt_tokens));
    metric("generation_tokens_total", "counter", "Tokens generated.", double(s.generated_tokens));
    metric("request_success_total", "counter", "Completions that finished (stop or length).", double(s.n_finished));
    metric("request_aborted_total", "counter", "Completions aborted (client gone or shutdown).", double(s.n_aborted));
    metric("num_preemptions_total", "counter", "Preemptions by recompute.", double(s.n_preemptions));
    metric("engine_steps_total", "counter", "Engine steps run.", double(s.n_steps));
    metric("engine_step_seconds_total", "counter", "Wall time inside engine steps.", s.step_seconds);
    metric("engine_forward_seconds_total", "counter", "Of which in the model's forward (and token choice).", s.forward_seconds);
    metric("healthy", "gauge", "1 while the engine serves, 0 after a failed step.", s.healthy ? 1.0 : 0.0);
    return out;
  }
};

OpenAiServer::OpenAiServer(AsyncEngine& engine, const tokenizer::Tokenizer* tokenizer,
                           const tokenizer::ChatTemplate* chat_template, ServerConfig config)
    : impl_(std::make_unique<Impl>(engine, tokenizer, chat_template, std::move(config))) {
  if (chat_template && !tokenizer) fail("a chat template needs the tokenizer (tokenizer.json) too");
}

OpenAiServer::~OpenAiServer() { stop(std::chrono::milliseconds(0)); }

int OpenAiServer::bind() {
  const ServerConfig& c = impl_->config;
  // Debian's cpp-httplib listens with a backlog of 5: 64 clients connecting at once overflowed
  // it (SYN cookies then failed some connections: client "Read" errors, nothing in the server's
  // log). Keep the socket and listen again with the system's maximum once bound.
  int listening_fd = -1;
  impl_->http.set_socket_options([&listening_fd](socket_t fd) {
    int yes = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    listening_fd = int(fd);
  });
  const int port = c.port == 0 ? impl_->http.bind_to_any_port(c.host) : (impl_->http.bind_to_port(c.host, c.port) ? c.port : -1);
  if (port < 0) fail("cannot listen on {}:{} (address in use, or not an address of this machine?)", c.host, c.port);
  if (listening_fd >= 0 && ::listen(listening_fd, SOMAXCONN) != 0)
    fail("listen(backlog {}) on {}:{} failed: {}", SOMAXCONN, c.host, port, std::strerror(errno));
  impl_->bound_port = port;
  return port;
}

void OpenAiServer::run() {
  if (impl_->bound_port < 0) fail("OpenAiServer::run() before bind()");
  impl_->http.listen_after_bind();
}

void OpenAiServer::stop(std::chrono::milliseconds drain) {
  Impl& s = *impl_;
  if (drain.count() > 0 && !s.draining.exchange(true)) {
    // Open responses end properly (finish_reason "abort", [DONE]) before the sockets close.
    s.engine.abort_all();
    const auto until = std::chrono::steady_clock::now() + drain;
    while (s.responses_in_flight > 0 && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (s.http.is_running()) s.http.stop();
}

}  // namespace latentserve::server
