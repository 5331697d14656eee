#pragma once
// Element conversion of float tensors to f32 (weights are stored f32/bf16/f16).
#include <cstdint>

#include "core/dtype.h"

namespace latentserve {

// dst[i] = float(src[i]) for i < n; src holds `dtype` elements (F32, BF16, F16, F64).
// Other dtypes: Error naming the dtype.
void convert_to_f32(const void* src, DType dtype, float* dst, int64_t n);

}  // namespace latentserve
