#include "backend/reference/linear_reference.h"

#include "core/bf16.h"
#include "core/error.h"
#include "core/f16.h"

namespace latentserve::reference {

double weight_element(const TensorView& weight, int64_t index) {
  int64_t offset = 0;
  for (int d = weight.rank - 1; d >= 0; --d) {
    offset += (index % weight.dim(d)) * weight.strides[size_t(d)];
    index /= weight.dim(d);
  }
  switch (weight.dtype) {
    case DType::F32: return double(weight.ptr<const float>()[offset]);
    case DType::BF16: return double(weight.ptr<const bf16>()[offset].to_f32());
    case DType::F16: return double(weight.ptr<const f16>()[offset]);
    default:
      fail("reference: weight dtype {} is not supported (weight shape {})", dtype_name(weight.dtype),
           weight.shape_string());
  }
}

void linear_reference(const float* x, int64_t n_tokens, const TensorView& weight, const float* bias, double* y) {
  const int64_t out = weight.dim(0), in = weight.dim(1);
  for (int64_t t = 0; t < n_tokens; ++t)
    for (int64_t o = 0; o < out; ++o) {
      double sum = bias ? double(bias[o]) : 0.0;
      for (int64_t i = 0; i < in; ++i) sum += double(x[t * in + i]) * weight_element(weight, o * in + i);
      y[t * out + o] = sum;
    }
}

}  // namespace latentserve::reference
