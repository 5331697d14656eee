#include "io/safetensors_header.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <limits>
#include <optional>
#include <set>

#include "core/error.h"
#include "core/tensor_view.h"
#include "io/utf8.h"

namespace latentserve {

namespace {

using nlohmann::json;

constexpr std::string_view kMetadataKey = "__metadata__";

// nlohmann keeps the last of two equal keys without a word; a parse callback sees
// every key and lets us reject the repeat (two entries for one tensor name would
// otherwise silently drop one of them).
struct DuplicateKey {
  std::string key;
  std::string top_level_key;  // the tensor entry it sits in (the key itself at level 1)
  size_t level = 0;           // 1: top level
};

json parse_json_rejecting_duplicates(std::string_view text, const std::string& file) {
  std::vector<std::set<std::string>> open_objects;
  std::string current_top_level_key;
  std::optional<DuplicateKey> duplicate;
  json::parser_callback_t callback = [&](int, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) {
      open_objects.emplace_back();
    } else if (event == json::parse_event_t::object_end) {
      open_objects.pop_back();
    } else if (event == json::parse_event_t::key) {
      std::string key = parsed.get<std::string>();
      if (open_objects.size() == 1) current_top_level_key = key;
      if (!open_objects.back().insert(key).second && !duplicate)
        duplicate = DuplicateKey{key, current_top_level_key, open_objects.size()};
    }
    return true;
  };
  json root;
  try {
    root = json::parse(text.begin(), text.end(), callback);
  } catch (const json::parse_error& e) {
    fail("{}: header is not valid JSON: {}", file, e.what());
  }
  if (duplicate) {
    if (duplicate->level == 1 && duplicate->key == kMetadataKey) fail("{}: header has {} twice", file, kMetadataKey);
    if (duplicate->level == 1) fail("{}: header names tensor '{}' twice", file, duplicate->key);
    fail("{}: header entry '{}' has key '{}' twice", file, duplicate->top_level_key, duplicate->key);
  }
  return root;
}

std::map<std::string, std::string> parse_metadata(const json& value, const std::string& file) {
  if (!value.is_object()) fail("{}: __metadata__ must be an object of strings, found {}", file, value.type_name());
  std::map<std::string, std::string> metadata;
  for (const auto& [key, v] : value.items()) {
    if (!v.is_string())
      fail("{}: __metadata__ value of '{}' must be a string, found {} ({})", file, key, v.type_name(), v.dump());
    metadata.emplace(key, v.get<std::string>());
  }
  return metadata;
}

// A JSON number that is a non-negative integer (nlohmann stores those as unsigned).
std::optional<uint64_t> as_unsigned(const json& v) {
  if (!v.is_number_unsigned()) return std::nullopt;
  return v.get<uint64_t>();
}

SafetensorsHeaderEntry parse_entry(const std::string& name, const json& value, uint64_t data_size,
                                   const std::string& file) {
  if (!value.is_object())
    fail("{}: tensor '{}': entry must be an object with dtype, shape and data_offsets, found {}", file, name,
         value.type_name());
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!value.contains(key)) fail("{}: tensor '{}': entry has no \"{}\"", file, name, key);
  for (const auto& [key, v] : value.items())
    if (key != "dtype" && key != "shape" && key != "data_offsets")
      fail("{}: tensor '{}': unexpected key \"{}\" (expected only dtype, shape, data_offsets)", file, name, key);

  SafetensorsHeaderEntry entry;
  entry.name = name;

  const json& dtype = value["dtype"];
  if (!dtype.is_string()) fail("{}: tensor '{}': dtype must be a string, found {}", file, name, dtype.dump());
  auto parsed_dtype = parse_dtype(dtype.get<std::string>());
  if (!parsed_dtype) fail("{}: tensor '{}': unknown dtype \"{}\"", file, name, dtype.get<std::string>());
  entry.dtype = *parsed_dtype;

  const json& shape = value["shape"];
  if (!shape.is_array()) fail("{}: tensor '{}': shape must be a list of integers, found {}", file, name, shape.dump());
  if (shape.size() > size_t(kMaxTensorRank))
    fail("{}: tensor '{}': shape {} has rank {}, more than the {} dimensions supported", file, name, shape.dump(),
         shape.size(), kMaxTensorRank);
  for (const json& dim : shape) {
    auto d = as_unsigned(dim);
    if (!d || *d > uint64_t(std::numeric_limits<int64_t>::max()))
      fail("{}: tensor '{}': shape {} holds {}, expected non-negative integers", file, name, shape.dump(), dim.dump());
    entry.shape.push_back(int64_t(*d));
  }

