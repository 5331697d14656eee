#include "server/openai_protocol.h"

#include <fmt/format.h>

#include <cmath>

namespace latentserve::server {

namespace {

using json = nlohmann::json;

[[noreturn]] void bad(const std::string& param, const std::string& message) { throw ApiError(400, message, param); }

// A value as it appears in an error message (long ones cut).
std::string shown(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() <= 60) return s;
  size_t cut = 57;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;  // a whole character
  return s.substr(0, cut) + "...";
}

bool present(const json& body, const char* key) { return body.contains(key) && !body[key].is_null(); }

std::optional<double> number(const json& body, const char* key) {
  if (!present(body, key)) return std::nullopt;
  if (!body[key].is_number()) bad(key, fmt::format("'{}' must be a number, found {}", key, shown(body[key])));
  return body[key].get<double>();
}

std::optional<int64_t> integer(const json& body, const char* key) {
  if (!present(body, key)) return std::nullopt;
  const json& v = body[key];
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float() && std::isfinite(v.get<double>()) && v.get<double>() == std::floor(v.get<double>()) &&
      std::abs(v.get<double>()) < 9e15)
    return int64_t(v.get<double>());
  bad(key, fmt::format("'{}' must be an integer, found {}", key, shown(v)));
}

// An integer that must fit an int32 field, in [lo, hi].
int32_t int32_in(const json& body, const char* key, int64_t value, int64_t lo, int64_t hi) {
  if (value < lo || value > hi) bad(key, fmt::format("'{}' must be in [{}, {}], found {}", key, lo, hi, value));
  return int32_t(value);
}

std::optional<bool> boolean(const json& body, const char* key) {
  if (!present(body, key)) return std::nullopt;
  if (!body[key].is_boolean()) bad(key, fmt::format("'{}' must be true or false, found {}", key, shown(body[key])));
  return body[key].get<bool>();
}

std::vector<int32_t> token_ids(const json& v, const std::string& param) {
  std::vector<int32_t> ids;
  for (const auto& x : v) {
    if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() > INT32_MAX)
      bad(param, fmt::format("'{}' must hold token ids (integers >= 0), found {}", param, shown(x)));
    ids.push_back(x.get<int32_t>());
  }
  return ids;
}

// The fields both endpoints share: sampling, stop, streaming.
void parse_common(const json& body, GenerationRequest& r) {
  if (!body.is_object()) bad("", fmt::format("the request body must be a JSON object, found {}", shown(body)));
  if (present(body, "model")) {
    if (!body["model"].is_string()) bad("model", fmt::format("'model' must be a string, found {}", shown(body["model"])));
    r.model = body["model"].get<std::string>();
  }
  SamplingParams& p = r.params;
  if (auto v = number(body, "temperature")) p.temperature = *v;
  if (auto v = number(body, "top_p")) p.top_p = *v;
  if (auto v = integer(body, "top_k")) p.top_k = int32_in(body, "top_k", *v, -1, INT32_MAX);
  if (auto v = number(body, "min_p")) p.min_p = *v;
  if (auto v = number(body, "repetition_penalty")) p.repetition_penalty = *v;
  if (auto v = number(body, "presence_penalty")) p.presence_penalty = *v;
  if (auto v = number(body, "frequency_penalty")) p.frequency_penalty = *v;
  if (auto v = integer(body, "n")) p.n = int32_in(body, "n", *v, 1, 128);
  if (auto v = integer(body, "seed")) p.seed = uint64_t(*v);
  if (auto v = boolean(body, "ignore_eos")) p.ignore_eos = *v;
  if (present(body, "stop_token_ids")) {
    if (!body["stop_token_ids"].is_array())
      bad("stop_token_ids", fmt::format("'stop_token_ids' must be a list of token ids, found {}", shown(body["stop_token_ids"])));
    p.stop_token_ids = token_ids(body["stop_token_ids"], "stop_token_ids");
  }
  if (present(body, "stop")) {
    const json& s = body["stop"];
    if (s.is_string()) {
      r.stop = {s.get<std::string>()};
    } else if (s.is_array()) {
      for (const auto& x : s) {
        if (!x.is_string()) bad("stop", fmt::format("'stop' must be a string or a list of strings, found {}", shown(x)));
        r.stop.push_back(x.get<std::string>());
      }
    } else {
      bad("stop", fmt::format("'stop' must be a string or a list of strings, found {}", shown(s)));
    }
    for (const auto& x : r.stop)
      if (x.empty()) bad("stop", "'stop' strings must not be empty");
  }
  if (auto v = boolean(body, "return_tokens_as_token_ids")) r.tokens_as_ids = *v;
  if (auto v = boolean(body, "return_token_ids")) r.return_token_ids = *v;
  if (auto v = boolean(body, "stream")) r.stream = *v;
  if (present(body, "stream_options")) {
    const json& o = body["stream_options"];
    if (!r.stream) bad("stream_options", "'stream_options' is only allowed with \"stream\": true");
    if (!o.is_object()) bad("stream_options", fmt::format("'stream_options' must be an object, found {}", shown(o)));
    if (auto v = boolean(o, "include_usage")) r.include_usage = *v;
  }
  // Parameters this server does not implement: refused, never silently ignored.
  if (present(body, "logit_bias") && !(body["logit_bias"].is_object() && body["logit_bias"].empty()))
    bad("logit_bias", "'logit_bias' is not supported by this server");
  if (auto v = integer(body, "best_of"); v && *v != p.n)
    bad("best_of", fmt::format("'best_of' other than n ({}) is not supported, found {}", p.n, *v));
  if (auto v = integer(body, "min_tokens"); v && *v != 0) bad("min_tokens", "'min_tokens' is not supported by this server");
  if (boolean(body, "include_stop_str_in_output").value_or(false))
    bad("include_stop_str_in_output", "'include_stop_str_in_output' is not supported by this server");
  if (!boolean(body, "skip_special_tokens").value_or(true))
    bad("skip_special_tokens", "'skip_special_tokens': false is not supported (special tokens are always skipped)");
  if (present(body, "prompt_logprobs")) bad("prompt_logprobs", "'prompt_logprobs' is not supported by this server");
}

