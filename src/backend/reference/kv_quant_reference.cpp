#include "backend/reference/kv_quant_reference.h"

#include <cmath>
#include <cstring>

#include "core/fp8.h"

namespace latentserve::reference {

namespace {

double bf16_at(const unsigned char* p) {
  uint16_t b;
  std::memcpy(&b, p, 2);
  const uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

double element_scale(const cpu::KvRows& rows, int64_t slot, int64_t element) {
  const int64_t block = slot / rows.block_size_tokens, group = element / rows.scale_group_elements;
  return rows.scales[block * rows.scale_block_stride + group * rows.scale_group_stride];
}

}  // namespace

double kv_element(const cpu::KvRows& rows, int64_t slot, int64_t element) {
  const unsigned char* row = static_cast<const unsigned char*>(rows.data) + slot * rows.row_bytes;
  switch (rows.dtype) {
    case DType::F32: {
      float f;
      std::memcpy(&f, row + 4 * element, 4);
      return f;
    }
    case DType::BF16: return bf16_at(row + 2 * element);
    case DType::F8_E4M3:
      if (element < rows.fp8_elements)
        return double(fp8_e4m3_to_f32(row[element])) * element_scale(rows, slot, element);
      return bf16_at(row + rows.fp8_elements + 2 * (element - rows.fp8_elements));
    default: return std::nan("");
  }
}

std::vector<float> kv_gather(const cpu::KvRows& rows, const std::vector<int64_t>& slots, int64_t begin, int64_t n) {
  std::vector<float> out;
  out.reserve(slots.size() * size_t(n));
  for (int64_t slot : slots)
    for (int64_t e = begin; e < begin + n; ++e) out.push_back(float(kv_element(rows, slot, e)));
  return out;
}

double kv_store_error_bound(const cpu::KvRows& rows, int64_t slot, int64_t element, double x) {
  const double ax = std::fabs(x);
  switch (rows.dtype) {
    case DType::F32: return 0.0;
    case DType::BF16: return kBf16UnitRoundoff * ax;
    case DType::F8_E4M3: {
      if (element >= rows.fp8_elements) return kBf16UnitRoundoff * ax;
      const double s = element_scale(rows, slot, element);
      if (ax > double(kFp8E4M3Max) * s) return ax - double(kFp8E4M3Max) * s;
      return kE4M3UnitRoundoff * ax + 0x1p-9 * s;
    }
    default: return 0.0;
  }
}

}  // namespace latentserve::reference
