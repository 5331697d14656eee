#include "core/dtype.h"

#include <array>
#include <cassert>
#include <utility>

namespace latentserve {

namespace {
struct DTypeInfo {
  DType dtype;
  std::string_view name;
  size_t size_bytes;
  bool is_float;
};
// Indexed by the enumerator's value: the order here must follow the enum.
constexpr std::array<DTypeInfo, 16> kDTypes = {{
    {DType::F64, "F64", 8, true},         {DType::F32, "F32", 4, true},
    {DType::F16, "F16", 2, true},         {DType::BF16, "BF16", 2, true},
    {DType::F8_E4M3, "F8_E4M3", 1, true}, {DType::F8_E5M2, "F8_E5M2", 1, true},
    {DType::I64, "I64", 8, false},        {DType::I32, "I32", 4, false},
    {DType::I16, "I16", 2, false},        {DType::I8, "I8", 1, false},
    {DType::U8, "U8", 1, false},          {DType::BOOL, "BOOL", 1, false},
    {DType::U16, "U16", 2, false},        {DType::U32, "U32", 4, false},
    {DType::U64, "U64", 8, false},        {DType::F8_E8M0, "F8_E8M0", 1, true},
}};

constexpr bool table_follows_enum() {
  for (size_t i = 0; i < kDTypes.size(); ++i)
    if (static_cast<size_t>(kDTypes[i].dtype) != i) return false;
  return true;
}
static_assert(table_follows_enum(), "kDTypes must list the DType enumerators in order");

const DTypeInfo& info(DType dtype) {
  assert(static_cast<size_t>(dtype) < kDTypes.size());
  return kDTypes[static_cast<size_t>(dtype)];
}
}  // namespace

size_t dtype_size_bytes(DType dtype) { return info(dtype).size_bytes; }
std::string_view dtype_name(DType dtype) { return info(dtype).name; }
bool is_float(DType dtype) { return info(dtype).is_float; }

std::optional<DType> parse_dtype(std::string_view name) {
  for (const auto& d : kDTypes)
    if (d.name == name) return d.dtype;
  return std::nullopt;
}

}  // namespace latentserve