// max_tokens_key: the field the client used for the limit (chat: max_completion_tokens).
void check_sampling(GenerationRequest& r, const std::string& max_tokens_key = "max_tokens") {
  try {
    r.params.validate();
  } catch (const std::exception& e) {
    // validate() names the parameter first: "temperature must be in [0, 2], got 3".
    std::string message = e.what();
    std::string param = message.substr(0, message.find(' '));
    if (param == "max_tokens" && max_tokens_key != param) {
      message.replace(0, param.size(), max_tokens_key);
      param = max_tokens_key;
    }
    throw ApiError(400, message, param);
  }
}

const char* message_roles[] = {"system", "developer", "user", "assistant", "tool"};

// A message's content: a string, null (an assistant turn with tool calls), or a list of
// parts of which only {"type": "text", "text": ...} is served here (joined with newlines, as vLLM does).
json message_content(const json& content, const std::string& where) {
  if (content.is_string() || content.is_null()) return content;
  if (!content.is_array())
    bad(where, fmt::format("'{}' must be a string or a list of content parts, found {}", where, shown(content)));
  std::string text;
  for (size_t j = 0; j < content.size(); ++j) {
    const json& part = content[j];
    const std::string at = fmt::format("{}[{}]", where, j);
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
      bad(at, fmt::format("'{}' must be an object with a 'type', found {}", at, shown(part)));
    if (part["type"] != "text")
      bad(at, fmt::format("'{}': content parts of type '{}' are not supported (this server takes text only)", at,
                          part["type"].get<std::string>()));
    if (!part.contains("text") || !part["text"].is_string())
      bad(at, fmt::format("'{}.text' must be a string", at));
    if (j) text += "\n";
    text += part["text"].get<std::string>();
  }
  return text;
}