  const json& offsets = value["data_offsets"];
  std::optional<uint64_t> begin, end;
  if (offsets.is_array() && offsets.size() == 2) {
    begin = as_unsigned(offsets[0]);
    end = as_unsigned(offsets[1]);
  }
  if (!begin || !end)
    fail("{}: tensor '{}': data_offsets must be [begin, end] of non-negative integers, found {}", file, name,
         offsets.dump());
  if (*begin > *end) fail("{}: tensor '{}': data_offsets [{}, {}] end before they begin", file, name, *begin, *end);
  if (*end > data_size)
    fail("{}: tensor '{}': data_offsets [{}, {}] run past the end of the {}-byte data region", file, name, *begin,
         *end, data_size);
  entry.data_begin = *begin;
  entry.data_end = *end;

  // Byte size from the shape, without overflow. The product of the non-zero dimensions
  // must fit too (even when a zero makes the tensor empty): TensorView's int64 strides
  // are built from it.
  uint64_t span_bytes = dtype_size_bytes(entry.dtype);
  bool has_zero_dim = false;
  for (int64_t d : entry.shape) {
    if (d == 0) {
      has_zero_dim = true;
    } else if (__builtin_mul_overflow(span_bytes, uint64_t(d), &span_bytes) ||
               span_bytes > uint64_t(std::numeric_limits<int64_t>::max())) {
      fail("{}: tensor '{}': shape {} of {} overflows a signed 64-bit byte count", file, name, shape.dump(),
           dtype_name(entry.dtype));
    }
  }
  const uint64_t size_bytes = has_zero_dim ? 0 : span_bytes;
  if (size_bytes != *end - *begin)
    fail("{}: tensor '{}': shape {} of {} needs {} bytes, but data_offsets [{}, {}] span {} bytes", file, name,
         shape.dump(), dtype_name(entry.dtype), size_bytes, *begin, *end, *end - *begin);
  return entry;
}

// The tensors, in offset order, must tile the data region exactly: the first starts
// at 0, each starts where the previous ends, the last ends at the region's end.
void check_layout(const std::vector<SafetensorsHeaderEntry>& sorted, uint64_t data_size, const std::string& file) {
  uint64_t covered = 0;
  const SafetensorsHeaderEntry* previous = nullptr;
  for (const auto& t : sorted) {
    if (t.data_begin < covered)
      fail("{}: tensor '{}' (bytes [{}, {})) overlaps tensor '{}' (bytes [{}, {}))", file, t.name, t.data_begin,
           t.data_end, previous->name, previous->data_begin, previous->data_end);
    if (t.data_begin > covered)
      fail("{}: bytes [{}, {}) of the data region belong to no tensor (gap before tensor '{}')", file, covered,
           t.data_begin, t.name);
    covered = t.data_end;
    previous = &t;
  }
  if (covered != data_size)
    fail("{}: the tensors cover {} bytes of the {}-byte data region: {} trailing bytes belong to no tensor", file,
         covered, data_size, data_size - covered);
}

}  // namespace

SafetensorsHeader parse_safetensors_header(std::string_view header, uint64_t data_size_bytes,
                                           const std::string& file) {
  if (header.empty() || header.front() != '{')
    fail("{}: header must begin with '{{', found {}", file,
         header.empty() ? std::string("nothing") : fmt::format("byte 0x{:02x}", uint8_t(header.front())));
  if (auto bad = find_invalid_utf8(header))
    fail("{}: header is not valid UTF-8 (byte 0x{:02x} at header offset {})", file, uint8_t(header[*bad]), *bad);
  const json root = parse_json_rejecting_duplicates(header, file);
  if (!root.is_object()) fail("{}: header must be a JSON object, found {}", file, root.type_name());

  SafetensorsHeader parsed;
  for (const auto& [key, value] : root.items()) {
    if (key == kMetadataKey) {
      parsed.metadata = parse_metadata(value, file);
    } else {
      parsed.tensors.push_back(parse_entry(key, value, data_size_bytes, file));
    }
  }
  std::sort(parsed.tensors.begin(), parsed.tensors.end(), [](const auto& a, const auto& b) {
    if (a.data_begin != b.data_begin) return a.data_begin < b.data_begin;
    if (a.data_end != b.data_end) return a.data_end < b.data_end;
    return a.name < b.name;  // several empty tensors may share one offset
  });
  check_layout(parsed.tensors, data_size_bytes, file);
  return parsed;
}

}  // namespace latentserve
