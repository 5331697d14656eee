// One test per way a safetensors file can be malformed: each must fail with an Error
// that names the file, says what is wrong, and names the tensor where one applies.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <initializer_list>

#include "io/safetensors.h"
#include "io/safetensors_builder.h"

namespace latentserve {
namespace {

using test::Bytes;
using test::error_of;
using test::file_bytes;
using ::testing::HasSubstr;

constexpr const char* kFile = "bad.safetensors";

class SafetensorsMalformed : public ::testing::Test {
 protected:
  std::string open_error(const Bytes& bytes) {
    test::write_file(dir_ / kFile, bytes);
    return error_of([&] { SafetensorsFile::open(dir_ / kFile); });
  }
  // A header and data region (24 random bytes by default: one [2, 3] F32 tensor).
  std::string header_error(const std::string& header, const Bytes& data) { return open_error(file_bytes(header, data)); }
  std::string header_error(const std::string& header) { return header_error(header, data24_); }
  // A header holding one tensor 'w' with the given entry JSON.
  std::string entry_error(const std::string& entry_json) { return header_error("{\"w\":" + entry_json + "}"); }

  static void expect_mentions(const std::string& message, std::initializer_list<const char*> parts) {
    EXPECT_THAT(message, HasSubstr(kFile));
    for (const char* p : parts) EXPECT_THAT(message, HasSubstr(p));
  }

