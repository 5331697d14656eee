#pragma once
// Scalar f64 reference for RMSNorm (and the fused residual add).
#include <cstdint>

#include "core/tensor_view.h"

namespace latentserve::reference {

// x, out: [n_rows, dim]; weight: [dim] F32 | BF16 | F16
// out[r, i] = weight[i] · x[r, i] / sqrt(mean_i(x[r, i]²) + eps)
void rms_norm_reference(const float* x, int64_t n_rows, int64_t dim, const TensorView& weight, double eps,
                        double* out);

// residual_out[r, i] = residual[r, i] + x[r, i] (in double); out = rms_norm(residual_out).
void add_rms_norm_reference(const float* residual, const float* x, int64_t n_rows, int64_t dim,
                            const TensorView& weight, double eps, double* residual_out, double* out);

}  // namespace latentserve::reference
