// silu_mul against the f64 reference, including large |gate| where exp saturates,
// out of place and in place.
#include <gtest/gtest.h>

#include "backend/cpu/activation.h"
#include "backend/reference/activation_reference.h"
#include "common/tolerance.h"
#include "kernel_test_util.h"

namespace latentserve {
namespace {

using testing::all_close;
using testing::kF32KernelRelTol;
using testing::poisoned;
using testing::random_floats;

TEST(SiluMul, MatchesReference) {
  for (int64_t n : {1, 7, 8, 1003, 8192}) {
    std::mt19937 rng{uint32_t(n)};
    auto gate = random_floats(rng, n, 4.0f);
    const auto up = random_floats(rng, n);
    for (int64_t i = 0; i + 3 < n; i += 97) {  // the saturated ends of exp
      gate[size_t(i)] = 100.0f;
      gate[size_t(i + 1)] = -100.0f;
      gate[size_t(i + 2)] = -87.5f;
      gate[size_t(i + 3)] = 88.5f;
    }
    std::vector<double> ref(static_cast<size_t>(n));
    reference::silu_mul_reference(gate.data(), up.data(), n, ref.data());

    auto out = poisoned(n);
    cpu::silu_mul(gate.data(), up.data(), out.data(), n);
    EXPECT_TRUE(all_close(out.data(), ref.data(), n, kF32KernelRelTol)) << "n " << n;

    cpu::silu_mul(gate.data(), up.data(), gate.data(), n);  // out aliases gate
    EXPECT_TRUE(all_close(gate.data(), ref.data(), n, kF32KernelRelTol)) << "in place, n " << n;
  }
}

TEST(SiluMul, PointValues) {
  const float gate[3] = {0.0f, 1.0f, -1.0f};
  const float up[3] = {5.0f, 2.0f, 2.0f};
  float out[3];
  cpu::silu_mul(gate, up, out, 3);
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_NEAR(out[1], 2.0 / (1.0 + std::exp(-1.0)), 1e-6);
  EXPECT_NEAR(out[2], -2.0 / (1.0 + std::exp(1.0)), 1e-6);
}

}  // namespace
}  // namespace latentserve
