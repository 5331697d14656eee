#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"

namespace latentserve {

namespace {
constexpr double kNegInf = -std::numeric_limits<double>::infinity();
uint32_t lo32(uint64_t v) { return uint32_t(v); }
uint32_t hi32(uint64_t v) { return uint32_t(v >> 32); }
}  // namespace

SamplerRng::SamplerRng(std::optional<uint64_t> seed, uint64_t stream) {
  // std::seed_seq and mt19937_64 are fully specified by the standard: a seed gives the
  // same stream with every standard library.
  if (seed) {
    std::seed_seq s{lo32(*seed), hi32(*seed), lo32(stream), hi32(stream)};
    engine_.seed(s);
  } else {
    std::random_device rd;
    std::seed_seq s{rd(), rd(), rd(), rd(), lo32(stream), hi32(stream)};
    engine_.seed(s);
  }
}

double SamplerRng::next_uniform() { return double(engine_() >> 11) * 0x1.0p-53; }

SampleResult Sampler::sample(std::span<const float> logits, const SamplingParams& params,
                             std::span<const int32_t> prompt_tokens, std::span<const int32_t> output_tokens,
                             SamplerRng& rng) {
  const size_t vocab = logits.size();
  if (vocab == 0) fail("sampler: empty logits");
  x_.resize(vocab);
  for (size_t i = 0; i < vocab; ++i) {
    if (std::isnan(logits[i])) fail("sampler: logit of token {} is NaN", i);
    x_[i] = double(logits[i]);
  }
  apply_penalties(params, prompt_tokens, output_tokens);

  SampleResult r;
  if (params.is_greedy()) {
    // First index of the largest (torch.argmax); all of the vocabulary counts for logprobs.
    r.token = int32_t(std::max_element(x_.begin(), x_.end()) - x_.begin());
    kept_max_ = x_[size_t(r.token)];
    if (kept_max_ == kNegInf) fail("sampler: every logit is -inf");
    kept_.clear();
    if (params.logprobs) {
      kept_.resize(vocab);
      for (size_t i = 0; i < vocab; ++i) kept_[i] = int32_t(i);
      kept_mass_ = 0;
      for (double v : x_) kept_mass_ += std::exp(v - kept_max_);
    }
  } else {
    for (double& v : x_) v /= params.temperature;
    keep_candidates(params);
    // Inverse CDF over the kept tokens: one draw from the request's own stream.
    const double target = rng.next_uniform() * kept_mass_;
    double cum = 0;
    r.token = kept_.back();
    for (int32_t t : kept_) {
      cum += std::exp(x_[size_t(t)] - kept_max_);
      if (cum > target) {
        r.token = t;
        break;
      }
    }
  }
  if (params.logprobs) fill_logprobs(logits, params, r);
  return r;
}

// vLLM apply_penalties / apply_repetition_penalties (after HF's
// RepetitionPenaltyLogitsProcessor): repetition on prompt + output tokens, then
// frequency (times the count in the output), then presence (once if in the output).
void Sampler::apply_penalties(const SamplingParams& p, std::span<const int32_t> prompt,
                              std::span<const int32_t> output) {
  const bool rep = p.repetition_penalty != 1.0, freq = p.frequency_penalty != 0.0, pres = p.presence_penalty != 0.0;
  if (!rep && !freq && !pres) return;
  const size_t vocab = x_.size();
  count_.resize(vocab, 0);
  seen_.resize(vocab, 0);
  for (auto list : {prompt, output})
    for (int32_t t : list)
      if (t < 0 || size_t(t) >= vocab) fail("sampler: token id {} outside the vocabulary [0, {})", t, vocab);
  if (rep) {
    for (auto list : {prompt, output})
      for (int32_t t : list) {
        if (seen_[size_t(t)]) continue;
        seen_[size_t(t)] = 1;
        double& v = x_[size_t(t)];
        v = v > 0 ? v / p.repetition_penalty : v * p.repetition_penalty;
      }
    for (auto list : {prompt, output})
      for (int32_t t : list) seen_[size_t(t)] = 0;
  }
  for (int32_t t : output) ++count_[size_t(t)];
  for (int32_t t : output) {
    if (count_[size_t(t)] == 0) continue;  // done already
    x_[size_t(t)] -= p.frequency_penalty * count_[size_t(t)] + p.presence_penalty;
    count_[size_t(t)] = 0;
  }
}

// min_p, then top_k, then top_p over the temperature-scaled logits in x_. Leaves the
// survivors in kept_, their max logit in kept_max_ and sum exp(x - max) in kept_mass_.
void Sampler::keep_candidates(const SamplingParams& p) {
  const size_t vocab = x_.size();
  const double m = *std::max_element(x_.begin(), x_.end());
  if (m == kNegInf) fail("sampler: every logit is -inf");
  // p_i >= min_p * p_max  <=>  x_i >= max + log(min_p)
  const double floor = p.min_p > 0 ? m + std::log(p.min_p) : kNegInf;
  kept_.clear();
  for (size_t i = 0; i < vocab; ++i)
    if (x_[i] >= floor && x_[i] > kNegInf) kept_.push_back(int32_t(i));

  if (p.top_k > 0 && size_t(p.top_k) < kept_.size()) {
    // Keep every logit >= the k-th largest (ties at the boundary stay, as vLLM and HF).
    std::vector<double> values(kept_.size());
    for (size_t j = 0; j < kept_.size(); ++j) values[j] = x_[size_t(kept_[j])];
    std::nth_element(values.begin(), values.begin() + (p.top_k - 1), values.end(), std::greater<double>());
    const double kth = values[size_t(p.top_k - 1)];
    std::erase_if(kept_, [&](int32_t t) { return x_[size_t(t)] < kth; });
  }

  kept_max_ = m;
  kept_mass_ = 0;
  for (int32_t t : kept_) kept_mass_ += std::exp(x_[size_t(t)] - m);

  if (p.top_p < 1.0) {
    // Highest probability first (lower id first on ties); keep token j while the mass of
    // the tokens before it is < top_p. Sort only as far as needed: grow the sorted prefix.
    const auto higher = [&](int32_t a, int32_t b) {
      return x_[size_t(a)] > x_[size_t(b)] || (x_[size_t(a)] == x_[size_t(b)] && a < b);
    };
    const double limit = p.top_p * kept_mass_;
    size_t take = std::min<size_t>(kept_.size(), 256), cut = kept_.size();
    while (true) {
      std::partial_sort(kept_.begin(), kept_.begin() + ptrdiff_t(take), kept_.end(), higher);
      double before = 0;
      size_t j = 0;
      for (; j < take && before < limit; ++j) before += std::exp(x_[size_t(kept_[j])] - m);
      if (before >= limit) {
        cut = j;
        break;
      }
      if (take == kept_.size()) break;
      take = std::min(kept_.size(), take * 4);
    }
    kept_.resize(cut);
    kept_mass_ = 0;
    for (int32_t t : kept_) kept_mass_ += std::exp(x_[size_t(t)] - m);
  }
}

void Sampler::fill_logprobs(std::span<const float> raw, const SamplingParams& p, SampleResult& r) {
  const size_t vocab = x_.size();
  // primary[t] - norm is token t's logprob. Processed: x_ with -inf for tokens cut by
  // min_p / top_k / top_p (they rank last, lower id first). Raw: the logits as given.
  std::vector<double>& primary = x_;
  double norm = 0;
  if (mode_ == LogprobsMode::Raw) {
    for (size_t i = 0; i < vocab; ++i) x_[i] = double(raw[i]);
    const double m = *std::max_element(x_.begin(), x_.end());
    double s = 0;
    for (double v : x_) s += std::exp(v - m);
    norm = m + std::log(s);
  } else {
    norm = kept_max_ + std::log(kept_mass_);
    if (kept_.size() < vocab) {
      seen_.assign(vocab, 0);
      for (int32_t t : kept_) seen_[size_t(t)] = 1;
      for (size_t i = 0; i < vocab; ++i)
        if (!seen_[i]) x_[i] = kNegInf;
      std::fill(seen_.begin(), seen_.end(), 0);
    }
  }
  r.logprob = float(primary[size_t(r.token)] - norm);
  // Top n by logprob, lower id first on ties: a bounded insertion list (n <= 20).
  const size_t n = size_t(*p.logprobs);
  std::vector<int32_t> best;
  best.reserve(n + 1);
  const auto better = [&](int32_t a, int32_t b) {
    return primary[size_t(a)] > primary[size_t(b)] || (primary[size_t(a)] == primary[size_t(b)] && a < b);
  };
  for (size_t i = 0; i < vocab && n > 0; ++i) {
    const int32_t t = int32_t(i);
    if (best.size() == n && !better(t, best.back())) continue;
    best.insert(std::upper_bound(best.begin(), best.end(), t, better), t);
    if (best.size() > n) best.pop_back();
  }
  r.top_logprobs.clear();
  for (int32_t t : best) r.top_logprobs.push_back({t, float(primary[size_t(t)] - norm)});
}

}  // namespace latentserve
