// linear(): validation and the choice between the decode GEMV and the prefill GEMM.
#include "backend/cpu/linear.h"

#include <algorithm>

#include "backend/cpu/linear_gemm.h"
#include "backend/cpu/linear_gemv.h"
#include "core/error.h"

namespace latentserve::cpu {

namespace {
// Measured on the 2-core Zen 5 (docs/cpu-kernels.md): below this many tokens the GEMV,
// which reads bf16 weights once for all tokens, beats widening them for the GEMM.
constexpr int64_t kGemmThresholdTokens = 16;
}  // namespace

std::string_view gemm_library_name(GemmLibrary library) {
  return library == GemmLibrary::OneDnn ? "oneDNN" : "OpenBLAS";
}

int64_t linear_gemm_threshold_tokens() { return kGemmThresholdTokens; }

void linear(const float* x, int64_t n_tokens, const TensorView& weight, const float* bias, float* y,
            ThreadPool& pool, const LinearOptions& options) {
  if (weight.dtype != DType::F32 && weight.dtype != DType::BF16 && weight.dtype != DType::F16)
    fail("linear: weight dtype {} is not supported (weight shape {}); expected F32, BF16 or F16",
         dtype_name(weight.dtype), weight.shape_string());
  if (weight.rank != 2)
    fail("linear: weight must be a matrix [out_features, in_features], got shape {}", weight.shape_string());
  const int64_t out_features = weight.dim(0), in_features = weight.dim(1);
  if (in_features > 1 && weight.strides[1] != 1)
    fail("linear: weight {} must have contiguous rows (column stride {}, expected 1)", weight.shape_string(),
         weight.strides[1]);
  const int64_t row_stride = out_features > 1 ? weight.strides[0] : in_features;
  if (row_stride < in_features)
    fail("linear: weight {} row stride {} is smaller than its row length", weight.shape_string(), row_stride);
  if (n_tokens < 0) fail("linear: n_tokens is negative ({})", n_tokens);
  if (n_tokens == 0 || out_features == 0) return;

  const LinearProblem problem{x, n_tokens, in_features, out_features, weight.data, weight.dtype,
                              row_stride, bias, y};
  if (n_tokens >= options.gemm_threshold_tokens && in_features > 0)
    gemm(problem, pool, options.gemm_library);
  else
    gemv(problem, pool, options.allow_avx512);
}

}  // namespace latentserve::cpu
