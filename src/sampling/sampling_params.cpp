#include "sampling/sampling_params.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace latentserve {

// Ranges as vLLM's SamplingParams._verify_args (and the OpenAI API for the penalties).
// Written as !(ok) so that NaN fails too.
void SamplingParams::validate() const {
  if (!(temperature >= 0.0 && temperature <= 2.0)) fail("temperature must be in [0, 2], got {}", temperature);
  if (!(top_p > 0.0 && top_p <= 1.0)) fail("top_p must be in (0, 1], got {}", top_p);
  if (top_k < -1) fail("top_k must be -1 or 0 (off) or at least 1, got {}", top_k);
  if (!(min_p >= 0.0 && min_p <= 1.0)) fail("min_p must be in [0, 1], got {}", min_p);
  if (!(repetition_penalty > 0.0 && std::isfinite(repetition_penalty)))
    fail("repetition_penalty must be a finite number > 0, got {}", repetition_penalty);
  if (!(presence_penalty >= -2.0 && presence_penalty <= 2.0))
    fail("presence_penalty must be in [-2, 2], got {}", presence_penalty);
  if (!(frequency_penalty >= -2.0 && frequency_penalty <= 2.0))
    fail("frequency_penalty must be in [-2, 2], got {}", frequency_penalty);
  if (max_tokens < 1) fail("max_tokens must be at least 1, got {}", max_tokens);
  if (logprobs && (*logprobs < 0 || *logprobs > kMaxLogprobs))
    fail("logprobs must be in [0, {}], got {}", kMaxLogprobs, *logprobs);
  if (n < 1) fail("n must be at least 1, got {}", n);
  for (int32_t id : stop_token_ids)
    if (id < 0) fail("stop_token_ids must hold token ids >= 0, got {}", id);
}

FinishReason finish_reason_after(const SamplingParams& params, int32_t token, int64_t n_output_tokens,
                                 std::span<const int32_t> eos_token_ids) {
  if (n_output_tokens >= params.max_tokens) return FinishReason::Length;
  const auto has = [token](std::span<const int32_t> ids) { return std::find(ids.begin(), ids.end(), token) != ids.end(); };
  if (!params.ignore_eos && has(eos_token_ids)) return FinishReason::Stop;
  if (has(params.stop_token_ids)) return FinishReason::Stop;
  return FinishReason::None;
}

}  // namespace latentserve
