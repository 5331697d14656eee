#include "sampling/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "core/error.h"

namespace latentserve {
namespace {

std::vector<float> random_logits(size_t vocab, uint32_t seed, float scale = 2.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> x(vocab);
  for (auto& v : x) v = u(rng);
  return x;
}

SamplingParams random_params(double temperature, std::optional<uint64_t> seed = std::nullopt) {
  SamplingParams p;
  p.temperature = temperature;
  p.seed = seed;
  return p;
}

// --- the independent f64 reference: straightforward, full sorts, probability space ---

// vLLM apply_penalties (vllm/model_executor/layers/utils.py) with HF's repetition rule
// (transformers RepetitionPenaltyLogitsProcessor): for tokens in prompt or output,
// logit > 0 ? logit / r : logit * r; then logit -= frequency * count_in_output
// and logit -= presence * (count_in_output > 0)  (OpenAI parameter-details formula).
std::vector<double> reference_penalised(const std::vector<float>& logits, const SamplingParams& p,
                                        const std::vector<int32_t>& prompt, const std::vector<int32_t>& output) {
  std::vector<double> x(logits.begin(), logits.end());
  for (size_t t = 0; t < x.size(); ++t) {
    const auto n_out = std::count(output.begin(), output.end(), int32_t(t));
    const bool in_prompt = std::count(prompt.begin(), prompt.end(), int32_t(t)) > 0;
    if (in_prompt || n_out > 0) x[t] = x[t] > 0 ? x[t] / p.repetition_penalty : x[t] * p.repetition_penalty;
    x[t] -= p.frequency_penalty * double(n_out);
    x[t] -= p.presence_penalty * (n_out > 0 ? 1.0 : 0.0);
  }
  return x;
}

std::vector<double> softmax_over(const std::vector<double>& x, const std::vector<bool>& keep) {
  double m = -INFINITY, s = 0;
  for (size_t i = 0; i < x.size(); ++i)
    if (keep[i]) m = std::max(m, x[i]);
  std::vector<double> p(x.size(), 0.0);
  for (size_t i = 0; i < x.size(); ++i)
    if (keep[i]) s += p[i] = std::exp(x[i] - m);
  for (auto& v : p) v /= s;
  return p;
}

// The distribution sampled from: temperature, min_p, top_k, top_p, renormalised.
std::vector<double> reference_distribution(const std::vector<float>& logits, const SamplingParams& p,
                                           const std::vector<int32_t>& prompt = {},
                                           const std::vector<int32_t>& output = {}) {
  std::vector<double> x = reference_penalised(logits, p, prompt, output);
  for (auto& v : x) v /= p.temperature;
  const size_t n = x.size();
  std::vector<bool> keep(n, true);
  std::vector<double> prob = softmax_over(x, keep);
  const double p_max = *std::max_element(prob.begin(), prob.end());
  for (size_t i = 0; i < n; ++i) keep[i] = prob[i] >= p.min_p * p_max;
  if (p.top_k > 0) {
    std::vector<double> kept_logits;
    for (size_t i = 0; i < n; ++i)
      if (keep[i]) kept_logits.push_back(x[i]);
    std::sort(kept_logits.rbegin(), kept_logits.rend());
    if (size_t(p.top_k) < kept_logits.size())
      for (size_t i = 0; i < n; ++i) keep[i] = keep[i] && x[i] >= kept_logits[size_t(p.top_k - 1)];
  }
  prob = softmax_over(x, keep);
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return prob[a] > prob[b]; });
  double before = 0;
  for (size_t i : order) {
    if (before >= p.top_p) keep[i] = false;
    before += prob[i];
  }
  return softmax_over(x, keep);
}

// -------------------------------------------------------------------------------------

TEST(Sampler, GreedyIsArgmaxFirstIndexOnTies) {
  Sampler s;
  SamplerRng rng(std::nullopt);
  SamplingParams p = random_params(0.0);
  for (uint32_t seed = 0; seed < 20; ++seed) {
    const auto x = random_logits(1000, seed);
    const auto want = std::max_element(x.begin(), x.end()) - x.begin();
    EXPECT_EQ(s.sample(x, p, {}, {}, rng).token, want);
  }
  std::vector<float> ties = {0.5f, 3.0f, -1.0f, 3.0f, 3.0f};
  EXPECT_EQ(s.sample(ties, p, {}, {}, rng).token, 1);
  // Greedy decodes the penalised logits (vLLM applies penalties before the argmax).
  p.presence_penalty = 1.0;
  const std::vector<int32_t> out = {1};
  EXPECT_EQ(s.sample(ties, p, {}, out, rng).token, 3);
}

