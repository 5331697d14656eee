#pragma once
// Test helpers: safetensors bytes built by hand (header JSON as text + data), random
// non-zero payloads, a per-test temporary folder, and "the message of the Error
// this throws". Written from the format's description, independent of src/io.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"

namespace latentserve::test {

namespace fs = std::filesystem;
using Bytes = std::vector<uint8_t>;

struct TensorSpec {
  std::string name;
  std::string dtype;  // safetensors spelling, written as is
  std::vector<int64_t> shape;
  Bytes bytes;
};

inline std::string shape_json(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

// {"__metadata__":{...},"name":{"dtype":..,"shape":[..],"data_offsets":[b,e]},...}
// with the tensors' data laid out back to back in the order given.
inline std::string header_json(const std::vector<TensorSpec>& tensors, const std::string& metadata_json = "") {
  std::string h = "{";
  if (!metadata_json.empty()) h += "\"__metadata__\":" + metadata_json;
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    if (h.size() > 1) h += ",";
    h += "\"" + t.name + "\":{\"dtype\":\"" + t.dtype + "\",\"shape\":" + shape_json(t.shape) +
         ",\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(offset + t.bytes.size()) + "]}";
    offset += t.bytes.size();
  }
  return h + "}";
}

inline Bytes concat_data(const std::vector<TensorSpec>& tensors) {
  Bytes data;
  for (const auto& t : tensors) data.insert(data.end(), t.bytes.begin(), t.bytes.end());
  return data;
}

// [8-byte little-endian N][header, space padded to a multiple of 8 when asked][data]
inline Bytes file_bytes(std::string header, const Bytes& data, bool pad_to_8 = true) {
  if (pad_to_8)
    while ((8 + header.size()) % 8 != 0) header += ' ';
  Bytes out(8);
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[size_t(i)] = uint8_t(n >> (8 * i));
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

inline Bytes build_safetensors(const std::vector<TensorSpec>& tensors, const std::string& metadata_json = "") {
  return file_bytes(header_json(tensors, metadata_json), concat_data(tensors));
}

inline void write_file(const fs::path& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  ASSERT_TRUE(out.good()) << "cannot write " << path;
}

template <typename T>
Bytes to_bytes(const std::vector<T>& values) {
  Bytes b(values.size() * sizeof(T));
  if (!b.empty()) std::memcpy(b.data(), values.data(), b.size());
  return b;
}

// Random floats with magnitude in [0.5, 2) and random sign: never zero.
inline std::vector<float> random_floats(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> magnitude(0.5f, 2.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = magnitude(rng) * ((rng() & 1) ? -1.0f : 1.0f);
  return v;
}

// Random 16-bit patterns that are finite, non-zero numbers in a format whose exponent
// field sits in bits [man_bits, 15) with exp_bits bits (bf16: 7/8, f16: 10/5).
inline std::vector<uint16_t> random_finite_16bit(size_t n, std::mt19937& rng, int man_bits, int exp_bits) {
  std::vector<uint16_t> v;
  while (v.size() < n) {
    const uint16_t b = uint16_t(rng());
    const uint32_t e = (b >> man_bits) & ((1u << exp_bits) - 1u);
    if (e == 0 || e == (1u << exp_bits) - 1u) continue;  // skip zero/subnormal and inf/NaN
    v.push_back(b);
  }
  return v;
}

// A fresh, empty folder for one test, removed with everything in it afterwards.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = std::string("latentserve_") + (info ? info->test_suite_name() : "test") + "_" +
                       (info ? info->name() : "x") + "_" + std::to_string(::getpid()) + "_" +
                       std::to_string(std::random_device{}());
    path_ = fs::temp_directory_path() / name;
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const fs::path& path() const { return path_; }
  fs::path operator/(const std::string& name) const { return path_ / name; }

 private:
  fs::path path_;
};

// The what() of the latentserve::Error that fn throws; a test failure if none.
template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a latentserve::Error, none was thrown";
  return "";
}

}  // namespace latentserve::test
