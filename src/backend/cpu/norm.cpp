// RMSNorm in f32, in the order transformers' LlamaRMSNorm computes it:
//   inv = 1 / sqrt(mean(x²) + eps);  out = weight * (x * inv)
#include "backend/cpu/norm.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/bf16.h"
#include "core/error.h"
#include "core/f16.h"

namespace latentserve::cpu {
namespace {

constexpr int64_t kMinElementsPerChunk = 1 << 15;  // smaller problems stay on one thread

// The norm weight as f32: the tensor itself when it is contiguous f32, else widened
// into `scratch`.
const float* weight_as_f32(const TensorView& weight, int64_t dim, std::vector<float>& scratch) {
  if (weight.numel() != dim || !weight.is_contiguous())
    fail("rms_norm: weight {} must be contiguous with {} elements", weight.shape_string(), dim);
  switch (weight.dtype) {
    case DType::F32: return weight.ptr<const float>();
    case DType::BF16:
      scratch.resize(size_t(dim));
      for (int64_t i = 0; i < dim; ++i) scratch[size_t(i)] = weight.ptr<const bf16>()[i].to_f32();
      return scratch.data();
    case DType::F16:
      scratch.resize(size_t(dim));
      for (int64_t i = 0; i < dim; ++i) scratch[size_t(i)] = float(weight.ptr<const f16>()[i]);
      return scratch.data();
    default:
      fail("rms_norm: weight dtype {} is not supported (weight shape {}); expected F32, BF16 or F16",
           dtype_name(weight.dtype), weight.shape_string());
  }
}

// Σ x[i]² in f32 over 16 lanes (the compiler does not reorder a scalar float sum).
float sum_squares(const float* x, int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 v0 = _mm256_loadu_ps(x + i), v1 = _mm256_loadu_ps(x + i + 8);
    a0 = _mm256_fmadd_ps(v0, v0, a0);
    a1 = _mm256_fmadd_ps(v1, v1, a1);
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, _mm256_add_ps(a0, a1));
  float sum = 0.0f;
  for (float lane : lanes) sum += lane;
  for (; i < n; ++i) sum += x[i] * x[i];
  return sum;
}

// out[dim] = w * (x * inv_rms(x)); out may alias x.
void normalize_row(const float* x, int64_t dim, const float* w, float eps, float* out) {
  const float inv = 1.0f / std::sqrt(sum_squares(x, dim) / float(dim) + eps);
  for (int64_t i = 0; i < dim; ++i) out[i] = w[i] * (x[i] * inv);
}

int64_t min_rows_per_chunk(int64_t dim) { return std::max<int64_t>(1, kMinElementsPerChunk / std::max<int64_t>(dim, 1)); }

}  // namespace

void rms_norm(const float* x, int64_t n_rows, int64_t dim, const TensorView& weight, double eps, float* out,
              ThreadPool& pool) {
  thread_local std::vector<float> scratch;
  const float* w = weight_as_f32(weight, dim, scratch);
  // [n_rows, dim] -> [n_rows, dim]
  pool.parallel_for(
      0, n_rows,
      [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) normalize_row(x + r * dim, dim, w, float(eps), out + r * dim);
      },
      min_rows_per_chunk(dim));
}

void add_rms_norm(float* residual, const float* x, int64_t n_rows, int64_t dim, const TensorView& weight,
                  double eps, float* out, ThreadPool& pool) {
  thread_local std::vector<float> scratch;
  const float* w = weight_as_f32(weight, dim, scratch);
  // residual[n_rows, dim] += x; out[n_rows, dim] = rms_norm(residual)
  pool.parallel_for(
      0, n_rows,
      [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          float* res = residual + r * dim;
          const float* xr = x + r * dim;
          for (int64_t i = 0; i < dim; ++i) res[i] += xr[i];
          normalize_row(res, dim, w, float(eps), out + r * dim);
        }
      },
      min_rows_per_chunk(dim));
}

}  // namespace latentserve::cpu