  test::TempDir dir_;
  std::mt19937 rng_{42};
  Bytes data24_ = test::to_bytes(test::random_floats(6, rng_));
};

// ---- framing: the 8-byte length and where the header ends ----

TEST_F(SafetensorsMalformed, FileShorterThanTheLengthPrefix) {
  expect_mentions(open_error({0x10, 0x00, 0x00, 0x00, 0x00}), {"5 bytes", "shorter than the 8-byte header length"});
  expect_mentions(open_error({}), {"0 bytes", "shorter than the 8-byte header length"});
}

TEST_F(SafetensorsMalformed, HeaderLengthZero) {
  expect_mentions(open_error(Bytes(16, 0)), {"header length is 0"});
}

TEST_F(SafetensorsMalformed, HeaderLengthOverTheCap) {
  Bytes bytes(8 + 32, ' ');
  const uint64_t n = 100'000'001;
  for (int i = 0; i < 8; ++i) bytes[size_t(i)] = uint8_t(n >> (8 * i));
  expect_mentions(open_error(bytes), {"header length 100000001 bytes exceeds the limit of 100000000"});
}

TEST_F(SafetensorsMalformed, HeaderLengthPastTheEndOfTheFile) {
  Bytes bytes = file_bytes("{}", {});
  bytes[0] = 200;  // claims 200 bytes of header in a 16-byte file
  expect_mentions(open_error(bytes), {"header length 200 bytes runs past the end of the file (16 bytes"});
  Bytes huge = file_bytes("{}", {});
  for (int i = 0; i < 8; ++i) huge[size_t(i)] = 0xff;  // 2^64 - 1: over the cap before anything else
  expect_mentions(open_error(huge), {"exceeds the limit"});
}

// ---- the header text ----

TEST_F(SafetensorsMalformed, HeaderNotStartingWithBrace) {
  expect_mentions(header_error(" {}", {}), {"header must begin with '{'", "0x20"});
  expect_mentions(header_error("[1, 2]", {}), {"header must begin with '{'", "0x5b"});
}

TEST_F(SafetensorsMalformed, HeaderNotUtf8) {
  // "w\xff" as a tensor name: 0xff never appears in UTF-8.
  const std::string header = "{\"w\xff\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}}";
  expect_mentions(header_error(header), {"not valid UTF-8", "0xff", "header offset 3"});
  // An overlong encoding of '/' (0xc0 0xaf) and a UTF-16 surrogate (0xed 0xa0 0x80).
  expect_mentions(header_error("{\"__metadata__\":{\"a\":\"\xc0\xaf\"}}", {}), {"not valid UTF-8", "0xc0"});
  expect_mentions(header_error("{\"__metadata__\":{\"a\":\"\xed\xa0\x80\"}}", {}), {"not valid UTF-8", "0xed"});
}

TEST_F(SafetensorsMalformed, HeaderNotJson) {
  expect_mentions(header_error("{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],"), {"header is not valid JSON"});
  expect_mentions(header_error("{\"w\" 1}"), {"header is not valid JSON"});
  expect_mentions(header_error("{} x"), {"header is not valid JSON"});  // only spaces may follow
}

TEST_F(SafetensorsMalformed, TensorNamedTwice) {
  const std::string entry = "{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,12]}";
  expect_mentions(header_error("{\"w\":" + entry + ",\"w\":" + entry + "}"), {"names tensor 'w' twice"});
}

TEST_F(SafetensorsMalformed, KeyRepeatedInsideAnEntry) {
  expect_mentions(entry_error(R"({"dtype":"F32","dtype":"F32","shape":[2,3],"data_offsets":[0,24]})"),
                  {"'w'", "key 'dtype' twice"});
}

// ---- __metadata__ ----

TEST_F(SafetensorsMalformed, MetadataNotAnObject) {
  expect_mentions(header_error("{\"__metadata__\":[\"pt\"]}", {}), {"__metadata__ must be an object of strings"});
}

TEST_F(SafetensorsMalformed, MetadataValueNotAString) {
  expect_mentions(header_error("{\"__metadata__\":{\"format\":\"pt\",\"step\":3}}", {}),
                  {"__metadata__ value of 'step' must be a string", "number"});
}

// ---- one tensor entry ----

TEST_F(SafetensorsMalformed, EntryNotAnObject) {
  expect_mentions(entry_error("[0, 24]"), {"tensor 'w'", "entry must be an object"});
}

TEST_F(SafetensorsMalformed, EntryMissingAKey) {
  expect_mentions(entry_error(R"({"shape":[2,3],"data_offsets":[0,24]})"), {"tensor 'w'", "no \"dtype\""});
  expect_mentions(entry_error(R"({"dtype":"F32","data_offsets":[0,24]})"), {"tensor 'w'", "no \"shape\""});
  expect_mentions(entry_error(R"({"dtype":"F32","shape":[2,3]})"), {"tensor 'w'", "no \"data_offsets\""});
}

TEST_F(SafetensorsMalformed, EntryWithAnExtraKey) {
  expect_mentions(entry_error(R"({"dtype":"F32","shape":[2,3],"data_offsets":[0,24],"scale":1})"),
                  {"tensor 'w'", "unexpected key \"scale\""});
}

TEST_F(SafetensorsMalformed, UnknownOrMistypedDtype) {
  expect_mentions(entry_error(R"({"dtype":"F7","shape":[2,3],"data_offsets":[0,24]})"),
                  {"tensor 'w'", "unknown dtype \"F7\""});
  expect_mentions(entry_error(R"({"dtype":"f32","shape":[2,3],"data_offsets":[0,24]})"),
                  {"tensor 'w'", "unknown dtype \"f32\""});
  expect_mentions(entry_error(R"({"dtype":4,"shape":[2,3],"data_offsets":[0,24]})"),
                  {"tensor 'w'", "dtype must be a string"});
}

TEST_F(SafetensorsMalformed, ShapeNotAListOfNonNegativeIntegers) {
  expect_mentions(entry_error(R"({"dtype":"F32","shape":6,"data_offsets":[0,24]})"),
                  {"tensor 'w'", "shape must be a list of integers"});
  expect_mentions(entry_error(R"({"dtype":"F32","shape":[2,-3],"data_offsets":[0,24]})"),
                  {"tensor 'w'", "holds -3", "expected non-negative integers"});
  expect_mentions(entry_error(R"({"dtype":"F32","shape":[2,3.0],"data_offsets":[0,24]})"),
                  {"tensor 'w'", "holds 3.0"});
  expect_mentions(entry_error(R"({"dtype":"F32","shape":[2,"3"],"data_offsets":[0,24]})"),
                  {"tensor 'w'", "holds \"3\""});
  expect_mentions(entry_error(R"({"dtype":"F32","shape":[1,1,1,1,1,2,3],"data_offsets":[0,24]})"),
                  {"tensor 'w'", "rank 7"});
}

TEST_F(SafetensorsMalformed, DataOffsetsNotAPairOfNonNegativeIntegers) {
  for (const char* offsets : {"[0]", "[0,24,24]", "[-8,24]", "[0,\"24\"]", "24", "[0,24.5]"}) {
    expect_mentions(entry_error(std::string(R"({"dtype":"F32","shape":[2,3],"data_offsets":)") + offsets + "}"),
                    {"tensor 'w'", "data_offsets must be [begin, end] of non-negative integers"});
  }
}

TEST_F(SafetensorsMalformed, DataOffsetsReversed) {
  expect_mentions(entry_error(R"({"dtype":"F32","shape":[0],"data_offsets":[24,0]})"),
                  {"tensor 'w'", "data_offsets [24, 0] end before they begin"});
}

TEST_F(SafetensorsMalformed, DataOffsetsPastTheDataRegion) {
  expect_mentions(entry_error(R"({"dtype":"F32","shape":[2,4],"data_offsets":[0,32]})"),
                  {"tensor 'w'", "[0, 32] run past the end of the 24-byte data region"});
}

TEST_F(SafetensorsMalformed, ByteSizeDisagreesWithShape) {
  expect_mentions(entry_error(R"({"dtype":"F32","shape":[2,2],"data_offsets":[0,24]})"),
                  {"tensor 'w'", "shape [2,2] of F32 needs 16 bytes", "span 24 bytes"});
  expect_mentions(entry_error(R"({"dtype":"BF16","shape":[2,3],"data_offsets":[0,24]})"),
                  {"tensor 'w'", "needs 12 bytes"});
}

TEST_F(SafetensorsMalformed, ByteSizeOverflows) {
  // 2^32 * 2^32 * 4 bytes does not fit in 64 bits.
  expect_mentions(entry_error(R"({"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]})"),
                  {"tensor 'w'", "overflows a signed 64-bit byte count"});
  // Empty because of the 0, but its strides would still overflow.
  expect_mentions(entry_error(R"({"dtype":"F32","shape":[0,4294967296,4294967296],"data_offsets":[0,0]})"),
                  {"tensor 'w'", "overflows a signed 64-bit byte count"});
  // 2^61 elements * 4 bytes = 2^63: fits in uint64, not in int64 (TensorView strides).
  expect_mentions(entry_error(R"({"dtype":"F32","shape":[2305843009213693952],"data_offsets":[0,0]})"),
                  {"tensor 'w'", "overflows a signed 64-bit byte count"});
}

