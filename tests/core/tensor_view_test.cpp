#include "core/tensor_view.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "core/error.h"

namespace latentserve {
namespace {

// A [2, 3, 4] tensor holding 1 + (i * 12 + j * 4 + k) at (i, j, k): a value that
// names its own row-major position (offset by one so that nothing is zero).
struct Fixture3d {
  std::vector<float> data = std::vector<float>(24);
  TensorView view;
  Fixture3d() {
    std::iota(data.begin(), data.end(), 1.0f);
    view = TensorView::contiguous(data.data(), DType::F32, {2, 3, 4});
  }
  static float expected(int64_t i, int64_t j, int64_t k) { return float(1 + i * 12 + j * 4 + k); }
};

TEST(TensorView, ContiguousHasRowMajorStrides) {
  Fixture3d f;
  EXPECT_EQ(f.view.rank, 3);
  EXPECT_EQ(f.view.strides[0], 12);
  EXPECT_EQ(f.view.strides[1], 4);
  EXPECT_EQ(f.view.strides[2], 1);
  EXPECT_EQ(f.view.numel(), 24);
  EXPECT_EQ(f.view.size_bytes(), 96u);
  EXPECT_EQ(f.view.dim(-1), 4);
  EXPECT_TRUE(f.view.is_contiguous());
  EXPECT_EQ(f.view.shape_string(), "[2, 3, 4]");
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t k = 0; k < 4; ++k) {
        EXPECT_EQ(f.view.offset({i, j, k}), i * 12 + j * 4 + k);
        EXPECT_EQ(f.view.at<float>({i, j, k}), Fixture3d::expected(i, j, k));
      }
}

TEST(TensorView, SliceSharesMemoryAndKeepsStrides) {
  Fixture3d f;
  TensorView s = f.view.slice(1, 1, 3);  // [2, 2, 4]
  EXPECT_EQ(s.shape_string(), "[2, 2, 4]");
  EXPECT_FALSE(s.is_contiguous());  // rows 1..2 of each of the 2 blocks: a gap between blocks
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 2; ++j)
      for (int64_t k = 0; k < 4; ++k) EXPECT_EQ(s.at<float>({i, j, k}), Fixture3d::expected(i, j + 1, k));
  TensorView first = f.view.slice(0, 1, 2);  // [1, 3, 4], the second block: contiguous
  EXPECT_TRUE(first.is_contiguous());
  EXPECT_EQ(first.ptr<float>(), f.data.data() + 12);
  TensorView last = f.view.slice(-1, 2, 4);  // negative axis
  EXPECT_EQ(last.at<float>({1, 2, 1}), Fixture3d::expected(1, 2, 3));
  EXPECT_EQ(f.view.slice(0, 1, 1).numel(), 0);  // empty slices are fine
}

TEST(TensorView, TransposeSwapsShapeAndStrides) {
  Fixture3d f;
  TensorView t = f.view.transpose(0, 2);  // [4, 3, 2]
  EXPECT_EQ(t.shape_string(), "[4, 3, 2]");
  EXPECT_FALSE(t.is_contiguous());
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t k = 0; k < 2; ++k) EXPECT_EQ(t.at<float>({i, j, k}), Fixture3d::expected(k, j, i));
  TensorView back = t.transpose(-1, 0);
  EXPECT_TRUE(back.is_contiguous());
  EXPECT_EQ(back.at<float>({1, 2, 3}), Fixture3d::expected(1, 2, 3));
}

TEST(TensorView, ReshapeOfContiguousViews) {
  Fixture3d f;
  TensorView r = f.view.reshape({6, 4});
  EXPECT_EQ(r.at<float>({4, 3}), Fixture3d::expected(1, 1, 3));  // flat index 19
  TensorView flat = f.view.reshape({24});
  EXPECT_EQ(flat.at<float>({23}), 24.0f);
  EXPECT_THROW(f.view.reshape({5, 5}), Error);
  EXPECT_THROW(f.view.transpose(0, 1).reshape({24}), Error);
  // A size-1 dimension with an odd stride does not break contiguity.
  TensorView one = f.view.slice(0, 0, 1);
  EXPECT_EQ(one.reshape({3, 4}).at<float>({2, 0}), Fixture3d::expected(0, 2, 0));
}

TEST(TensorView, ScalarsAndInvalidShapes) {
  float x = 3.5f;
  TensorView scalar = TensorView::contiguous(&x, DType::F32, {});
  EXPECT_EQ(scalar.numel(), 1);
  EXPECT_EQ(scalar.shape_string(), "[]");
  EXPECT_TRUE(scalar.is_contiguous());
  EXPECT_THROW(TensorView::contiguous(&x, DType::F32, {2, -1}), Error);
  EXPECT_THROW(TensorView::contiguous(&x, DType::F32, {1, 1, 1, 1, 1, 1, 1}), Error);
  EXPECT_TRUE(TensorView{}.empty());
}

TEST(TensorView, SliceOffsetsUseTheElementSize) {
  std::vector<uint16_t> halves(12);
  std::iota(halves.begin(), halves.end(), uint16_t(100));
  TensorView v = TensorView::contiguous(halves.data(), DType::BF16, {3, 4});
  TensorView row2 = v.slice(0, 2, 3);
  EXPECT_EQ(static_cast<char*>(row2.data) - static_cast<char*>(v.data), 16);
  EXPECT_EQ(row2.at<uint16_t>({0, 1}), 109);
}

}  // namespace
}  // namespace latentserve