json usage_json(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

json bytes_of(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(int(c));
  return b;
}

// The legacy completions shape: parallel lists, top_logprobs as {token text: logprob}.
json completion_logprobs(const std::vector<SampleResult>& samples, const TokenText& token_text, int64_t offset) {
  json tokens = json::array(), token_logprobs = json::array(), top = json::array(), offsets = json::array();
  for (const auto& s : samples) {
    const std::string text = token_text(s.token);
    tokens.push_back(text);
    token_logprobs.push_back(s.logprob);
    json t = json::object();
    for (const auto& x : s.top_logprobs) {
      const std::string key = token_text(x.token);
      if (!t.contains(key)) t[key] = x.logprob;  // best first: keep the higher of equal texts
    }
    top.push_back(std::move(t));
    offsets.push_back(offset);
    offset += int64_t(text.size());
  }
  return {{"tokens", tokens}, {"token_logprobs", token_logprobs}, {"top_logprobs", top}, {"text_offset", offsets}};
}

json chat_logprobs(const std::vector<SampleResult>& samples, const TokenText& token_text) {
  json content = json::array();
  for (const auto& s : samples) {
    const std::string text = token_text(s.token);
    json top = json::array();
    for (const auto& x : s.top_logprobs) {
      const std::string t = token_text(x.token);
      top.push_back({{"token", t}, {"logprob", x.logprob}, {"bytes", bytes_of(t)}});
    }
    content.push_back({{"token", text}, {"logprob", s.logprob}, {"bytes", bytes_of(text)}, {"top_logprobs", top}});
  }
  return {{"content", content}};
}

json nullable(const std::string& s) { return s.empty() ? json(nullptr) : json(s); }

json object_head(const ResponseMeta& meta, const char* object) {
  return {{"id", meta.id}, {"object", object}, {"created", meta.created}, {"model", meta.model}};
}

json completion_choice(const ChoiceResult& c, const TokenText& token_text) {
  json choice = {{"index", c.index},
                 {"text", c.text},
                 {"logprobs", c.samples.empty() ? json(nullptr) : completion_logprobs(c.samples, token_text, c.text_offset)},
                 {"finish_reason", nullable(c.finish_reason)}};
  if (c.with_token_ids) choice["token_ids"] = c.tokens;
  return choice;
}

json chat_choice(const ChoiceResult& c, const TokenText& token_text, const char* message_key, json message) {
  json choice = {{"index", c.index},
                 {message_key, std::move(message)},
                 {"logprobs", c.samples.empty() ? json(nullptr) : chat_logprobs(c.samples, token_text)},
                 {"finish_reason", nullable(c.finish_reason)}};
  if (c.with_token_ids) choice["token_ids"] = c.tokens;
  return choice;
}

}  // namespace

GenerationRequest parse_completion_request(const json& body) {
  GenerationRequest r;
  r.endpoint = Endpoint::Completions;
  parse_common(body, r);
  if (!present(body, "prompt")) bad("prompt", "'prompt' is required");
  const json& prompt = body["prompt"];
  // A string, a list of token ids, or a list holding one of those (OpenAI's batched form, one prompt).
  const json& one = prompt.is_array() && prompt.size() == 1 && (prompt[0].is_string() || prompt[0].is_array()) ? prompt[0] : prompt;
  if (one.is_string()) {
    r.prompt_text = one.get<std::string>();
  } else if (one.is_array() && !one.empty() && one[0].is_number()) {
    r.prompt_ids = token_ids(one, "prompt");
  } else if (prompt.is_array() && prompt.size() > 1 && (prompt[0].is_string() || prompt[0].is_array())) {
    bad("prompt", fmt::format("'prompt' holds {} prompts; this server takes one prompt per request", prompt.size()));
  } else {
    bad("prompt", fmt::format("'prompt' must be a string or a non-empty list of token ids, found {}", shown(prompt)));
  }
  r.max_tokens_given = true;
  r.params.max_tokens = 16;  // the completions API's default
  if (auto v = integer(body, "max_tokens")) r.params.max_tokens = *v;
  if (auto v = integer(body, "logprobs")) r.params.logprobs = int32_in(body, "logprobs", *v, 0, kMaxLogprobs);
  if (auto v = boolean(body, "echo")) r.echo = *v;
  if (present(body, "suffix")) bad("suffix", "'suffix' is not supported by this server");
  check_sampling(r);
  return r;
}

