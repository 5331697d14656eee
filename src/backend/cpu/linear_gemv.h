#pragma once
// Internal to linear(): the decode-path GEMV and the weight-row conversion shared with
// the GEMM path. Callers outside backend/cpu use linear().
#include <cstdint>

#include "core/dtype.h"
#include "core/thread_pool.h"

namespace latentserve::cpu {

// y[n_tokens, out_features] = x[n_tokens, in_features] · W[out_features, in_features]ᵀ + bias
struct LinearProblem {
  const float* x;             // [n_tokens, in_features], contiguous
  int64_t n_tokens;
  int64_t in_features;
  int64_t out_features;
  const void* weight;         // [out_features, weight_row_stride] of weight_dtype
  DType weight_dtype;         // F32 | BF16 | F16 (validated by linear())
  int64_t weight_row_stride;  // elements, >= in_features
  const float* bias;          // [out_features] or nullptr
  float* y;                   // [n_tokens, out_features]
};

// Threaded over output rows (chunks of whole 16-row blocks); each weight row is read
// from memory once and dotted with every token (AVX-512: up to 8 per pass, AVX2: 2).
// AVX-512 when allowed and present.
void gemv(const LinearProblem& p, ThreadPool& pool, bool allow_avx512);

// dst[n_rows, n_cols] f32 (contiguous) = src rows [n_rows, src_row_stride] of dtype.
void convert_rows_to_f32(const void* src, DType dtype, int64_t src_row_stride, int64_t n_rows, int64_t n_cols,
                         float* dst);

}  // namespace latentserve::cpu
