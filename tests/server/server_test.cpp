// The OpenAI-compatible server over HTTP: outputs against transformers' greedy
// continuations, streaming against non-streaming, the error objects, aborts when the
// client leaves (every KV block back in the pool) and concurrent clients.
#include <gtest/gtest.h>

#include <atomic>
#include <future>

#include "server/test_server.h"

namespace latentserve::testing {
namespace {

using json = nlohmann::json;

struct Reply {
  int status = 0;
  json body;
  std::string raw;
};

Reply post(const TestServer& server, const std::string& path, const json& body, httplib::Headers headers = {}) {
  httplib::Client c = server.client();
  auto res = c.Post(path.c_str(), headers, body.dump(), "application/json");
  if (!res) return {-1, nullptr, "no response: " + httplib::to_string(res.error())};
  Reply r{res->status, nullptr, res->body};
  r.body = json::parse(res->body, nullptr, /*allow_exceptions=*/false);
  return r;
}

// The data events of an SSE response; `done` when the last one was [DONE].
struct Events {
  int status = 0;
  std::vector<json> data;
  bool done = false;
};

Events post_stream(const TestServer& server, const std::string& path, const json& body) {
  httplib::Client c = server.client();
  auto res = c.Post(path.c_str(), body.dump(), "application/json");
  Events e;
  if (!res) return e;
  e.status = res->status;
  size_t at = 0;
  for (size_t end; (end = res->body.find("\n\n", at)) != std::string::npos; at = end + 2) {
    const std::string event = res->body.substr(at, end - at);
    if (event.rfind(":", 0) == 0) continue;  // a keep-alive comment
    EXPECT_EQ(event.rfind("data: ", 0), 0u) << event;
    EXPECT_FALSE(e.done) << "an event after [DONE]";
    if (event == "data: [DONE]") e.done = true;
    else e.data.push_back(json::parse(event.substr(6)));
  }
  EXPECT_EQ(at, res->body.size()) << "the stream ends mid-event";
  return e;
}

std::vector<int32_t> ids_of_logprobs(const json& logprobs_tokens) {
  std::vector<int32_t> ids;
  for (const auto& t : logprobs_tokens) ids.push_back(std::stoi(t.get<std::string>().substr(std::string("token_id:").size())));
  return ids;
}

std::vector<int32_t> int_list(const json& j) { return j.get<std::vector<int32_t>>(); }

// Greedy completions of the fixture prompts (as token ids) are transformers' greedy
// continuations; the text is what the tokenizer decodes them to; usage counts them.
TEST(Server, GreedyCompletionsEqualTransformers) {
  TestServer server;
  const json ref = fixture_reference();
  for (size_t i = 0; i < ref["prompts"].size(); ++i) {
    const auto prompt = int_list(ref["prompts"][i]);
    const auto greedy = int_list(ref["greedy"][i]);
    const Reply r = post(server, "/v1/completions",
                         {{"model", server.model_name()}, {"prompt", prompt}, {"max_tokens", greedy.size()},
                          {"temperature", 0}, {"ignore_eos", true}, {"logprobs", 1}, {"return_tokens_as_token_ids", true}});
    ASSERT_EQ(r.status, 200) << r.raw;
    const json& choice = r.body["choices"][0];
    EXPECT_EQ(ids_of_logprobs(choice["logprobs"]["tokens"]), greedy) << "prompt " << i;
    EXPECT_EQ(choice["text"], server.tokenizer().decode(greedy, true));
    EXPECT_EQ(choice["finish_reason"], "length");
    EXPECT_EQ(r.body["object"], "text_completion");
    EXPECT_EQ(r.body["model"], server.model_name());
    EXPECT_EQ(r.body["id"].get<std::string>().rfind("cmpl-", 0), 0u);
    EXPECT_EQ(r.body["usage"]["prompt_tokens"], prompt.size());
    EXPECT_EQ(r.body["usage"]["completion_tokens"], greedy.size());
    EXPECT_EQ(r.body["usage"]["total_tokens"], prompt.size() + greedy.size());
    // Greedy: the chosen token is the top-1, and its logprob is a probability's log.
    for (const auto& lp : choice["logprobs"]["token_logprobs"]) EXPECT_LE(lp.get<double>(), 0.0);
  }
}

// A text prompt is tokenized by tokenizer.json (here id == byte) and equals the same ids.
TEST(Server, TextPromptEqualsItsTokenIds) {
  TestServer server;
  const json common = {{"max_tokens", 6}, {"temperature", 0}, {"ignore_eos", true}};
  json by_text = common, by_ids = common;
  by_text["prompt"] = "Hi!";
  by_ids["prompt"] = {72, 105, 33};
  const Reply a = post(server, "/v1/completions", by_text), b = post(server, "/v1/completions", by_ids);
  ASSERT_EQ(a.status, 200) << a.raw;
  ASSERT_EQ(b.status, 200) << b.raw;
  EXPECT_EQ(a.body["choices"][0]["text"], b.body["choices"][0]["text"]);
  EXPECT_EQ(a.body["usage"]["prompt_tokens"], 3);
  by_text["echo"] = true;
  const Reply echoed = post(server, "/v1/completions", by_text);
  EXPECT_EQ(echoed.body["choices"][0]["text"], "Hi!" + a.body["choices"][0]["text"].get<std::string>());
}

// The streamed deltas concatenate to the non-streamed text, each event is a well-formed
// chunk, the finish reason comes last, the usage chunk when asked, then [DONE].
TEST(Server, StreamingEqualsNonStreaming) {
  TestServer server;
  for (const char* path : {"/v1/completions", "/v1/chat/completions"}) {
    const bool chat = std::string(path) == "/v1/chat/completions";
    json body = {{"max_tokens", 20}, {"temperature", 0}, {"ignore_eos", true}};
    if (chat) body["messages"] = {{{"role", "user"}, {"content", "Tell me a story."}}};
    else body["prompt"] = "Once upon a time";
    const Reply whole = post(server, path, body);
    ASSERT_EQ(whole.status, 200) << whole.raw;
    const std::string expected = chat ? whole.body["choices"][0]["message"]["content"].get<std::string>()
                                      : whole.body["choices"][0]["text"].get<std::string>();
    body["stream"] = true;
    body["stream_options"] = {{"include_usage", true}};
    const Events events = post_stream(server, path, body);
    ASSERT_EQ(events.status, 200);
    EXPECT_TRUE(events.done);
    ASSERT_GE(events.data.size(), 3u);
    std::string text;
    std::string finish;
    for (size_t i = 0; i + 1 < events.data.size(); ++i) {
      const json& e = events.data[i];
      EXPECT_EQ(e["object"], chat ? "chat.completion.chunk" : "text_completion");
      EXPECT_EQ(e["id"], events.data[0]["id"]);
      ASSERT_EQ(e["choices"].size(), 1u);
      const json& c = e["choices"][0];
      EXPECT_TRUE(finish.empty()) << "a chunk after the finish reason";
      if (!c["finish_reason"].is_null()) finish = c["finish_reason"];
      if (chat) {
        if (i == 0) {
          EXPECT_EQ(c["delta"]["role"], "assistant");
        }
        if (c["delta"].contains("content")) text += c["delta"]["content"].get<std::string>();
      } else {
        text += c["text"].get<std::string>();
      }
    }
    EXPECT_EQ(text, expected) << path;
    EXPECT_EQ(finish, "length");
    const json& usage = events.data.back()["usage"];
    EXPECT_EQ(events.data.back()["choices"], json::array());
    EXPECT_EQ(usage["prompt_tokens"], whole.body["usage"]["prompt_tokens"]);
    EXPECT_EQ(usage["completion_tokens"], 20);
    // The same prompt a second time: its full 16-token blocks come from the prefix cache.
    const int64_t prompt_tokens = usage["prompt_tokens"];
    EXPECT_EQ(usage["prompt_tokens_details"]["cached_tokens"], (prompt_tokens - 1) / 16 * 16);
  }
}

// Chat: the prompt is the chat template rendered (add_generation_prompt) and tokenized
// without special tokens; the reply equals a completion of exactly those tokens.
TEST(Server, ChatUsesTheTemplate) {
  TestServer server;
  const json messages = {{{"role", "system"}, {"content", "You are terse."}}, {{"role", "user"}, {"content", "Hello?"}}};
  const Reply chat = post(server, "/v1/chat/completions",
                          {{"messages", messages}, {"max_tokens", 12}, {"temperature", 0}, {"ignore_eos", true}});
  ASSERT_EQ(chat.status, 200) << chat.raw;
  const std::string rendered = "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHello?<|im_end|>\n<|im_start|>assistant\n";
  const auto ids = server.tokenizer().encode(rendered, false);
  EXPECT_EQ(chat.body["usage"]["prompt_tokens"], ids.size());
  const Reply plain = post(server, "/v1/completions", {{"prompt", ids}, {"max_tokens", 12}, {"temperature", 0}, {"ignore_eos", true}});
  EXPECT_EQ(chat.body["choices"][0]["message"]["content"], plain.body["choices"][0]["text"]);
  EXPECT_EQ(chat.body["object"], "chat.completion");
  EXPECT_EQ(chat.body["choices"][0]["message"]["role"], "assistant");

  // Without max_tokens a chat reply may run to the model length (128 here), and stops on
  // a stop string, which is cut from the text.
  const Reply open = post(server, "/v1/chat/completions", {{"messages", messages}, {"temperature", 0}, {"ignore_eos", true}});
  ASSERT_EQ(open.status, 200) << open.raw;
  EXPECT_EQ(open.body["usage"]["prompt_tokens"].get<int>() + open.body["usage"]["completion_tokens"].get<int>(), 128);
  const std::string full = open.body["choices"][0]["message"]["content"];
  // A stop string of two whole characters from the middle of the reply (bytes >= 0x80 decode
  // to U+FFFD here, three bytes each).
  std::vector<size_t> starts;
  for (size_t i = 0; i < full.size(); ++i)
    if ((static_cast<unsigned char>(full[i]) & 0xC0) != 0x80) starts.push_back(i);
  ASSERT_GT(starts.size(), 8u);
  const std::string stop = full.substr(starts[5], starts[7] - starts[5]);
  const Reply stopped = post(server, "/v1/chat/completions",
                             {{"messages", messages}, {"temperature", 0}, {"ignore_eos", true}, {"stop", {stop}}});
  EXPECT_EQ(stopped.body["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(stopped.body["choices"][0]["message"]["content"], full.substr(0, full.find(stop)));
}

// n > 1 with a seed: n choices in index order, reproducible, sharing one prompt count.
TEST(Server, SeededSamplingWithSeveralChoices) {
  TestServer server;
  const json body = {{"prompt", "abc"}, {"max_tokens", 10}, {"temperature", 1.0}, {"top_p", 0.9}, {"seed", 1234},
                     {"n", 3}, {"ignore_eos", true}};
  const Reply a = post(server, "/v1/completions", body), b = post(server, "/v1/completions", body);
  ASSERT_EQ(a.status, 200) << a.raw;
  ASSERT_EQ(a.body["choices"].size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(a.body["choices"][i]["index"], i);
  EXPECT_EQ(a.body["choices"], b.body["choices"]);
  EXPECT_EQ(a.body["usage"]["prompt_tokens"], 3);
  EXPECT_EQ(a.body["usage"]["completion_tokens"], 30);
  EXPECT_NE(a.body["choices"][0]["text"], a.body["choices"][1]["text"]);  // 10 sampled bytes each
}

// Bad input: 4xx with OpenAI's error object naming the parameter; nothing is queued.
TEST(Server, ErrorsNameTheParameter) {
  TestServer server;
  struct Case {
    std::string path, body;
    int status;
    std::string param, says;
  };
  const Case cases[] = {
      {"/v1/completions", "{not json", 400, "", "not valid JSON"},
      {"/v1/completions", R"({"prompt": "x", "temperature": 3})", 400, "temperature", "temperature"},
      {"/v1/completions", R"({"max_tokens": 3})", 400, "prompt", "'prompt' is required"},
      {"/v1/completions", R"({"prompt": "x", "model": "gpt-9"})", 404, "model", "gpt-9"},
      {"/v1/completions", R"({"prompt": [1, 999]})", 400, "prompt", "vocabulary"},
      {"/v1/completions", R"({"prompt": "x", "max_tokens": 500})", 400, "prompt", "maximum model length 128"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user"}]})", 400, "messages[0].content", "required"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 200})", 400, "messages", "128"},
  };
  for (const auto& c : cases) {
    httplib::Client client = server.client();
    auto res = client.Post(c.path.c_str(), c.body, "application/json");
    ASSERT_TRUE(res) << c.body;
    EXPECT_EQ(res->status, c.status) << c.body << " -> " << res->body;
    const json e = json::parse(res->body)["error"];
    EXPECT_NE(e["message"].get<std::string>().find(c.says), std::string::npos) << e.dump();
    if (c.param.empty()) EXPECT_TRUE(e["param"].is_null());
    else EXPECT_EQ(e["param"], c.param) << e.dump();
    EXPECT_FALSE(e["type"].get<std::string>().empty());
  }
  httplib::Client client = server.client();
  auto missing = client.Get("/v1/nothing");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  EXPECT_NE(json::parse(missing->body)["error"]["message"].get<std::string>().find("/v1/nothing"), std::string::npos);
  const server::EngineSnapshot s = server.engine().snapshot();
  EXPECT_EQ(s.n_running + s.n_waiting, 0);
  EXPECT_EQ(s.kv.n_blocks_used, 0);
}

TEST(Server, ModelsHealthAndMetrics) {
  TestServer server;
  httplib::Client c = server.client();
  auto models = c.Get("/v1/models");
  ASSERT_TRUE(models);
  const json m = json::parse(models->body);
  EXPECT_EQ(m["object"], "list");
  ASSERT_EQ(m["data"].size(), 1u);
  EXPECT_EQ(m["data"][0]["id"], server.model_name());
  EXPECT_EQ(m["data"][0]["max_model_len"], 128);
  EXPECT_EQ(c.Get("/health")->status, 200);
  ASSERT_EQ(post(server, "/v1/completions", {{"prompt", "hello"}, {"max_tokens", 5}, {"ignore_eos", true}}).status, 200);
  const std::string metrics = c.Get("/metrics")->body;
  EXPECT_NE(metrics.find("latentserve:generation_tokens_total{model_name=\"tiny-llama\"} 5\n"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("latentserve:prompt_tokens_total{model_name=\"tiny-llama\"} 5\n"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("latentserve:num_requests_running{model_name=\"tiny-llama\"} 0\n"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("# TYPE latentserve:kv_cache_usage_perc gauge"), std::string::npos);
}

// vLLM's /tokenize and /detokenize: the tokenizer's ids (byte-level here: id == byte), the chat
// prompt as /v1/chat/completions builds it, and errors that name the field.
TEST(Server, TokenizeAndDetokenize) {
  TestServer server;
  const Reply t = post(server, "/tokenize", {{"prompt", "Hi!"}});
  ASSERT_EQ(t.status, 200) << t.raw;
  EXPECT_EQ(int_list(t.body["tokens"]), (std::vector<int32_t>{72, 105, 33}));
  EXPECT_EQ(t.body["count"], 3);
  EXPECT_EQ(t.body["max_model_len"], 128);
  const json messages = {{{"role", "user"}, {"content", "Hello?"}}};
  const Reply chat_ids = post(server, "/tokenize", {{"messages", messages}});
  ASSERT_EQ(chat_ids.status, 200) << chat_ids.raw;
  const Reply chat = post(server, "/v1/chat/completions", {{"messages", messages}, {"max_tokens", 1}});
  EXPECT_EQ(chat_ids.body["count"], chat.body["usage"]["prompt_tokens"]);
  const Reply d = post(server, "/detokenize", {{"tokens", {72, 105, 33}}});
  ASSERT_EQ(d.status, 200) << d.raw;
  EXPECT_EQ(d.body["prompt"], "Hi!");
  const Reply bad = post(server, "/detokenize", {{"tokens", {72, 300}}});
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(bad.body["error"]["param"], "tokens");
  EXPECT_EQ(post(server, "/tokenize", {{"prompt", 5}}).body["error"]["param"], "prompt");
}

TEST(Server, ApiKey) {
  server::ServerConfig config;
  config.api_key = "sesame";
  TestServer server(TestServer::default_engine_config(), config);
  const json body = {{"prompt", "x"}, {"max_tokens", 2}};
  const Reply none = post(server, "/v1/completions", body);
  EXPECT_EQ(none.status, 401);
  EXPECT_EQ(none.body["error"]["code"], "invalid_api_key");
  EXPECT_EQ(post(server, "/v1/completions", body, {{"Authorization", "Bearer wrong"}}).status, 401);
  EXPECT_EQ(post(server, "/v1/completions", body, {{"Authorization", "Bearer sesame"}}).status, 200);
  EXPECT_EQ(server.client().Get("/health")->status, 200);  // only /v1/* is guarded
}

// Waits until the engine has no request left; false after ~10 s.
bool engine_drains(server::AsyncEngine& engine) {
  for (int i = 0; i < 1000; ++i) {
    const server::EngineSnapshot s = engine.snapshot();
    if (s.n_running == 0 && s.n_waiting == 0 && s.kv.n_blocks_used == 0) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// A client that leaves mid-stream, or before a plain response is ready, aborts its request:
// the engine stops generating for it and every KV block it held is free again.
TEST(Server, ClientGoneAbortsAndFreesBlocks) {
  server::ServerConfig config;
  config.heartbeat_ms = 50;
  TestServer server(TestServer::default_engine_config(), config, ServedModel::SlowSyntheticNoTokenizer);
  const int max_tokens = 1000;  // seconds of decoding for this model on a CPU
  for (bool stream : {true, false}) {
    const int64_t aborted_before = server.engine().snapshot().n_aborted;
    httplib::Client c = server.client();
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.set_header("Content-Type", "application/json");
    req.body = json{{"prompt", {1, 2, 3}}, {"max_tokens", max_tokens}, {"ignore_eos", true}, {"stream", stream}}.dump();
    std::atomic<int> received{0};
    req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) { return ++received < 2; };  // then hang up
    c.send(req);
    EXPECT_GE(received.load(), 1);
    ASSERT_TRUE(engine_drains(server.engine())) << (stream ? "stream" : "plain");
    const server::EngineSnapshot s = server.engine().snapshot();
    EXPECT_EQ(s.n_aborted, aborted_before + 1);
    EXPECT_LT(s.generated_tokens, max_tokens * (stream ? 1 : 2) / 2) << "the aborted request ran on";
  }
}

// Concurrent clients (more than the engine runs at once) each get what they get alone.
TEST(Server, ConcurrentClientsGetTheirOwnResults) {
  EngineConfig engine_config = TestServer::default_engine_config();
  engine_config.scheduler.max_num_seqs = 4;  // the rest wait in the queue
  TestServer server(engine_config);
  const json ref = fixture_reference();
  std::vector<std::future<Reply>> replies;
  for (int i = 0; i < 12; ++i) {
    const size_t k = size_t(i) % ref["prompts"].size();
    replies.push_back(std::async(std::launch::async, [&, k, i] {
      return post(server, "/v1/completions",
                  {{"prompt", ref["prompts"][k]}, {"max_tokens", ref["greedy"][k].size()}, {"temperature", 0},
                   {"ignore_eos", true}, {"logprobs", 0}, {"return_tokens_as_token_ids", true}, {"stream", false},
                   {"user", std::to_string(i)}});
    }));
  }
  for (int i = 0; i < 12; ++i) {
    const Reply r = replies[size_t(i)].get();
    ASSERT_EQ(r.status, 200) << r.raw;
    EXPECT_EQ(ids_of_logprobs(r.body["choices"][0]["logprobs"]["tokens"]), int_list(ref["greedy"][size_t(i) % 3])) << i;
  }
  EXPECT_TRUE(engine_drains(server.engine()));
  EXPECT_EQ(server.engine().snapshot().n_streams, 0) << "finished requests keep no stream on the engine thread";
}

// A model vocabulary past the tokenizer's (ids 200..255 have no text here): greedy tokens
// there are generated and reported, their text is empty (as HF tokenizers decodes them), and
// top logprobs name them token_id:N. The server stays healthy.
TEST(Server, IdsPastTheTokenizerHaveNoText) {
  TestServer server(TestServer::default_engine_config(), {}, ServedModel::FixtureTokenizerOf200);
  const json ref = fixture_reference();
  const auto greedy = int_list(ref["greedy"][0]);  // 187, 249, ...: 249 has no text
  const Reply r = post(server, "/v1/completions",
                       {{"prompt", ref["prompts"][0]}, {"max_tokens", greedy.size()}, {"temperature", 0},
                        {"ignore_eos", true}, {"logprobs", 20}, {"return_token_ids", true}});
  ASSERT_EQ(r.status, 200) << r.raw;
  const json& choice = r.body["choices"][0];
  EXPECT_EQ(int_list(choice["token_ids"]), greedy);
  std::vector<int32_t> known;
  for (int32_t t : greedy)
    if (t < 200) known.push_back(t);
  EXPECT_EQ(choice["text"], server.tokenizer().decode(known, true));
  EXPECT_EQ(choice["logprobs"]["tokens"][1], "token_id:249");
  bool named_by_id = false;
  for (const auto& [text, lp] : choice["logprobs"]["top_logprobs"][0].items()) named_by_id |= text.rfind("token_id:", 0) == 0;
  EXPECT_TRUE(named_by_id) << "20 of 256 top tokens, none past the tokenizer's 200?";
  EXPECT_TRUE(server.engine().snapshot().healthy);
}

// Stopping the server (SIGTERM in `serve`) with a response open: it ends properly, its last
// chunk says "abort" and [DONE] follows; the KV blocks are back in the pool.
TEST(Server, StopEndsOpenResponsesWithAbort) {
  TestServer server(TestServer::default_engine_config(), {}, ServedModel::SlowSyntheticNoTokenizer);
  std::promise<void> first_chunk;
  std::string received;
  std::thread client([&] {
    httplib::Client c = server.client();
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.set_header("Content-Type", "application/json");
    req.body = json{{"prompt", {1, 2, 3}}, {"max_tokens", 1000}, {"ignore_eos", true}, {"stream", true}}.dump();
    bool told = false;
    req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
      received.append(data, n);
      if (!told) first_chunk.set_value();
      told = true;
      return true;
    };
    c.send(req);
  });
  first_chunk.get_future().wait();
  server.stop_http(std::chrono::milliseconds(5000));
  client.join();
  EXPECT_NE(received.find("\"finish_reason\":\"abort\""), std::string::npos) << received.substr(0, 400);
  EXPECT_EQ(received.substr(received.size() - 14), "data: [DONE]\n\n");
  EXPECT_TRUE(engine_drains(server.engine()));
}

}  // namespace
}  // namespace latentserve::testing
