// rms_norm and add_rms_norm against the f64 reference, every weight dtype, in place
// and out of place, row counts that split across threads.
#include <gtest/gtest.h>

#include "backend/cpu/norm.h"
#include "backend/reference/norm_reference.h"
#include "common/tolerance.h"
#include "core/error.h"
#include "kernel_test_util.h"

namespace latentserve {
namespace {

using testing::all_close;
using testing::kF32KernelRelTol;
using testing::poisoned;
using testing::random_floats;
using testing::random_vector_tensor;

struct Case {
  int64_t n_rows, dim;
};
constexpr Case kCases[] = {{1, 67}, {5, 24}, {3, 2048}, {1000, 67}};
constexpr DType kWeightDTypes[] = {DType::F32, DType::BF16, DType::F16};

TEST(RmsNorm, MatchesReference) {
  ThreadPool pool(2);
  uint32_t seed = 1;
  for (DType dtype : kWeightDTypes)
    for (const Case& c : kCases)
      for (double eps : {1e-5, 1e-6}) {
        std::mt19937 rng(seed++);
        const int64_t n = c.n_rows * c.dim;
        const auto weight = random_vector_tensor(rng, dtype, c.dim);
        auto x = random_floats(rng, n, 3.0f);
        std::vector<double> ref(static_cast<size_t>(n));
        reference::rms_norm_reference(x.data(), c.n_rows, c.dim, weight.view, eps, ref.data());

        auto out = poisoned(n);
        cpu::rms_norm(x.data(), c.n_rows, c.dim, weight.view, eps, out.data(), pool);
        EXPECT_TRUE(all_close(out.data(), ref.data(), n, kF32KernelRelTol))
            << dtype_name(dtype) << " rows " << c.n_rows << " dim " << c.dim;

        cpu::rms_norm(x.data(), c.n_rows, c.dim, weight.view, eps, x.data(), pool);  // in place
        EXPECT_TRUE(all_close(x.data(), ref.data(), n, kF32KernelRelTol)) << "in place, " << dtype_name(dtype);
      }
}

TEST(AddRmsNorm, UpdatesResidualAndNormalisesIt) {
  ThreadPool pool(2);
  uint32_t seed = 100;
  for (DType dtype : kWeightDTypes)
    for (const Case& c : kCases) {
      std::mt19937 rng(seed++);
      const int64_t n = c.n_rows * c.dim;
      const auto weight = random_vector_tensor(rng, dtype, c.dim);
      auto residual = random_floats(rng, n);
      auto x = random_floats(rng, n);
      std::vector<double> ref_residual(static_cast<size_t>(n)), ref_out(static_cast<size_t>(n));
      reference::add_rms_norm_reference(residual.data(), x.data(), c.n_rows, c.dim, weight.view, 1e-6,
                                        ref_residual.data(), ref_out.data());

      auto residual_inplace = residual;
      auto x_inplace = x;
      auto out = poisoned(n);
      cpu::add_rms_norm(residual.data(), x.data(), c.n_rows, c.dim, weight.view, 1e-6, out.data(), pool);
      EXPECT_TRUE(all_close(residual.data(), ref_residual.data(), n, kF32KernelRelTol)) << dtype_name(dtype);
      EXPECT_TRUE(all_close(out.data(), ref_out.data(), n, kF32KernelRelTol)) << dtype_name(dtype);

      // out aliasing x
      cpu::add_rms_norm(residual_inplace.data(), x_inplace.data(), c.n_rows, c.dim, weight.view, 1e-6,
                        x_inplace.data(), pool);
      EXPECT_TRUE(all_close(x_inplace.data(), ref_out.data(), n, kF32KernelRelTol)) << "in place";
    }
}

TEST(RmsNorm, UnsupportedWeightDtypeThrowsNamingIt) {
  ThreadPool pool(1);
  std::mt19937 rng(5);
  const auto weight = random_vector_tensor(rng, DType::I8, 16);
  auto x = random_floats(rng, 16);
  try {
    cpu::rms_norm(x.data(), 1, 16, weight.view, 1e-6, x.data(), pool);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("I8"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace latentserve