std::vector<int32_t> draw(Sampler& s, SamplerRng& rng, const SamplingParams& p, int n_steps, Sampler* other = nullptr) {
  std::vector<int32_t> out;
  SamplerRng noise(std::nullopt);
  SamplingParams q = random_params(1.0);
  for (int i = 0; i < n_steps; ++i) {
    const auto x = random_logits(500, uint32_t(i));
    if (other)  // other requests sampled in between, through the same sampler and not
      for (int j = 0; j < 3; ++j) {
        (j % 2 ? s : *other).sample(random_logits(300, 99u + uint32_t(j)), q, {}, {}, noise);
      }
    out.push_back(s.sample(x, p, {}, out, rng).token);
  }
  return out;
}

TEST(Sampler, SeededSamplingIsReproducibleWhateverElseIsSampled) {
  Sampler s, t;
  SamplingParams p = random_params(0.9, 1234);
  p.top_k = 50;
  p.top_p = 0.95;
  p.frequency_penalty = 0.1;
  SamplerRng a(p.seed), b(p.seed), c(uint64_t(4321)), d(p.seed, 1);
  const auto alone = draw(s, a, p, 200);
  const auto crowded = draw(s, b, p, 200, &t);
  EXPECT_EQ(alone, crowded);
  EXPECT_NE(alone, draw(s, c, p, 200)) << "another seed";
  EXPECT_NE(alone, draw(s, d, p, 200)) << "another stream (n > 1)";
  // Greedy steps draw nothing from the stream.
  SamplerRng e(p.seed);
  s.sample(random_logits(500, 7), random_params(0.0), {}, {}, e);
  EXPECT_EQ(draw(s, e, p, 200), alone);
}

struct DistributionCase {
  const char* name;
  double temperature;
  int32_t top_k;
  double top_p;
  double min_p;
};

TEST(Sampler, EmpiricalFrequenciesMatchTheProcessedDistribution) {
  const DistributionCase cases[] = {
      {"plain", 1.0, 0, 1.0, 0.0},         {"cold", 0.5, -1, 1.0, 0.0},
      {"hot", 1.8, 0, 1.0, 0.0},           {"top_k", 0.8, 5, 1.0, 0.0},
      {"top_p", 1.2, 0, 0.7, 0.0},         {"min_p", 1.0, 0, 1.0, 0.15},
      {"all", 0.9, 8, 0.8, 0.05},          {"top_k beyond vocab", 1.0, 100, 1.0, 0.0},
  };
  const std::vector<float> logits = random_logits(16, 2024, 2.5f);
  const std::vector<int32_t> prompt = {3, 4, 4}, output = {4, 9, 9, 9};
  Sampler s;
  constexpr int kDraws = 200000;
  for (const auto& c : cases) {
    for (const bool penalties : {false, true}) {
      SamplingParams p = random_params(c.temperature, 77);
      p.top_k = c.top_k;
      p.top_p = c.top_p;
      p.min_p = c.min_p;
      if (penalties) {
        p.repetition_penalty = 1.3;
        p.frequency_penalty = 0.4;
        p.presence_penalty = -0.3;
      }
      p.validate();
      const auto want = reference_distribution(logits, p, prompt, output);
      SamplerRng rng(p.seed);
      std::vector<int64_t> counts(logits.size(), 0);
      for (int i = 0; i < kDraws; ++i) ++counts[size_t(s.sample(logits, p, prompt, output, rng).token)];
      // sd of a frequency <= 0.5 / sqrt(N) ~ 0.0011; 0.006 is > 5 sd.
      for (size_t t = 0; t < logits.size(); ++t) {
        const double got = double(counts[t]) / kDraws;
        if (want[t] == 0.0)
          EXPECT_EQ(counts[t], 0) << c.name << " token " << t << " is filtered out but was drawn";
        else
          EXPECT_NEAR(got, want[t], 0.006) << c.name << " penalties=" << penalties << " token " << t;
      }
    }
  }
}

