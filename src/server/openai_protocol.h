#pragma once
// The OpenAI-compatible API's JSON, with no HTTP and no engine in it: request bodies of
// /v1/completions and /v1/chat/completions -> GenerationRequest (validated; an ApiError
// names the parameter), and what the engine produced -> completion / chat.completion
// objects, their streamed chunks and the error object. Field names and defaults follow the
// OpenAI API reference; the extra sampling fields (top_k, min_p, repetition_penalty,
// ignore_eos, stop_token_ids, seed) are vLLM's.
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "sampling/sampler.h"
#include "sampling/sampling_params.h"

namespace latentserve::server {

enum class Endpoint { Completions, ChatCompletions };

// Becomes {"error": {"message", "type", "param", "code"}} with this HTTP status.
struct ApiError : std::runtime_error {
  ApiError(int status, std::string message, std::string param = {}, std::string type = "invalid_request_error",
           std::string code = {})
      : std::runtime_error(message), status(status), param(std::move(param)), type(std::move(type)),
        code(std::move(code)) {}
  int status;
  std::string param, type, code;
};

struct GenerationRequest {
  Endpoint endpoint = Endpoint::Completions;
  std::string model;                    // as the client named it (empty: the served model)
  // /v1/completions: the prompt as text or as token ids (exactly one is set).
  std::optional<std::string> prompt_text;
  std::vector<int32_t> prompt_ids;
  bool echo = false;                    // prepend the prompt's text to the completion's
  // /v1/chat/completions: [{"role", "content": string}] (content parts already joined).
  nlohmann::ordered_json messages;
  nlohmann::ordered_json chat_template_kwargs = nlohmann::ordered_json::object();
  bool add_generation_prompt = true;
  bool max_tokens_given = false;        // chat: absent means "up to the model length"
  SamplingParams params;                // logprobs: completions' int, or chat's top_logprobs when logprobs is true
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;           // stream_options.include_usage
  bool tokens_as_ids = false;           // vLLM's return_tokens_as_token_ids: logprobs name tokens "token_id:N"
  bool return_token_ids = false;        // vLLM's return_token_ids: each choice (and chunk) lists its token ids
};

// Throw ApiError (400) naming the first parameter that is missing, of the wrong type or out of
// range. Unknown fields are ignored, as the OpenAI API does.
GenerationRequest parse_completion_request(const nlohmann::json& body);
GenerationRequest parse_chat_request(const nlohmann::json& body);

// One finished choice, as the engine reported it.
struct ChoiceResult {
  int32_t index = 0;
  std::string text;
  std::string finish_reason;            // stop | length | abort
  std::vector<int32_t> tokens;
  std::vector<SampleResult> samples;    // one per token, when logprobs were asked for
  bool with_token_ids = false;          // add "token_ids": tokens to the choice
  int64_t text_offset = 0;              // completions logprobs: where the first token's text starts
};

struct Usage {
  int64_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
};

// What every object of one response shares.
struct ResponseMeta {
  std::string id;                       // cmpl-... / chatcmpl-...
  int64_t created = 0;                  // unix seconds
  std::string model;
};

// A token's text for logprobs (the tokenizer's decode of that one id).
using TokenText = std::function<std::string(int32_t)>;

nlohmann::json completion_response(const ResponseMeta& meta, const std::vector<ChoiceResult>& choices,
                                   const Usage& usage, const TokenText& token_text);
nlohmann::json chat_response(const ResponseMeta& meta, const std::vector<ChoiceResult>& choices, const Usage& usage,
                             const TokenText& token_text);

// Streamed chunks: `delta` holds what this step added to one choice (its text, tokens and
// samples; finish_reason empty while it goes on). Chat's first chunk of a choice carries
// delta {"role": "assistant", "content": ""} (role_delta = true).
nlohmann::json completion_chunk(const ResponseMeta& meta, const ChoiceResult& delta, const TokenText& token_text);
nlohmann::json chat_chunk(const ResponseMeta& meta, const ChoiceResult& delta, bool role_delta, const TokenText& token_text);
// The last chunk when stream_options.include_usage: no choices, the usage.
nlohmann::json usage_chunk(const ResponseMeta& meta, Endpoint endpoint, const Usage& usage);

nlohmann::json error_body(const ApiError& error);

}  // namespace latentserve::server
