#include "io/mapped_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "io/safetensors_builder.h"

namespace latentserve {
namespace {

using ::testing::HasSubstr;

TEST(MappedFile, MapsTheBytesOfTheFile) {
  test::TempDir dir;
  std::mt19937 rng(1);
  test::Bytes bytes(10000);
  for (auto& b : bytes) b = uint8_t(1 + rng() % 255);
  test::write_file(dir / "blob.bin", bytes);
  MappedFile file = MappedFile::open(dir / "blob.bin");
  ASSERT_EQ(file.size(), bytes.size());
  EXPECT_EQ(test::Bytes(file.data(), file.data() + file.size()), bytes);

  MappedFile moved = std::move(file);  // the mapping moves, the bytes stay where they are
  EXPECT_EQ(file.data(), nullptr);
  EXPECT_EQ(moved.size(), bytes.size());
  EXPECT_EQ(moved.data()[9999], bytes[9999]);
  MappedFile assigned;
  assigned = std::move(moved);
  EXPECT_EQ(assigned.data()[0], bytes[0]);
  EXPECT_EQ(assigned.path(), dir / "blob.bin");
}

TEST(MappedFile, EmptyFileMapsNothing) {
  test::TempDir dir;
  test::write_file(dir / "empty.bin", {});
  MappedFile file = MappedFile::open(dir / "empty.bin");
  EXPECT_EQ(file.size(), 0u);
  EXPECT_EQ(file.data(), nullptr);
}

TEST(MappedFile, ErrorsNameTheFileAndTheReason) {
  test::TempDir dir;
  const std::string missing = test::error_of([&] { MappedFile::open(dir / "absent.bin"); });
  EXPECT_THAT(missing, HasSubstr("absent.bin"));
  EXPECT_THAT(missing, HasSubstr("No such file or directory"));
  const std::string directory = test::error_of([&] { MappedFile::open(dir.path()); });
  EXPECT_THAT(directory, HasSubstr(dir.path().string()));
  EXPECT_THAT(directory, HasSubstr("not a regular file"));
}

}  // namespace
}  // namespace latentserve
