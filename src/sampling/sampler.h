#pragma once
// Sampler: picks one request's next token from its f32 logits [vocab].
//
// Pipeline (vLLM v1's order), in f64:
//   1. penalties (vLLM apply_penalties): repetition on tokens of prompt + output
//      (logit > 0 ? logit / r : logit * r), then frequency (- f * count in output),
//      then presence (- p if in output);
//   2. temperature 0: argmax of the penalised logits (first index on ties), no RNG draw;
//   3. else logits / temperature; min_p (keep p >= min_p * p_max); top_k (keep logits >=
//      the k-th largest); top_p (keep the highest-probability tokens, highest first and
//      lower index first on ties, while the mass before each one is < top_p, renormalised
//      over what min_p / top_k kept);
//   4. one uniform draw from the request's SamplerRng, inverse CDF over the kept tokens.
// Logprobs (LogprobsMode::Processed, the default) are log-softmax of the distribution
// actually sampled from (after step 3; greedy: after step 1) — vLLM's
// --logprobs-mode processed_logprobs; tokens cut by min_p / top_k / top_p get -inf.
// LogprobsMode::Raw gives log-softmax of the unmodified logits (vLLM v1's default,
// raw_logprobs).
#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <vector>

#include "sampling/sampling_params.h"

namespace latentserve {

// The RNG of one request (one per completion when n > 1). It lives with the request, so
// the tokens a seed gives do not depend on what else is in the batch. One draw per
// sampled (non-greedy) token.
class SamplerRng {
 public:
  // seed: none = a random one. stream: completion index for n > 1 (each gets its own).
  explicit SamplerRng(std::optional<uint64_t> seed, uint64_t stream = 0);
  double next_uniform();  // [0, 1), 53 random bits

 private:
  std::mt19937_64 engine_;
};

enum class LogprobsMode { Processed, Raw };

struct TokenLogprob {
  int32_t token;
  float logprob;
};

struct SampleResult {
  int32_t token = -1;
  float logprob = 0.0f;                   // of `token`; set when params.logprobs is set
  std::vector<TokenLogprob> top_logprobs; // params.logprobs of them, best first (lower id on ties)
};

class Sampler {
 public:
  explicit Sampler(LogprobsMode mode = LogprobsMode::Processed) : mode_(mode) {}

  // prompt_tokens / output_tokens: the request's tokens so far, for the penalties.
  // Throws Error on a token id outside [0, vocab) or non-finite logits where it matters.
  // Not thread-safe (scratch buffers): one Sampler per thread.
  SampleResult sample(std::span<const float> logits, const SamplingParams& params,
                      std::span<const int32_t> prompt_tokens, std::span<const int32_t> output_tokens,
                      SamplerRng& rng);

 private:
  void apply_penalties(const SamplingParams& p, std::span<const int32_t> prompt, std::span<const int32_t> output);
  void keep_candidates(const SamplingParams& p);
  void fill_logprobs(std::span<const float> raw, const SamplingParams& p, SampleResult& r);

  LogprobsMode mode_;
  std::vector<double> x_;            // [vocab] processed logits
  std::vector<int32_t> count_;       // [vocab] scratch: output counts (zeroed after use)
  std::vector<uint8_t> seen_;        // [vocab] scratch: in prompt or output
  std::vector<int32_t> kept_;        // candidate token ids after filtering
  double kept_max_ = 0, kept_mass_ = 0;  // max logit and sum exp(x - max) over kept_
};

}  // namespace latentserve
