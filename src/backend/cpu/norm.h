#pragma once
// RMSNorm as in Llama: out = x / sqrt(mean(x²) + eps) * weight, in f32.
#include <cstdint>

#include "core/tensor_view.h"
#include "core/thread_pool.h"

namespace latentserve::cpu {

// x, out: [n_rows, dim] f32 (out may alias x); weight: [dim] F32 | BF16 | F16.
void rms_norm(const float* x, int64_t n_rows, int64_t dim, const TensorView& weight, double eps, float* out,
              ThreadPool& pool);

// Fused residual add then norm: residual += x; out = rms_norm(residual).
// residual, x, out: [n_rows, dim]; out may alias x.
void add_rms_norm(float* residual, const float* x, int64_t n_rows, int64_t dim, const TensorView& weight,
                  double eps, float* out, ThreadPool& pool);

}  // namespace latentserve::cpu
