#pragma once
// Helpers shared by the CPU kernel tests: random inputs that are never zero, weights
// stored in each checkpoint dtype, NaN-poisoned outputs and one comparison rule.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/bf16.h"
#include "core/f16.h"
#include "core/tensor_view.h"

namespace latentserve::testing {

// n values ~ N(0, scale²), none exactly zero.
inline std::vector<float> random_floats(std::mt19937& rng, int64_t n, float scale = 1.0f) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) {
    do x = dist(rng);
    while (x == 0.0f);
  }
  return v;
}

inline std::vector<float> poisoned(int64_t n) { return std::vector<float>(size_t(n), std::nanf("")); }

// A random tensor of the given shape stored as `dtype` (F32, BF16, F16 or, to test the
// errors, any other 2-byte-or-smaller dtype filled with raw random bits), with an
// optional padded row stride so that views with a row stride larger than the row work.
struct StoredTensor {
  std::vector<uint8_t> bytes;
  TensorView view;  // points into bytes: move, never copy

  StoredTensor() = default;
  StoredTensor(StoredTensor&&) = default;
  StoredTensor& operator=(StoredTensor&&) = default;
  StoredTensor(const StoredTensor&) = delete;
};

inline StoredTensor random_tensor(std::mt19937& rng, DType dtype, int64_t rows, int64_t cols, int64_t row_stride = 0) {
  if (row_stride == 0) row_stride = cols;
  const size_t elem = dtype_size_bytes(dtype);
  StoredTensor t;
  t.bytes.resize(size_t(rows * row_stride) * elem);
  const std::vector<float> values = random_floats(rng, rows * row_stride);
  for (size_t i = 0; i < values.size(); ++i) {
    uint8_t* dst = t.bytes.data() + i * elem;
    if (dtype == DType::F32) {
      std::memcpy(dst, &values[i], 4);
    } else if (dtype == DType::BF16) {
      const bf16 v = bf16::from_f32(values[i]);
      std::memcpy(dst, &v.bits, 2);
    } else if (dtype == DType::F16) {
      const uint16_t bits = f32_to_f16_bits(values[i]);
      std::memcpy(dst, &bits, 2);
    } else {
      for (size_t b = 0; b < elem; ++b) dst[b] = uint8_t(rng());
    }
  }
  TensorView full = TensorView::contiguous(t.bytes.data(), dtype, {rows, row_stride});
  t.view = full.slice(1, 0, cols);
  return t;
}

inline StoredTensor random_vector_tensor(std::mt19937& rng, DType dtype, int64_t n) {
  StoredTensor t = random_tensor(rng, dtype, 1, n);
  t.view = t.view.reshape({n});
  return t;
}

// Every element finite and |fast - ref| <= tol · max(1, max |ref|).
inline ::testing::AssertionResult all_close(const float* fast, const double* ref, int64_t n, double tol) {
  double max_ref = 1.0;
  for (int64_t i = 0; i < n; ++i) max_ref = std::max(max_ref, std::abs(ref[i]));
  double worst = 0.0;
  int64_t worst_index = -1;
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(fast[i]))
      return ::testing::AssertionFailure() << "element " << i << " is " << fast[i] << " (reference " << ref[i]
                                           << "): unwritten or overflowed";
    const double err = std::abs(double(fast[i]) - ref[i]);
    if (err > worst) worst = err, worst_index = i;
  }
  if (worst > tol * max_ref)
    return ::testing::AssertionFailure() << "element " << worst_index << ": " << fast[worst_index] << " vs reference "
                                         << ref[worst_index] << " (error " << worst << " > " << tol << " x "
                                         << max_ref << ")";
  return ::testing::AssertionSuccess();
}

}  // namespace latentserve::testing
