#pragma once
// Element types as they appear in safetensors files and in the KV cache.
// The enumerators are spelled like the safetensors dtype strings; new ones are
// appended so that existing values keep their numbers.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace latentserve {

enum class DType : uint8_t {
  F64, F32, F16, BF16, F8_E4M3, F8_E5M2, I64, I32, I16, I8, U8, BOOL,
  U16, U32, U64,
  F8_E8M0,  // OCP MX scale: 8 exponent bits, no sign or mantissa (value 2^(e-127), 0xFF NaN)
};

size_t dtype_size_bytes(DType dtype);
std::string_view dtype_name(DType dtype);  // safetensors spelling: "F32", "BF16", ...
std::optional<DType> parse_dtype(std::string_view safetensors_name);
bool is_float(DType dtype);

}  // namespace latentserve