GenerationRequest parse_chat_request(const json& body) {
  GenerationRequest r;
  r.endpoint = Endpoint::ChatCompletions;
  parse_common(body, r);
  if (!present(body, "messages")) bad("messages", "'messages' is required");
  const json& messages = body["messages"];
  if (!messages.is_array() || messages.empty())
    bad("messages", fmt::format("'messages' must be a non-empty list of messages, found {}", shown(messages)));
  r.messages = nlohmann::ordered_json::array();
  for (size_t i = 0; i < messages.size(); ++i) {
    const json& m = messages[i];
    const std::string at = fmt::format("messages[{}]", i);
    if (!m.is_object()) bad(at, fmt::format("'{}' must be an object, found {}", at, shown(m)));
    if (!m.contains("role") || !m["role"].is_string()) bad(at + ".role", fmt::format("'{}.role' must be a string", at));
    const std::string role = m["role"].get<std::string>();
    if (std::find(std::begin(message_roles), std::end(message_roles), role) == std::end(message_roles))
      bad(at + ".role", fmt::format("'{}.role' must be system, developer, user, assistant or tool, found '{}'", at, role));
    if (!m.contains("content") && role != "assistant") bad(at + ".content", fmt::format("'{}.content' is required", at));
    nlohmann::ordered_json message = nlohmann::ordered_json::parse(m.dump());  // keeps name, tool_call_id, ...
    message["content"] = message_content(m.contains("content") ? m["content"] : json(nullptr), at + ".content");
    r.messages.push_back(std::move(message));
  }
  std::string max_tokens_key = "max_tokens";
  if (auto v = integer(body, "max_completion_tokens")) {
    r.params.max_tokens = *v;
    r.max_tokens_given = true;
    max_tokens_key = "max_completion_tokens";
  } else if (auto w = integer(body, "max_tokens")) {
    r.params.max_tokens = *w;
    r.max_tokens_given = true;
  }
  const bool logprobs = boolean(body, "logprobs").value_or(false);
  const auto top = integer(body, "top_logprobs");
  if (top && !logprobs) bad("top_logprobs", "'top_logprobs' needs \"logprobs\": true");
  if (logprobs) r.params.logprobs = top ? int32_in(body, "top_logprobs", *top, 0, kMaxLogprobs) : 0;
  if (auto v = boolean(body, "add_generation_prompt")) r.add_generation_prompt = *v;
  if (present(body, "chat_template_kwargs")) {
    if (!body["chat_template_kwargs"].is_object())
      bad("chat_template_kwargs", "'chat_template_kwargs' must be an object");
    r.chat_template_kwargs = nlohmann::ordered_json::parse(body["chat_template_kwargs"].dump());
  }
  if (present(body, "tools") && !(body["tools"].is_array() && body["tools"].empty()))
    bad("tools", "'tools' (function calling) is not supported by this server");
  if (present(body, "tool_choice") && !(body["tool_choice"] == "none" || body["tool_choice"] == "auto"))
    bad("tool_choice", "'tool_choice' other than \"none\" or \"auto\" needs tools, which this server does not support");
  if (present(body, "response_format")) {
    const json& f = body["response_format"];
    if (!f.is_object() || !f.contains("type") || f["type"] != "text")
      bad("response_format", fmt::format("only {{\"type\": \"text\"}} is supported as 'response_format', found {}", shown(f)));
  }
  if (!r.max_tokens_given) r.params.max_tokens = 1;  // placeholder for validate(); the server sets the real limit
  check_sampling(r, max_tokens_key);
  return r;
}


json completion_response(const ResponseMeta& meta, const std::vector<ChoiceResult>& choices, const Usage& usage,
                         const TokenText& token_text) {
  json out = object_head(meta, "text_completion");
  out["choices"] = json::array();
  for (const auto& c : choices) out["choices"].push_back(completion_choice(c, token_text));
  out["usage"] = usage_json(usage);
  return out;
}

json chat_response(const ResponseMeta& meta, const std::vector<ChoiceResult>& choices, const Usage& usage,
                   const TokenText& token_text) {
  json out = object_head(meta, "chat.completion");
  out["choices"] = json::array();
  for (const auto& c : choices)
    out["choices"].push_back(chat_choice(c, token_text, "message", {{"role", "assistant"}, {"content", c.text}}));
  out["usage"] = usage_json(usage);
  return out;
}

json completion_chunk(const ResponseMeta& meta, const ChoiceResult& delta, const TokenText& token_text) {
  json out = object_head(meta, "text_completion");
  out["choices"] = json::array({completion_choice(delta, token_text)});
  return out;
}

json chat_chunk(const ResponseMeta& meta, const ChoiceResult& delta, bool role_delta, const TokenText& token_text) {
  json message = json::object();
  if (role_delta) message["role"] = "assistant";
  if (role_delta || !delta.text.empty()) message["content"] = delta.text;
  json out = object_head(meta, "chat.completion.chunk");
  out["choices"] = json::array({chat_choice(delta, token_text, "delta", std::move(message))});
  return out;
}

json usage_chunk(const ResponseMeta& meta, Endpoint endpoint, const Usage& usage) {
  json out = object_head(meta, endpoint == Endpoint::ChatCompletions ? "chat.completion.chunk" : "text_completion");
  out["choices"] = json::array();
  out["usage"] = usage_json(usage);
  return out;
}

json error_body(const ApiError& e) {
  return {{"error",
           {{"message", e.what()},
            {"type", e.type},
            {"param", e.param.empty() ? json(nullptr) : json(e.param)},
            {"code", e.code.empty() ? json(e.status) : json(e.code)}}}};
}

}  // namespace latentserve::server