// ---- how the tensors tile the data region ----

TEST_F(SafetensorsMalformed, TensorsOverlap) {
  const std::string header =
      R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})";
  expect_mentions(header_error(header), {"tensor 'b' (bytes [8, 24)) overlaps tensor 'a' (bytes [0, 16))"});
}

TEST_F(SafetensorsMalformed, GapBetweenTensors) {
  const std::string header =
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[16,24]}})";
  expect_mentions(header_error(header), {"bytes [8, 16) of the data region belong to no tensor", "tensor 'b'"});
}

TEST_F(SafetensorsMalformed, FirstTensorNotAtOffsetZero) {
  expect_mentions(entry_error(R"({"dtype":"F32","shape":[4],"data_offsets":[8,24]})"),
                  {"bytes [0, 8) of the data region belong to no tensor", "tensor 'w'"});
}

TEST_F(SafetensorsMalformed, TrailingBytesAfterTheLastTensor) {
  expect_mentions(entry_error(R"({"dtype":"F32","shape":[4],"data_offsets":[0,16]})"),
                  {"cover 16 bytes of the 24-byte data region", "8 trailing bytes"});
  expect_mentions(header_error("{}"), {"cover 0 bytes of the 24-byte data region"});
}

TEST_F(SafetensorsMalformed, MisalignedTensorData) {
  // Pad the header so that the data region starts 2 bytes past a multiple of 4.
  std::string header = R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}})";
  while ((8 + header.size()) % 4 != 2) header += ' ';
  test::write_file(dir_ / kFile, file_bytes(header, data24_, /*pad_to_8=*/false));
  const std::string message = error_of([&] { SafetensorsFile::open(dir_ / kFile); });
  expect_mentions(message, {"tensor 'w'", "not a multiple of its 4-byte element size"});
}

TEST_F(SafetensorsMalformed, MissingFileAndDirectory) {
  const std::string missing = error_of([&] { SafetensorsFile::open(dir_ / "nope.safetensors"); });
  EXPECT_THAT(missing, HasSubstr("nope.safetensors"));
  EXPECT_THAT(missing, HasSubstr("No such file or directory"));
  EXPECT_THAT(error_of([&] { SafetensorsFile::open(dir_.path()); }), HasSubstr("is not a regular file"));
}

// Random damage to a good file (flipped header bytes, truncation, a changed length):
// every variant either opens with all views inside the file, or throws Error.
// Nothing else (no crash, no other exception; ASan/UBSan watch the parsing).
TEST_F(SafetensorsMalformed, RandomDamageNeverEscapesAsAnythingButError) {
  const std::vector<test::TensorSpec> specs = {
      {"a", "F32", {2, 3}, test::to_bytes(test::random_floats(6, rng_))},
      {"b", "BF16", {4}, test::to_bytes(test::random_finite_16bit(4, rng_, 7, 8))},
      {"c", "U8", {0}, {}}};
  const Bytes good = test::build_safetensors(specs, R"({"format":"pt"})");
  const uint64_t header_size = good[0] | (uint64_t(good[1]) << 8);
  int opened = 0, rejected = 0;
  for (int round = 0; round < 600; ++round) {
    Bytes bytes = good;
    const int kind = round % 3;
    if (kind == 0) {  // flip a few bytes inside the header
      for (int k = 0; k < 1 + round % 3; ++k) bytes[8 + rng_() % header_size] ^= uint8_t(1 + rng_() % 255);
    } else if (kind == 1) {  // cut the file short
      bytes.resize(rng_() % bytes.size());
    } else {  // change the header length
      bytes[0] = uint8_t(rng_());
    }
    test::write_file(dir_ / kFile, bytes);
    try {
      SafetensorsFile file = SafetensorsFile::open(dir_ / kFile);
      for (const auto& t : file.tensors()) ASSERT_LE(t.data_end, bytes.size());
      ++opened;
    } catch (const Error&) {
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 200);
  EXPECT_GT(opened, 0);  // some flips land in names or padding and leave a valid file
}

}  // namespace
}  // namespace latentserve
