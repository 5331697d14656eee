// linear() against the f64 reference: every weight dtype, both paths (GEMV and GEMM,
// each forced on every token count), both GEMM libraries, AVX-512 and AVX2 GEMVs,
// odd shapes that leave partial vector blocks and partial row tiles.
#include <gtest/gtest.h>

#include <limits>

#include "backend/cpu/linear.h"
#include "backend/reference/linear_reference.h"
#include "common/tolerance.h"
#include "core/error.h"
#include "kernel_test_util.h"

namespace latentserve {
namespace {

using testing::all_close;
using testing::kF32KernelRelTol;
using testing::poisoned;
using testing::random_floats;
using testing::random_tensor;

struct Shape {
  int64_t in, out, row_stride;  // row_stride 0: contiguous
};

constexpr DType kWeightDTypes[] = {DType::F32, DType::BF16, DType::F16};
// 1..4: the GEMV's narrow tiles; 5..8: one wide pass of 2 rows x up to 8 tokens; 9, 12, 17:
// a full wide pass plus a partial one; 64: the GEMM's range.
constexpr int64_t kTokenCounts[] = {1, 3, 4, 5, 6, 7, 8, 9, 12, 17, 64};
constexpr int64_t kNever = std::numeric_limits<int64_t>::max();

// Runs linear() under each option set on one (dtype, shape, n_tokens, bias) case.
void check_case(ThreadPool& pool, DType dtype, const Shape& s, int64_t n_tokens, bool with_bias, uint32_t seed) {
  std::mt19937 rng(seed);
  const auto weight = random_tensor(rng, dtype, s.out, s.in, s.row_stride);
  const auto x = random_floats(rng, n_tokens * s.in);
  const auto bias = random_floats(rng, s.out);
  const float* b = with_bias ? bias.data() : nullptr;
  std::vector<double> ref(size_t(n_tokens * s.out));
  reference::linear_reference(x.data(), n_tokens, weight.view, b, ref.data());

  std::vector<std::pair<std::string, cpu::LinearOptions>> variants = {
      {"default", {}},
      {"gemv avx512", {kNever, cpu::GemmLibrary::OneDnn, true}},
      {"gemv avx2", {kNever, cpu::GemmLibrary::OneDnn, false}},
      {"gemm oneDNN", {1, cpu::GemmLibrary::OneDnn, true}},
      {"gemm OpenBLAS", {1, cpu::GemmLibrary::OpenBlas, true}},
  };
  for (const auto& [name, options] : variants) {
    auto y = poisoned(n_tokens * s.out);
    cpu::linear(x.data(), n_tokens, weight.view, b, y.data(), pool, options);
    EXPECT_TRUE(all_close(y.data(), ref.data(), n_tokens * s.out, kF32KernelRelTol))
        << name << ", weight " << dtype_name(dtype) << " " << weight.view.shape_string() << " row stride "
        << weight.view.strides[0] << ", n_tokens " << n_tokens << (with_bias ? ", bias" : "");
  }
}

TEST(Linear, MatchesReferenceForEveryDtypePathAndTokenCount) {
  ThreadPool pool(2);
  uint32_t seed = 1;
  for (DType dtype : kWeightDTypes)
    for (int64_t n_tokens : kTokenCounts) check_case(pool, dtype, {67, 131, 0}, n_tokens, true, seed++);
}

TEST(Linear, OddShapesStridesAndNoBias) {
  ThreadPool pool(2);
  const Shape shapes[] = {
      {1, 5, 0},       // a single input feature
      {5, 3, 0},       // everything shorter than one vector block and one row tile
      {64, 16, 0},     // whole AVX-512 blocks, one row block
      {67, 131, 80},   // a slice of a wider tensor (row stride > in)
      {1000, 77, 0},   // long rows: many blocks plus a tail
  };
  uint32_t seed = 100;
  for (DType dtype : kWeightDTypes)
    for (const Shape& s : shapes)
      for (int64_t n_tokens : {int64_t(1), int64_t(5), int64_t(8)}) check_case(pool, dtype, s, n_tokens, false, seed++);
}

TEST(Linear, WeightsAtEveryAlignmentPhase) {
  // The GEMV cuts rows at the first 32/64-byte aligned element when every row has the
  // same phase (row stride 96 elements keeps it); checkpoints are often 8-byte aligned.
  ThreadPool pool(2);
  std::mt19937 rng(21);
  const int64_t in = 90, row_stride = 96, out = 37;
  for (DType dtype : kWeightDTypes) {
    const int64_t elem = int64_t(dtype_size_bytes(dtype));
    auto stored = random_tensor(rng, dtype, out + 1, row_stride);  // one spare row to shift into
    for (int64_t shift_bytes : {0, 2, 4, 8, 14, 30, 36, 62}) {
      if (shift_bytes % elem != 0) continue;
      TensorView w = stored.view;
      w.data = static_cast<uint8_t*>(w.data) + shift_bytes;
      w.shape = {out, in};
      for (int64_t n_tok : {int64_t(3), int64_t(7)}) {  // a narrow and a wide GEMV tile
        const auto x = random_floats(rng, n_tok * in);
        std::vector<double> ref(size_t(n_tok * out));
        reference::linear_reference(x.data(), n_tok, w, nullptr, ref.data());
        for (bool avx512 : {true, false}) {
          auto y = poisoned(n_tok * out);
          cpu::linear(x.data(), n_tok, w, nullptr, y.data(), pool, {kNever, cpu::GemmLibrary::OneDnn, avx512});
          EXPECT_TRUE(all_close(y.data(), ref.data(), n_tok * out, kF32KernelRelTol))
              << dtype_name(dtype) << " shifted by " << shift_bytes << " bytes, avx512 " << avx512 << ", "
              << n_tok << " tokens";
        }
      }
    }
  }
}

TEST(Linear, SingleThreadedPoolGivesTheSameAnswer) {
  ThreadPool pool(1);
  check_case(pool, DType::BF16, {300, 250, 0}, 2, true, 7);
  check_case(pool, DType::F16, {300, 250, 0}, 20, true, 8);
}

TEST(Linear, LargeBf16PanelsCoverManyPanels) {
  // 2 MiB f32 panels hold 256 rows of 2048: 600 rows need three panels, the last partial.
  ThreadPool pool(2);
  std::mt19937 rng(11);
  const int64_t in = 2048, out = 600, n_tokens = 20;
  const auto weight = random_tensor(rng, DType::BF16, out, in);
  const auto x = random_floats(rng, n_tokens * in);
  std::vector<double> ref(size_t(n_tokens * out));
  reference::linear_reference(x.data(), n_tokens, weight.view, nullptr, ref.data());
  for (auto library : {cpu::GemmLibrary::OneDnn, cpu::GemmLibrary::OpenBlas}) {
    auto y = poisoned(n_tokens * out);
    cpu::linear(x.data(), n_tokens, weight.view, nullptr, y.data(), pool, {1, library, true});
    EXPECT_TRUE(all_close(y.data(), ref.data(), n_tokens * out, kF32KernelRelTol)) << gemm_library_name(library);
  }
}

TEST(Linear, UnsupportedWeightDtypeThrowsNamingItAndTheShape) {
  ThreadPool pool(2);
  std::mt19937 rng(3);
  for (DType dtype : {DType::I8, DType::F8_E4M3, DType::I32, DType::F64}) {
    const auto weight = random_tensor(rng, dtype, 131, 67);
    const auto x = random_floats(rng, 67);
    auto y = poisoned(131);
    try {
      cpu::linear(x.data(), 1, weight.view, nullptr, y.data(), pool);
      ADD_FAILURE() << "no error for weight dtype " << dtype_name(dtype);
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find(std::string(dtype_name(dtype))), std::string::npos) << message;
      EXPECT_NE(message.find("[131, 67]"), std::string::npos) << message;
    }
  }
}

TEST(Linear, ZeroTokensWritesNothing) {
  ThreadPool pool(2);
  std::mt19937 rng(4);
  const auto weight = random_tensor(rng, DType::BF16, 8, 8);
  float y = 1.5f;
  cpu::linear(nullptr, 0, weight.view, nullptr, &y, pool);
  EXPECT_EQ(y, 1.5f);
}

}  // namespace
}  // namespace latentserve
