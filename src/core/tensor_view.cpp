#include "core/tensor_view.h"

#include <cassert>

#include "core/error.h"

namespace latentserve {

TensorView TensorView::contiguous(void* data, DType dtype, const int64_t* shape, int rank) {
  if (rank < 0 || rank > kMaxTensorRank) fail("tensor rank {} is outside [0, {}]", rank, kMaxTensorRank);
  TensorView v;
  v.data = data;
  v.dtype = dtype;
  v.rank = rank;
  int64_t stride = 1;
  for (int i = rank - 1; i >= 0; --i) {
    if (shape[i] < 0) fail("tensor dimension {} is negative ({})", i, shape[i]);
    v.shape[size_t(i)] = shape[i];
    v.strides[size_t(i)] = stride;
    stride *= shape[i];
  }
  return v;
}

TensorView TensorView::contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape) {
  return contiguous(data, dtype, shape.begin(), int(shape.size()));
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) n *= shape[size_t(i)];
  return n;
}

bool TensorView::is_contiguous() const {
  int64_t stride = 1;
  for (int i = rank - 1; i >= 0; --i) {
    if (shape[size_t(i)] != 1 && strides[size_t(i)] != stride) return false;
    stride *= shape[size_t(i)];
  }
  return true;
}

int64_t TensorView::offset(std::initializer_list<int64_t> index) const {
  assert(int(index.size()) == rank);
  int64_t off = 0;
  size_t i = 0;
  for (int64_t x : index) {
    assert(x >= 0 && x < shape[i]);
    off += x * strides[i++];
  }
  return off;
}

TensorView TensorView::slice(int axis, int64_t begin, int64_t end) const {
  if (axis < 0) axis += rank;
  assert(axis >= 0 && axis < rank && 0 <= begin && begin <= end && end <= shape[size_t(axis)]);
  TensorView v = *this;
  v.data = static_cast<char*>(data) + begin * strides[size_t(axis)] * int64_t(dtype_size_bytes(dtype));
  v.shape[size_t(axis)] = end - begin;
  return v;
}

TensorView TensorView::transpose(int a, int b) const {
  if (a < 0) a += rank;
  if (b < 0) b += rank;
  assert(a >= 0 && a < rank && b >= 0 && b < rank);
  TensorView v = *this;
  std::swap(v.shape[size_t(a)], v.shape[size_t(b)]);
  std::swap(v.strides[size_t(a)], v.strides[size_t(b)]);
  return v;
}

TensorView TensorView::reshape(std::initializer_list<int64_t> new_shape) const {
  if (!is_contiguous()) fail("reshape of a non-contiguous tensor {}", shape_string());
  TensorView v = contiguous(data, dtype, new_shape);
  if (v.numel() != numel()) fail("reshape {} -> {}: element counts differ", shape_string(), v.shape_string());
  return v;
}

std::string TensorView::shape_string() const {
  std::string s = "[";
  for (int i = 0; i < rank; ++i) s += (i ? ", " : "") + std::to_string(shape[size_t(i)]);
  return s + "]";
}

}  // namespace latentserve