TEST(Sampler, PenaltiesChangeExactlyTheLogitsTheyShould) {
  // Hand-computed with the vLLM / HF formulas (see reference_penalised):
  // r = 1.5, f = 0.3, p = 0.2; prompt {0, 1}; output {2, 2, 4}.
  //   token 0  2.0  prompt only   -> 2.0 / 1.5                = 1.333333
  //   token 1 -1.0  prompt only   -> -1.0 * 1.5               = -1.5
  //   token 2  0.5  output twice  -> 0.5 / 1.5 - 2*0.3 - 0.2  = -0.466667
  //   token 3  0.0  untouched                                  = 0.0
  //   token 4  3.0  output once   -> 3.0 / 1.5 - 0.3 - 0.2    = 1.5
  //   token 5 -0.5  untouched                                  = -0.5
  const std::vector<float> logits = {2.0f, -1.0f, 0.5f, 0.0f, 3.0f, -0.5f};
  const std::vector<double> want = {2.0 / 1.5, -1.5, 0.5 / 1.5 - 0.8, 0.0, 1.5, -0.5};
  SamplingParams p = random_params(0.0);
  p.repetition_penalty = 1.5;
  p.frequency_penalty = 0.3;
  p.presence_penalty = 0.2;
  p.logprobs = 6;  // every token: processed logprobs are log_softmax of the penalised logits
  Sampler s;
  SamplerRng rng(std::nullopt);
  const std::vector<int32_t> prompt = {0, 1}, output = {2, 2, 4};
  const SampleResult r = s.sample(logits, p, prompt, output, rng);
  EXPECT_EQ(r.token, 4);
  ASSERT_EQ(r.top_logprobs.size(), 6u);
  std::vector<double> lp(6);
  for (const auto& e : r.top_logprobs) lp[size_t(e.token)] = e.logprob;
  for (size_t t = 0; t < 6; ++t) EXPECT_NEAR(lp[t] - lp[3], want[t], 1e-6) << "token " << t;
  EXPECT_NEAR(r.logprob, lp[4], 1e-7);
  // The same numbers from the reference implementation.
  const auto ref = reference_penalised(logits, p, prompt, output);
  for (size_t t = 0; t < 6; ++t) EXPECT_NEAR(ref[t], want[t], 1e-12);
}

TEST(Sampler, ProcessedLogprobsDescribeTheSampledDistribution) {
  const auto logits = random_logits(64, 5);
  SamplingParams p = random_params(0.7, 3);
  p.top_k = 4;
  p.logprobs = 6;
  Sampler s;
  SamplerRng rng(p.seed);
  const SampleResult r = s.sample(logits, p, {}, {}, rng);
  const auto want = reference_distribution(logits, p);
  ASSERT_EQ(r.top_logprobs.size(), 6u);
  for (size_t i = 0; i < 4; ++i) {
    const auto& e = r.top_logprobs[i];
    EXPECT_NEAR(e.logprob, std::log(want[size_t(e.token)]), 1e-5);
    if (i > 0) {
      EXPECT_GE(r.top_logprobs[i - 1].logprob, e.logprob);
    }
  }
  for (size_t i = 4; i < 6; ++i) EXPECT_EQ(r.top_logprobs[i].logprob, -INFINITY);  // cut by top_k
  EXPECT_NEAR(r.logprob, std::log(want[size_t(r.token)]), 1e-5);
  EXPECT_GT(want[size_t(r.token)], 0.0);

  // Raw mode: log_softmax of the logits as given, whatever temperature and top_k did.
  Sampler raw(LogprobsMode::Raw);
  SamplerRng rng2(p.seed);
  const SampleResult q = raw.sample(logits, p, {}, {}, rng2);
  EXPECT_EQ(q.token, r.token);
  std::vector<bool> all(64, true);
  const auto soft = softmax_over(std::vector<double>(logits.begin(), logits.end()), all);
  EXPECT_NEAR(q.logprob, std::log(soft[size_t(q.token)]), 1e-5);
  const auto best = std::max_element(soft.begin(), soft.end()) - soft.begin();
  EXPECT_EQ(q.top_logprobs[0].token, best);
  EXPECT_NEAR(q.top_logprobs[0].logprob, std::log(soft[size_t(best)]), 1e-5);
}

TEST(Sampler, RejectsBadInputs) {
  Sampler s;
  SamplerRng rng(uint64_t(1));
  SamplingParams p = random_params(1.0);
  p.presence_penalty = 0.5;
  const std::vector<float> x = {0.f, 1.f, 2.f};
  const std::vector<int32_t> bad = {5};
  EXPECT_THROW(s.sample(x, p, {}, bad, rng), Error);
  EXPECT_THROW(s.sample({}, p, {}, {}, rng), Error);
  const std::vector<float> with_nan = {0.f, NAN, 2.f};
  EXPECT_THROW(s.sample(with_nan, p, {}, {}, rng), Error);
  // -inf logits are masks: never drawn.
  const std::vector<float> masked = {-INFINITY, 0.f, -INFINITY};
  for (int i = 0; i < 50; ++i) EXPECT_EQ(s.sample(masked, random_params(1.0), {}, {}, rng).token, 1);
}

}  // namespace
}  // namespace latentserve
