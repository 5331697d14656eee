#include "core/dtype.h"

#include <gtest/gtest.h>

namespace latentserve {
namespace {

TEST(DType, SafetensorsNamesAndSizes) {
  struct Known {
    const char* name;
    size_t size;
    bool is_float;
  };
  // The dtype strings of the safetensors format and their element sizes.
  const Known known[] = {{"F64", 8, true},     {"F32", 4, true},      {"F16", 2, true},     {"BF16", 2, true},
                         {"F8_E4M3", 1, true}, {"F8_E5M2", 1, true},  {"F8_E8M0", 1, true}, {"I64", 8, false},
                         {"I32", 4, false},    {"I16", 2, false},     {"I8", 1, false},     {"U64", 8, false},
                         {"U32", 4, false},    {"U16", 2, false},     {"U8", 1, false},     {"BOOL", 1, false}};
  for (const auto& k : known) {
    auto d = parse_dtype(k.name);
    ASSERT_TRUE(d.has_value()) << k.name;
    EXPECT_EQ(dtype_name(*d), k.name);
    EXPECT_EQ(dtype_size_bytes(*d), k.size) << k.name;
    EXPECT_EQ(is_float(*d), k.is_float) << k.name;
  }
  EXPECT_FALSE(parse_dtype("f32").has_value());
  EXPECT_FALSE(parse_dtype("F4").has_value());
  EXPECT_FALSE(parse_dtype("").has_value());
}

}  // namespace
}  // namespace latentserve
