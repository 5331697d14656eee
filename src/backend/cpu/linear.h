#pragma once
// Linear layer on the CPU: y = x · Wᵀ (+ bias), f32 activations, weights f32/bf16/f16
// as stored in the checkpoint, f32 accumulation.
// Few tokens (decode): a vectorised, threaded GEMV that streams each weight row once
// for all tokens. Many tokens (prefill): the BLAS GEMM (weights converted to f32 one
// panel at a time when they are not f32).
#include <cstdint>

#include "core/tensor_view.h"
#include "core/thread_pool.h"

namespace latentserve::cpu {

// x: [n_tokens, in_features] f32, contiguous
// weight: [out_features, in_features], F32 | BF16 | F16, rows contiguous
// bias: [out_features] f32 or nullptr
// y: [n_tokens, out_features] f32 (overwritten)
void linear(const float* x, int64_t n_tokens, const TensorView& weight, const float* bias, float* y,
            ThreadPool& pool);

// Token count from which linear() switches from the GEMV path to the BLAS GEMM.
int64_t linear_gemm_threshold_tokens();

}  // namespace latentserve::cpu
