#pragma once
// SafetensorsFile: one .safetensors file, mapped read-only and validated once at
// open. Tensors are zero-copy TensorViews (contiguous, row-major) into the mapping.
//
// File layout: [8-byte little-endian header length N][N bytes of JSON header,
// possibly padded with spaces][data region]. See io/safetensors_header.h for the
// header rules; on top of those, open() checks the framing and that each tensor's
// bytes are aligned to its element size (the safetensors writer guarantees this by
// padding the header to 8 bytes and storing wider dtypes first), so kernels may
// read them as typed arrays.
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/tensor_view.h"
#include "io/mapped_file.h"
#include "io/safetensors_header.h"

namespace latentserve {

struct SafetensorsTensor {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  uint64_t data_begin = 0;  // byte offsets within the data region, as in the header
  uint64_t data_end = 0;
  TensorView view;  // over read-only memory: never write through it
};

class SafetensorsFile {
 public:
  // The header is limited to 100,000,000 bytes, like the reference implementation.
  static constexpr uint64_t kMaxHeaderBytes = 100'000'000;

  // Maps and validates the file; throws Error naming the file (and the tensor where
  // one applies) for anything malformed.
  static SafetensorsFile open(const std::filesystem::path& path);

  const std::filesystem::path& path() const { return file_.path(); }
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }  // in data-offset order
  const SafetensorsTensor* find(std::string_view name) const;                // nullptr when absent
  TensorView tensor(std::string_view name) const;  // throws Error naming the file and tensor when absent
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  MappedFile file_;
  std::vector<SafetensorsTensor> tensors_;
  std::unordered_map<std::string, size_t> index_of_;  // name -> position in tensors_
  std::map<std::string, std::string> metadata_;
};

}  // namespace latentserve
