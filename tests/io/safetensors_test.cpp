// Well-formed safetensors files: what was written comes back, bit for bit, through
// zero-copy views with the right dtype, shape and row-major strides.
#include "io/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>

#include "io/safetensors_builder.h"

namespace latentserve {
namespace {

using test::Bytes;
using test::TensorSpec;
using ::testing::HasSubstr;

// Every element of a contiguous view compared with the bytes that were written.
void expect_view_holds(const TensorView& v, const TensorSpec& spec, DType dtype) {
  EXPECT_EQ(v.dtype, dtype) << spec.name;
  ASSERT_EQ(v.rank, int(spec.shape.size())) << spec.name;
  int64_t stride = 1;
  for (int i = v.rank - 1; i >= 0; --i) {
    EXPECT_EQ(v.shape[size_t(i)], spec.shape[size_t(i)]) << spec.name << " dim " << i;
    EXPECT_EQ(v.strides[size_t(i)], stride) << spec.name << " dim " << i;
    stride *= spec.shape[size_t(i)];
  }
  ASSERT_EQ(v.size_bytes(), spec.bytes.size()) << spec.name;
  if (!spec.bytes.empty()) {
    EXPECT_EQ(std::memcmp(v.data, spec.bytes.data(), spec.bytes.size()), 0) << spec.name;
  }
}

TEST(Safetensors, ReadsBackEveryDtype) {
  std::mt19937 rng(5);
  const auto f32 = test::random_floats(12, rng);
  const auto bf16 = test::random_finite_16bit(10, rng, 7, 8);
  const auto f16 = test::random_finite_16bit(6, rng, 10, 5);
  std::vector<int64_t> i64(4);
  for (auto& x : i64) x = int64_t(rng()) * 1'000'003 - (int64_t(1) << 40);  // large, both signs, non-zero
  std::vector<int32_t> i32 = {7, -3, 123456, -98765};
  std::vector<uint8_t> e4m3(9), e5m2(5);
  for (auto& b : e4m3) b = uint8_t(1 + rng() % 0x7e);  // finite, non-zero codes
  for (auto& b : e5m2) b = uint8_t(0x80 | (1 + rng() % 0x7b));
  // Wider types first keeps every tensor aligned to its element size (as the writer does).
  const std::vector<TensorSpec> specs = {
      {"model.embed.i64", "I64", {2, 2}, test::to_bytes(i64)},
      {"layers.0.w", "F32", {3, 4}, test::to_bytes(f32)},
      {"layers.0.i", "I32", {4}, test::to_bytes(i32)},
      {"layers.0.b", "BF16", {2, 5}, test::to_bytes(bf16)},
      {"layers.0.h", "F16", {1, 2, 3}, test::to_bytes(f16)},
      {"layers.0.q", "F8_E4M3", {3, 3}, e4m3},
      {"layers.0.r", "F8_E5M2", {5}, e5m2},
  };
  const DType dtypes[] = {DType::I64, DType::F32, DType::I32, DType::BF16, DType::F16, DType::F8_E4M3, DType::F8_E5M2};
  test::TempDir dir;
  test::write_file(dir / "good.safetensors", test::build_safetensors(specs, R"({"format":"pt","note":"héllo"})"));

  SafetensorsFile file = SafetensorsFile::open(dir / "good.safetensors");
  ASSERT_EQ(file.tensors().size(), specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    const SafetensorsTensor* t = file.find(specs[i].name);
    ASSERT_NE(t, nullptr) << specs[i].name;
    expect_view_holds(t->view, specs[i], dtypes[i]);
    EXPECT_EQ(t->shape, specs[i].shape);
    expect_view_holds(file.tensor(specs[i].name), specs[i], dtypes[i]);
  }
  // Typed reads through the view, against the source arrays.
  EXPECT_EQ(file.tensor("layers.0.w").at<float>({2, 3}), f32[11]);
  EXPECT_EQ(file.tensor("model.embed.i64").at<int64_t>({1, 0}), i64[2]);
  EXPECT_EQ(file.tensor("layers.0.b").at<uint16_t>({1, 4}), bf16[9]);
  EXPECT_EQ(file.tensor("layers.0.q").at<uint8_t>({2, 1}), e4m3[7]);
  // In data-offset (file) order.
  EXPECT_EQ(file.tensors().front().name, "model.embed.i64");
  EXPECT_EQ(file.tensors().back().name, "layers.0.r");
  EXPECT_EQ(file.metadata().size(), 2u);
  EXPECT_EQ(file.metadata().at("format"), "pt");
  EXPECT_EQ(file.metadata().at("note"), "héllo");
}

TEST(Safetensors, ZeroSizeTensorsScalarsAndEmptyHeaders) {
  std::mt19937 rng(9);
  const std::vector<TensorSpec> specs = {
      {"scalar", "F32", {}, test::to_bytes(test::random_floats(1, rng))},
      {"empty_rows", "F32", {0, 8}, {}},
      {"empty_too", "BF16", {4, 0}, {}},
      {"tail", "F32", {2}, test::to_bytes(test::random_floats(2, rng))},
  };
  test::TempDir dir;
  test::write_file(dir / "z.safetensors", test::build_safetensors(specs));
  SafetensorsFile file = SafetensorsFile::open(dir / "z.safetensors");
  expect_view_holds(file.tensor("scalar"), specs[0], DType::F32);
  expect_view_holds(file.tensor("empty_rows"), specs[1], DType::F32);
  expect_view_holds(file.tensor("empty_too"), specs[2], DType::BF16);
  expect_view_holds(file.tensor("tail"), specs[3], DType::F32);
  EXPECT_EQ(file.tensor("empty_rows").numel(), 0);

  // No tensors at all, and only empty tensors: an empty data region is fine.
  test::write_file(dir / "none.safetensors", test::file_bytes("{}", {}));
  EXPECT_TRUE(SafetensorsFile::open(dir / "none.safetensors").tensors().empty());
  test::write_file(dir / "only_empty.safetensors", test::build_safetensors({specs[1], specs[2]}));
  EXPECT_EQ(SafetensorsFile::open(dir / "only_empty.safetensors").tensors().size(), 2u);
}

TEST(Safetensors, AcceptsSpacePaddingAndUnpaddedHeaders) {
  std::mt19937 rng(10);
  const std::vector<TensorSpec> specs = {{"x", "U8", {5}, {1, 2, 3, 4, 5}}};
  test::TempDir dir;
  // Lots of trailing spaces after the JSON, then a byte-typed tensor needing no alignment.
  test::write_file(dir / "pad.safetensors", test::file_bytes(test::header_json(specs) + std::string(37, ' '),
                                                             specs[0].bytes, /*pad_to_8=*/false));
  expect_view_holds(SafetensorsFile::open(dir / "pad.safetensors").tensor("x"), specs[0], DType::U8);
}

TEST(Safetensors, MissingTensorNamesTheTensorAndFile) {
  std::mt19937 rng(12);
  test::TempDir dir;
  test::write_file(dir / "one.safetensors",
                   test::build_safetensors({{"a", "F32", {2}, test::to_bytes(test::random_floats(2, rng))}}));
  SafetensorsFile file = SafetensorsFile::open(dir / "one.safetensors");
  EXPECT_EQ(file.find("b"), nullptr);
  const std::string message = test::error_of([&] { file.tensor("b"); });
  EXPECT_THAT(message, HasSubstr("one.safetensors"));
  EXPECT_THAT(message, HasSubstr("'b'"));
}

TEST(Safetensors, ViewsSurviveMovingTheFile) {
  std::mt19937 rng(13);
  const auto values = test::random_floats(6, rng);
  test::TempDir dir;
  test::write_file(dir / "m.safetensors", test::build_safetensors({{"a", "F32", {6}, test::to_bytes(values)}}));
  SafetensorsFile first = SafetensorsFile::open(dir / "m.safetensors");
  const TensorView before = first.tensor("a");
  SafetensorsFile moved = std::move(first);
  std::vector<SafetensorsFile> many;
  many.push_back(std::move(moved));
  many.emplace_back(SafetensorsFile::open(dir / "m.safetensors"));  // reallocation moves element 0 again
  EXPECT_EQ(many[0].tensor("a").data, before.data);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(many[0].tensor("a").at<float>({i}), values[size_t(i)]);
  EXPECT_EQ(many[0].path(), dir / "m.safetensors");
}

}  // namespace
}  // namespace latentserve
