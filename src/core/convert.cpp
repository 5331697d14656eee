#include "core/convert.h"

#include <cstring>

#include "core/bf16.h"
#include "core/error.h"
#include "core/f16.h"

namespace latentserve {

void convert_to_f32(const void* src, DType dtype, float* dst, int64_t n) {
  switch (dtype) {
    case DType::F32:
      std::memcpy(dst, src, size_t(n) * sizeof(float));
      return;
    case DType::BF16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16::from_bits(s[i]).to_f32();
      return;
    }
    case DType::F16: {
      const auto* s = static_cast<const _Float16*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = float(s[i]);
      return;
    }
    case DType::F64: {
      const auto* s = static_cast<const double*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = float(s[i]);
      return;
    }
    default:
      fail("cannot convert {} elements to f32 (expected F32, BF16, F16 or F64)", dtype_name(dtype));
  }
}

}  // namespace latentserve
