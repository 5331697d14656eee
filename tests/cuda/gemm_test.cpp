// cuda::Gemm (cuBLASLt, bf16 in, f32 accumulation, bf16 or f32 out, optional bf16 bias) against
// an f64 host reference on random bf16 inputs and odd shapes; the plan cache; errors.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/cuda/gemm.h"
#include "core/error.h"
#include "cuda/gpu_test_util.h"

namespace latentserve {
namespace {

using testing::from_bf16_bits;
using testing::poisoned_bf16;
using testing::poisoned_f32;
using testing::relative_l2;
using testing::round_to_bf16;
using testing::to_bf16_bits;
using testing::to_device;
using testing::to_host;

std::vector<float> random_bf16_values(size_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> x(n);
  for (auto& v : x) v = d(rng);
  return round_to_bf16(std::move(x));
}

// y[i, j] = sum_t x[i, t] w[j, t] + bias[j], in f64.
std::vector<double> reference(const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>* bias,
                              int64_t m, int64_t n, int64_t k) {
  std::vector<double> y(size_t(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = bias ? double((*bias)[size_t(j)]) : 0.0;
      const float* xr = &x[size_t(i * k)];
      const float* wr = &w[size_t(j * k)];
      for (int64_t t = 0; t < k; ++t) acc += double(xr[t]) * double(wr[t]);
      y[size_t(i * n + j)] = acc;
    }
  return y;
}

// First element that is NaN or off by more than 5% of the row's scale, for the failure message.
std::string first_bad(const std::vector<float>& got, const std::vector<double>& ref) {
  double rms = 0;
  for (double v : ref) rms += v * v;
  rms = std::sqrt(rms / double(ref.size()));
  for (size_t i = 0; i < got.size(); ++i)
    if (!(std::fabs(double(got[i]) - ref[i]) <= 0.05 * rms + 1e-6))
      return "first bad element " + std::to_string(i) + ": got " + std::to_string(got[i]) + ", want " +
             std::to_string(ref[i]);
  return "no single bad element";
}

struct Shape {
  int64_t m, n, k;
};

TEST(CudaGemm, MatchesAnF64ReferenceOnOddShapesWithAndWithoutBias) {
  LS_REQUIRE_GPU();
  cuda::Gemm gemm;
  uint32_t seed = 100;
  const Shape shapes[] = {{1, 1, 64},    {1, 7, 200},  {1, 4099, 1000}, {3, 4099, 200}, {17, 7, 1000},
                          {17, 4096 + 3, 64}, {130, 1, 200}, {130, 257, 1000}, {3, 128, 64}};
  for (const Shape& sh : shapes)
    for (bool y_f32 : {false, true})
      for (bool with_bias : {false, true}) {
        const auto [m, n, k] = sh;
        SCOPED_TRACE(::testing::Message() << "m " << m << " n " << n << " k " << k << " y " << (y_f32 ? "f32" : "bf16")
                                          << " bias " << with_bias);
        const auto x = random_bf16_values(size_t(m * k), seed++, 1.0f);
        const auto w = random_bf16_values(size_t(n * k), seed++, 0.05f);
        const auto b = random_bf16_values(size_t(n), seed++, 1.0f);
        auto dx = to_device(to_bf16_bits(x)), dw = to_device(to_bf16_bits(w)), db = to_device(to_bf16_bits(b));
        auto dy = y_f32 ? poisoned_f32(size_t(m * n)) : poisoned_bf16(size_t(m * n));
        gemm.bf16(dx.data(), dw.data(), dy.data(), m, n, k, y_f32, with_bias ? db.data() : nullptr, nullptr);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        const auto ref = reference(x, w, with_bias ? &b : nullptr, m, n, k);
        const auto got = y_f32 ? to_host<float>(dy, size_t(m * n)) : from_bf16_bits(to_host<uint16_t>(dy, size_t(m * n)));
        // bf16 out: one rounding of 2^-9 relative (rms ~2^-9 / sqrt(3)) -> 1e-2 is generous;
        // f32 out: f32 accumulation over k <= 1000 terms stays far below 1e-3.
        const double err = relative_l2(got, ref);
        EXPECT_LT(err, y_f32 ? 1e-3 : 1e-2) << first_bad(got, ref);
      }
}

TEST(CudaGemm, RepeatedShapesReuseTheirPlanAndMisalignedPointersGetTheirOwn) {
  LS_REQUIRE_GPU();
  cuda::Gemm gemm;
  gemm.set_gemv_max_rows(0);  // cuBLASLt's plans are what this test counts (m = 3 would take the gemv kernel)
  const int64_t m = 3, n = 64, k = 128;
  const auto x = random_bf16_values(size_t(m * k + 8), 1, 1.0f), w = random_bf16_values(size_t(n * k), 2, 0.1f);
  auto dx = to_device(to_bf16_bits(x)), dw = to_device(to_bf16_bits(w));
  auto dy = poisoned_bf16(size_t(m * n));
  gemm.bf16(dx.data(), dw.data(), dy.data(), m, n, k, false, nullptr, nullptr);
  const size_t plans = gemm.n_cached_plans();
  EXPECT_EQ(plans, 1u);
  for (int i = 0; i < 3; ++i) gemm.bf16(dx.data(), dw.data(), dy.data(), m, n, k, false, nullptr, nullptr);
  EXPECT_EQ(gemm.n_cached_plans(), plans) << "a repeated shape must not build (or query) a new plan";
  // x starting one bf16 later: 2-byte aligned, a plan of its own, still right.
  const void* x_odd = static_cast<const uint16_t*>(dx.data()) + 1;
  gemm.bf16(x_odd, dw.data(), dy.data(), m, n, k, false, nullptr, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(gemm.n_cached_plans(), plans + 1);
  const std::vector<float> x_shifted(x.begin() + 1, x.begin() + 1 + m * k);
  const auto got = from_bf16_bits(to_host<uint16_t>(dy, size_t(m * n)));
  const auto ref = reference(x_shifted, w, nullptr, m, n, k);
  EXPECT_LT(relative_l2(got, ref), 1e-2) << first_bad(got, ref);
}

// The autotune picks from 1 or from up to 64 of cuBLASLt's heuristic results; whichever kernel
// it keeps must give the reference's numbers (decode-like m = 64 and an odd n).
TEST(CudaGemm, EveryCandidateCountGivesTheReferenceResult) {
  LS_REQUIRE_GPU();
  const int64_t m = 64, n = 1027, k = 512;
  const auto x = random_bf16_values(size_t(m * k), 7, 1.0f), w = random_bf16_values(size_t(n * k), 8, 0.05f);
  auto dx = to_device(to_bf16_bits(x)), dw = to_device(to_bf16_bits(w));
  const auto ref = reference(x, w, nullptr, m, n, k);
  for (int candidates : {1, 8, cuda::kMaxGemmCandidates}) {
    SCOPED_TRACE(::testing::Message() << candidates << " candidates");
    cuda::Gemm gemm;
    gemm.set_candidates(candidates);
    auto dy = poisoned_f32(size_t(m * n));
    gemm.bf16(dx.data(), dw.data(), dy.data(), m, n, k, true, nullptr, nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const auto got = to_host<float>(dy, size_t(m * n));
    EXPECT_LT(relative_l2(got, ref), 1e-3) << first_bad(got, ref);
  }
  cuda::Gemm gemm;
  for (int bad : {0, cuda::kMaxGemmCandidates + 1}) {
    try {
      gemm.set_candidates(bad);
      ADD_FAILURE() << bad << " candidates must be refused";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("found " + std::to_string(bad)), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(gemm.candidates(), cuda::kDefaultGemmCandidates);
}

TEST(CudaGemm, BadParametersThrowNamingTheShape) {
  LS_REQUIRE_GPU();
  cuda::Gemm gemm;
  auto a = to_device(std::vector<uint16_t>(64, 0x3f80)), b = to_device(std::vector<uint16_t>(7 * 64, 0x3f80));
  auto y = poisoned_bf16(7);
  EXPECT_THROW(gemm.bf16(nullptr, b.data(), y.data(), 1, 7, 64, false, nullptr, nullptr), Error);
  EXPECT_THROW(gemm.bf16(a.data(), nullptr, y.data(), 1, 7, 64, false, nullptr, nullptr), Error);
  EXPECT_THROW(gemm.bf16(a.data(), b.data(), nullptr, 1, 7, 64, false, nullptr, nullptr), Error);
  EXPECT_THROW(gemm.bf16(a.data(), b.data(), y.data(), 1, -7, 64, false, nullptr, nullptr), Error);
  EXPECT_THROW(gemm.bf16(a.data(), b.data(), y.data(), -1, 7, 64, false, nullptr, nullptr), Error);
  try {
    gemm.bf16(a.data(), b.data(), y.data(), 1, 7, 0, false, nullptr, nullptr);
    FAIL() << "k = 0 must throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("k 0"), std::string::npos) << e.what();
  }
  gemm.bf16(a.data(), b.data(), y.data(), 0, 7, 64, false, nullptr, nullptr);  // m = 0: nothing to do
}

}  // namespace
}  // namespace latentserve
