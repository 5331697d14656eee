// Latency samples stay bounded (a server runs for days) and keep the newest values.
#include <gtest/gtest.h>

#include "engine/engine_metrics.h"

namespace latentserve {
namespace {

TEST(EngineMetrics, LatencySamplesKeepTheNewestAndStayBounded) {
  std::vector<double> samples;
  const size_t n = kMaxLatencySamples + 12345;
  for (size_t i = 0; i < n; ++i) record_sample(samples, double(i));
  EXPECT_LE(samples.size(), kMaxLatencySamples);
  EXPECT_GE(samples.size(), kMaxLatencySamples / 2);
  EXPECT_EQ(samples.back(), double(n - 1));
  for (size_t i = 1; i < samples.size(); ++i) ASSERT_EQ(samples[i], samples[i - 1] + 1) << "kept in order, no gaps";
}

}  // namespace
}  // namespace latentserve
