#pragma once
// The JSON header of a safetensors file, parsed and validated on its own (no file,
// no mapping) so that every rule can be checked and tested in one place.
//
// Header layout, as written by the safetensors library:
//   { "__metadata__": {"format": "pt"},                      optional, string -> string
//     "<tensor name>": {"dtype": "BF16", "shape": [4096, 11008],
//                       "data_offsets": [begin, end]}, ... }  byte offsets in the data region
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"

namespace latentserve {

struct SafetensorsHeaderEntry {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  uint64_t data_begin = 0;  // [data_begin, data_end) within the data region
  uint64_t data_end = 0;
};

struct SafetensorsHeader {
  std::vector<SafetensorsHeaderEntry> tensors;  // sorted by data_begin (file order)
  std::map<std::string, std::string> metadata;
};

// Validates `header` (the bytes after the 8-byte length, trailing space padding
// included) against a data region of `data_size_bytes` bytes. Every violation
// throws Error starting with "<file_label>: " and naming the tensor where one
// applies: not '{' first, invalid UTF-8, invalid JSON, a repeated key, bad
// __metadata__, an entry without exactly dtype/shape/data_offsets, an unknown
// dtype, a bad shape or offset pair, a byte size that disagrees with the shape,
// tensors that overlap, leave gaps, or leave bytes at the end of the data region.
SafetensorsHeader parse_safetensors_header(std::string_view header, uint64_t data_size_bytes,
                                           const std::string& file_label);

}  // namespace latentserve
