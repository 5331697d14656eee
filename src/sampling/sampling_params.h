#pragma once
// SamplingParams: one request's decoding parameters, with vLLM / OpenAI semantics and
// vLLM's validation ranges. validate() throws Error naming the parameter and the value.
// Stop strings are the engine's job (they need text); everything token-level is here.
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace latentserve {

inline constexpr int32_t kMaxLogprobs = 20;  // vLLM's default --max-logprobs

struct SamplingParams {
  double temperature = 1.0;         // [0, 2]; 0 = greedy (argmax, first index on ties)
  int32_t top_k = 0;                // 0 or -1 = off; k >= 1 keeps the k largest (ties at the k-th kept)
  double top_p = 1.0;               // (0, 1]; 1 = off
  double min_p = 0.0;               // [0, 1]; 0 = off; keeps p >= min_p * p_max
  double repetition_penalty = 1.0;  // > 0, finite; 1 = off; on prompt + output tokens (HF / vLLM)
  double presence_penalty = 0.0;    // [-2, 2]; on output tokens (OpenAI)
  double frequency_penalty = 0.0;   // [-2, 2]; on output tokens (OpenAI)
  std::optional<uint64_t> seed;     // per-request RNG stream; none = nondeterministic
  std::vector<int32_t> stop_token_ids;  // stop after generating any of these (even with ignore_eos)
  int64_t max_tokens = 16;          // >= 1
  bool ignore_eos = false;
  std::optional<int32_t> logprobs;  // [0, 20]: return the chosen token's logprob and this many top ones
  int32_t n = 1;                    // >= 1 completions (children each get their own RNG stream)

  void validate() const;
  bool is_greedy() const { return temperature == 0.0; }
};

enum class FinishReason { None, Stop, Length };

// After a sequence has generated n_output_tokens tokens, the last of which is `token`:
// Length when max_tokens is reached (checked first, as vLLM v1 does), Stop on an EOS id
// (unless ignore_eos) or a stop_token_ids entry, else None. Stop strings: the engine.
FinishReason finish_reason_after(const SamplingParams& params, int32_t token, int64_t n_output_tokens,
                                 std::span<const int32_t> eos_token_ids);

}  // namespace latentserve
