// The OpenAI request parser: every accepted form of a field, the defaults of the API
// reference, and a 400 naming the parameter for everything else.
#include <gtest/gtest.h>

#include "server/openai_protocol.h"

#include <random>

namespace latentserve::server {
namespace {

using json = nlohmann::json;

// The ApiError a body raises (fails the test when it raises none).
ApiError error_of(Endpoint endpoint, const json& body) {
  try {
    endpoint == Endpoint::Completions ? parse_completion_request(body) : parse_chat_request(body);
  } catch (const ApiError& e) {
    return e;
  }
  ADD_FAILURE() << "accepted: " << body.dump();
  return ApiError(0, "");
}

TEST(OpenAiProtocol, CompletionDefaultsFollowTheApiReference) {
  const GenerationRequest r = parse_completion_request({{"model", "m"}, {"prompt", "Hello"}});
  EXPECT_EQ(r.model, "m");
  ASSERT_TRUE(r.prompt_text);
  EXPECT_EQ(*r.prompt_text, "Hello");
  EXPECT_EQ(r.params.max_tokens, 16);
  EXPECT_EQ(r.params.temperature, 1.0);
  EXPECT_EQ(r.params.top_p, 1.0);
  EXPECT_EQ(r.params.n, 1);
  EXPECT_FALSE(r.params.logprobs);
  EXPECT_FALSE(r.stream);
  EXPECT_TRUE(r.stop.empty());
}

TEST(OpenAiProtocol, PromptForms) {
  EXPECT_EQ(parse_completion_request({{"prompt", {5, 6, 7}}}).prompt_ids, (std::vector<int32_t>{5, 6, 7}));
  EXPECT_EQ(parse_completion_request({{"prompt", {{5, 6}}}}).prompt_ids, (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(*parse_completion_request({{"prompt", {"one"}}}).prompt_text, "one");
  EXPECT_EQ(error_of(Endpoint::Completions, {{"prompt", {"a", "b"}}}).param, "prompt");
  EXPECT_EQ(error_of(Endpoint::Completions, {{"prompt", {1, -2}}}).param, "prompt");
  EXPECT_EQ(error_of(Endpoint::Completions, {{"prompt", json::array()}}).param, "prompt");
  EXPECT_EQ(error_of(Endpoint::Completions, {{"prompt", 3}}).param, "prompt");
  EXPECT_EQ(error_of(Endpoint::Completions, {{"max_tokens", 3}}).param, "prompt");  // missing
}

TEST(OpenAiProtocol, SamplingFieldsAndTheirRanges) {
  const GenerationRequest r = parse_completion_request(
      {{"prompt", "x"}, {"temperature", 0.5}, {"top_p", 0.9}, {"top_k", 40}, {"min_p", 0.1}, {"seed", 7},
       {"n", 3}, {"best_of", 3}, {"presence_penalty", 0.5}, {"frequency_penalty", -0.5}, {"repetition_penalty", 1.1},
       {"max_tokens", 64.0}, {"logprobs", 5}, {"stop", "\n"}, {"stop_token_ids", {2}}, {"ignore_eos", true},
       {"stream", true}, {"stream_options", {{"include_usage", true}}}, {"user", "ignored"}});
  EXPECT_EQ(r.params.temperature, 0.5);
  EXPECT_EQ(r.params.top_k, 40);
  EXPECT_EQ(*r.params.seed, 7u);
  EXPECT_EQ(r.params.n, 3);
  EXPECT_EQ(r.params.max_tokens, 64);  // 64.0 is an integer value
  EXPECT_EQ(*r.params.logprobs, 5);
  EXPECT_EQ(r.stop, std::vector<std::string>{"\n"});
  EXPECT_EQ(r.params.stop_token_ids, std::vector<int32_t>{2});
  EXPECT_TRUE(r.params.ignore_eos);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);

  const std::pair<json, std::string> bad[] = {
      {{{"temperature", 2.5}}, "temperature"},       {{{"temperature", "hot"}}, "temperature"},
      {{{"top_p", 0}}, "top_p"},                     {{{"top_k", -2}}, "top_k"},
      {{{"max_tokens", 0}}, "max_tokens"},           {{{"max_tokens", 1.5}}, "max_tokens"},
      {{{"n", 0}}, "n"},                             {{{"logprobs", 21}}, "logprobs"},
      {{{"presence_penalty", 3}}, "presence_penalty"}, {{{"stop", 5}}, "stop"},
      {{{"stop", {"ok", 1}}}, "stop"},               {{{"stop", ""}}, "stop"},
      {{{"stream", "yes"}}, "stream"},               {{{"stream_options", {{"include_usage", true}}}}, "stream_options"},
      {{{"logit_bias", {{"5", 100}}}}, "logit_bias"}, {{{"best_of", 4}}, "best_of"},
      {{{"suffix", "x"}}, "suffix"},                 {{{"seed", "s"}}, "seed"},
      {{{"model", 5}}, "model"},                     {{{"stop_token_ids", {-1}}}, "stop_token_ids"},
  };
  for (const auto& [fields, param] : bad) {
    json body = {{"prompt", "x"}};
    body.update(fields);
    const ApiError e = error_of(Endpoint::Completions, body);
    EXPECT_EQ(e.status, 400) << body.dump();
    EXPECT_EQ(e.param, param) << body.dump() << " -> " << e.what();
    EXPECT_NE(std::string(e.what()).find(param), std::string::npos) << e.what();
  }
  EXPECT_EQ(error_of(Endpoint::Completions, json::array({1})).status, 400);  // not an object
}

TEST(OpenAiProtocol, ChatMessagesAndLimits) {
  const GenerationRequest r = parse_chat_request(
      {{"messages",
        {{{"role", "system"}, {"content", "Be brief."}},
         {{"role", "user"}, {"content", {{{"type", "text"}, {"text", "a"}}, {{"type", "text"}, {"text", "b"}}}}}}},
       {"logprobs", true}, {"top_logprobs", 3}});
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[1]["content"], "a\nb");  // text parts joined, as vLLM does
  EXPECT_FALSE(r.max_tokens_given);             // the server fills in the room left
  EXPECT_EQ(*r.params.logprobs, 3);
  EXPECT_TRUE(r.add_generation_prompt);

  EXPECT_EQ(parse_chat_request({{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"max_completion_tokens", 9}})
                .params.max_tokens, 9);
  EXPECT_EQ(parse_chat_request({{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"max_tokens", 8}}).params.max_tokens, 8);

  const json user = {{"role", "user"}, {"content", "x"}};
  const std::pair<json, std::string> bad[] = {
      {{{"messages", json::array()}}, "messages"},
      {{{"messages", "hi"}}, "messages"},
      {{{"messages", {{{"role", "wizard"}, {"content", "x"}}}}}, "messages[0].role"},
      {{{"messages", {{{"content", "x"}}}}}, "messages[0].role"},
      {{{"messages", {user, {{"role", "user"}}}}}, "messages[1].content"},
      {{{"messages", {{{"role", "user"}, {"content", {{{"type", "image_url"}}}}}}}}, "messages[0].content[0]"},
      {{{"messages", {user}}, {"top_logprobs", 2}}, "top_logprobs"},
      {{{"messages", {user}}, {"logprobs", true}, {"top_logprobs", 30}}, "top_logprobs"},
      {{{"messages", {user}}, {"tools", {{{"type", "function"}}}}}, "tools"},
      {{{"messages", {user}}, {"response_format", {{"type", "json_object"}}}}, "response_format"},
      {{{"messages", {user}}, {"max_completion_tokens", -1}}, "max_completion_tokens"},
      {{{"messages", {user}}, {"max_tokens", 0}}, "max_tokens"},
      {{{"messages", {user}}, {"tool_choice", "required"}}, "tool_choice"},
      {{{"messages", {user}}, {"min_tokens", 3}}, "min_tokens"},
      {{{"messages", {user}}, {"skip_special_tokens", false}}, "skip_special_tokens"},
      {{{"messages", {user}}, {"include_stop_str_in_output", true}}, "include_stop_str_in_output"},
  };
  for (const auto& [body, param] : bad) {
    const ApiError e = error_of(Endpoint::ChatCompletions, body);
    EXPECT_EQ(e.status, 400) << body.dump();
    EXPECT_EQ(e.param, param) << body.dump() << " -> " << e.what();
  }
}

// Responses have the OpenAI shapes; logprobs in the completions (parallel lists) and chat
// (content entries with bytes) forms; usage adds up.
TEST(OpenAiProtocol, ResponseShapes) {
  const ResponseMeta meta{"cmpl-1", 1700000000, "m"};
  const TokenText text = [](int32_t id) { return std::string(1, char('a' + id)); };
  ChoiceResult c;
  c.index = 0;
  c.text = "bc";
  c.finish_reason = "length";
  c.samples = {{1, -0.5f, {{1, -0.5f}, {3, -1.5f}}}, {2, -0.25f, {{2, -0.25f}, {0, -2.0f}}}};
  const json done = completion_response(meta, {c}, {7, 2, 4}, text);
  EXPECT_EQ(done["object"], "text_completion");
  EXPECT_EQ(done["choices"][0]["text"], "bc");
  EXPECT_EQ(done["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(done["choices"][0]["logprobs"]["tokens"], json({"b", "c"}));
  EXPECT_EQ(done["choices"][0]["logprobs"]["text_offset"], json({0, 1}));
  EXPECT_EQ(done["choices"][0]["logprobs"]["top_logprobs"][0]["d"], -1.5);
  EXPECT_EQ(done["usage"]["total_tokens"], 9);
  EXPECT_EQ(done["usage"]["prompt_tokens_details"]["cached_tokens"], 4);

  const json chat = chat_response(meta, {c}, {7, 2, 0}, text);
  EXPECT_EQ(chat["object"], "chat.completion");
  EXPECT_EQ(chat["choices"][0]["message"], json({{"role", "assistant"}, {"content", "bc"}}));
  EXPECT_EQ(chat["choices"][0]["logprobs"]["content"][1]["bytes"], json({int('c')}));
  EXPECT_EQ(chat["choices"][0]["logprobs"]["content"][1]["top_logprobs"][1]["token"], "a");

  ChoiceResult delta;
  delta.index = 1;
  const json first = chat_chunk(meta, delta, true, text);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["index"], 1);
  EXPECT_EQ(first["choices"][0]["delta"], json({{"role", "assistant"}, {"content", ""}}));
  EXPECT_TRUE(first["choices"][0]["finish_reason"].is_null());
  EXPECT_FALSE(first["choices"][0].contains("token_ids"));
  delta.finish_reason = "stop";
  delta.tokens = {4, 5};
  delta.with_token_ids = true;
  const json last = chat_chunk(meta, delta, false, text);
  EXPECT_EQ(last["choices"][0]["delta"], json::object());
  EXPECT_EQ(last["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(last["choices"][0]["token_ids"], json({4, 5}));
  delta.text = "de";
  const json piece = completion_chunk(meta, delta, text);
  EXPECT_EQ(piece["object"], "text_completion");
  EXPECT_EQ(piece["choices"][0]["text"], "de");
  EXPECT_EQ(usage_chunk(meta, Endpoint::ChatCompletions, {3, 4, 0})["choices"], json::array());

  const json err = error_body(ApiError(400, "temperature must be in [0, 2], got 3", "temperature"));
  EXPECT_EQ(err["error"]["type"], "invalid_request_error");
  EXPECT_EQ(err["error"]["param"], "temperature");
  EXPECT_EQ(err["error"]["code"], 400);
}

}  // namespace
}  // namespace latentserve::server

namespace latentserve::server {
namespace {

// Any value in any field: the parser accepts it or throws ApiError 400 naming a parameter;
// never another exception (a nlohmann type_error would become a 500).
TEST(OpenAiProtocol, RandomFieldValuesAreAcceptedOrNamed) {
  std::mt19937_64 rng(20261203);
  auto random_value = [&](int depth, auto& self) -> json {
    switch (rng() % (depth > 1 ? 9 : 11)) {
      case 0: return nullptr;
      case 1: return bool(rng() % 2);
      case 2: return int64_t(rng() % 100) - 50;
      case 3: return int64_t(rng());  // huge
      case 4: return double(int64_t(rng() % 2000) - 1000) / 7.0;
      case 5: return std::string("s") + std::to_string(rng() % 10);
      case 6: return "";
      case 7: return json::array();
      case 8: return json::object();
      case 9: {
        json a = json::array();
        for (int i = 0, n = int(rng() % 4); i < n; ++i) a.push_back(self(depth + 1, self));
        return a;
      }
      default: {
        json o = json::object();
        for (const char* k : {"role", "content", "type", "text", "include_usage"})
          if (rng() % 2) o[k] = self(depth + 1, self);
        return o;
      }
    }
  };
  const char* fields[] = {"model", "prompt", "messages", "temperature", "top_p", "top_k", "min_p", "n", "seed",
                          "max_tokens", "max_completion_tokens", "logprobs", "top_logprobs", "echo", "stop",
                          "stop_token_ids", "stream", "stream_options", "ignore_eos", "presence_penalty",
                          "frequency_penalty", "repetition_penalty", "logit_bias", "best_of", "tools", "tool_choice",
                          "response_format", "chat_template_kwargs", "add_generation_prompt", "min_tokens",
                          "return_token_ids", "return_tokens_as_token_ids", "skip_special_tokens"};
  int accepted = 0, refused = 0;
  for (int trial = 0; trial < 4000; ++trial) {
    json body = {{"prompt", "x"}, {"messages", {{{"role", "user"}, {"content", "x"}}}}};
    for (int f = 0, n = 1 + int(rng() % 3); f < n; ++f)
      body[fields[rng() % std::size(fields)]] = random_value(0, random_value);
    for (Endpoint e : {Endpoint::Completions, Endpoint::ChatCompletions}) {
      try {
        e == Endpoint::Completions ? parse_completion_request(body) : parse_chat_request(body);
        ++accepted;
      } catch (const ApiError& err) {
        ++refused;
        ASSERT_EQ(err.status, 400) << body.dump();
        ASSERT_FALSE(err.param.empty()) << body.dump() << " -> " << err.what();
      } catch (const std::exception& other) {
        FAIL() << body.dump() << " threw a non-API error: " << other.what();
      }
    }
  }
  EXPECT_GT(accepted, 100);
  EXPECT_GT(refused, 1000);
}

}  // namespace
}  // namespace latentserve::server
