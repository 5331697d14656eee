#pragma once
// A strided view over borrowed memory (a mmapped safetensors region, a scratch
// buffer). It owns nothing; strides are in elements, not bytes.
#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "core/dtype.h"

namespace latentserve {

constexpr int kMaxTensorRank = 6;

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::F32;
  int rank = 0;
  std::array<int64_t, kMaxTensorRank> shape{};
  std::array<int64_t, kMaxTensorRank> strides{};  // elements

  // A contiguous (row-major) view.
  static TensorView contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape);
  static TensorView contiguous(void* data, DType dtype, const int64_t* shape, int rank);

  int64_t numel() const;
  size_t size_bytes() const { return size_t(numel()) * dtype_size_bytes(dtype); }
  int64_t dim(int i) const { return shape[size_t(i < 0 ? i + rank : i)]; }
  bool is_contiguous() const;
  bool empty() const { return data == nullptr; }

  // Element offset of a multi-index (bounds are asserted, not checked at run time).
  int64_t offset(std::initializer_list<int64_t> index) const;
  template <typename T>
  T* ptr() const { return static_cast<T*>(data); }
  template <typename T>
  T& at(std::initializer_list<int64_t> index) const { return static_cast<T*>(data)[offset(index)]; }

  // View of [begin, end) along dimension `axis` (shares memory).
  TensorView slice(int axis, int64_t begin, int64_t end) const;
  // Same memory with dimensions a and b swapped (negative axes count from the end).
  TensorView transpose(int a, int b) const;
  // Contiguous views only: same elements, new shape (element count must match).
  TensorView reshape(std::initializer_list<int64_t> shape) const;

  std::string shape_string() const;  // "[4096, 11008]"
};

}  // namespace latentserve
