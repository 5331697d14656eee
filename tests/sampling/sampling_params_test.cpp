#include "sampling/sampling_params.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>

#include "core/error.h"

namespace latentserve {
namespace {

using ::testing::HasSubstr;

// validate() must throw an Error whose message names the parameter and the bad value.
void expect_invalid(const std::function<void(SamplingParams&)>& set, const std::string& name,
                    const std::string& value) {
  SamplingParams p;
  set(p);
  try {
    p.validate();
    ADD_FAILURE() << name << " = " << value << " was accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr(name)) << value;
    EXPECT_THAT(e.what(), HasSubstr(value)) << name;
  }
}

TEST(SamplingParams, DefaultsAndEdgesAreValid) {
  SamplingParams p;
  EXPECT_NO_THROW(p.validate());
  p.temperature = 0;
  p.top_k = -1;
  p.top_p = 1;
  p.min_p = 1;
  p.repetition_penalty = 0.01;
  p.presence_penalty = -2;
  p.frequency_penalty = 2;
  p.logprobs = 20;
  p.seed = 0;
  EXPECT_NO_THROW(p.validate());
  EXPECT_TRUE(p.is_greedy());
  p.top_k = 0;
  p.logprobs = 0;
  p.temperature = 2;
  EXPECT_NO_THROW(p.validate());
}

TEST(SamplingParams, EachInvalidParameterIsNamed) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  expect_invalid([](auto& p) { p.temperature = -0.5; }, "temperature", "-0.5");
  expect_invalid([](auto& p) { p.temperature = 2.5; }, "temperature", "2.5");
  expect_invalid([&](auto& p) { p.temperature = nan; }, "temperature", "nan");
  expect_invalid([](auto& p) { p.top_p = 0; }, "top_p", "0");
  expect_invalid([](auto& p) { p.top_p = 1.5; }, "top_p", "1.5");
  expect_invalid([](auto& p) { p.top_k = -2; }, "top_k", "-2");
  expect_invalid([](auto& p) { p.min_p = -0.1; }, "min_p", "-0.1");
  expect_invalid([](auto& p) { p.min_p = 1.25; }, "min_p", "1.25");
  expect_invalid([](auto& p) { p.repetition_penalty = 0; }, "repetition_penalty", "0");
  expect_invalid([](auto& p) { p.repetition_penalty = -1; }, "repetition_penalty", "-1");
  expect_invalid([](auto& p) { p.repetition_penalty = INFINITY; }, "repetition_penalty", "inf");
  expect_invalid([](auto& p) { p.presence_penalty = 2.5; }, "presence_penalty", "2.5");
  expect_invalid([](auto& p) { p.presence_penalty = -3; }, "presence_penalty", "-3");
  expect_invalid([](auto& p) { p.frequency_penalty = -2.01; }, "frequency_penalty", "-2.01");
  expect_invalid([](auto& p) { p.frequency_penalty = 7; }, "frequency_penalty", "7");
  expect_invalid([](auto& p) { p.max_tokens = 0; }, "max_tokens", "0");
  expect_invalid([](auto& p) { p.logprobs = 21; }, "logprobs", "21");
  expect_invalid([](auto& p) { p.logprobs = -1; }, "logprobs", "-1");
  expect_invalid([](auto& p) { p.n = 0; }, "n", "0");
  expect_invalid([](auto& p) { p.stop_token_ids = {3, -4}; }, "stop_token_ids", "-4");
}

TEST(SamplingParams, FinishReasons) {
  SamplingParams p;
  p.max_tokens = 5;
  p.stop_token_ids = {42};
  const std::vector<int32_t> eos = {2};
  EXPECT_EQ(finish_reason_after(p, 7, 1, eos), FinishReason::None);
  EXPECT_EQ(finish_reason_after(p, 2, 1, eos), FinishReason::Stop);
  EXPECT_EQ(finish_reason_after(p, 42, 1, eos), FinishReason::Stop);
  EXPECT_EQ(finish_reason_after(p, 7, 5, eos), FinishReason::Length);
  EXPECT_EQ(finish_reason_after(p, 2, 5, eos), FinishReason::Length);  // length first, as vLLM v1
  p.ignore_eos = true;
  EXPECT_EQ(finish_reason_after(p, 2, 1, eos), FinishReason::None);
  EXPECT_EQ(finish_reason_after(p, 42, 1, eos), FinishReason::Stop);  // stop ids still stop
}

}  // namespace
}  // namespace latentserve
