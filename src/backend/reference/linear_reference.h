#pragma once
// Scalar f64 references for the dense CPU ops: plain loops, double accumulation, no
// threads, no vectors. They define what the fast kernels in backend/cpu compute.
#include <cstdint>

#include "core/tensor_view.h"

namespace latentserve::reference {

// Weight element `index` (row-major over the view's shape, strides honoured) of an
// F32 | BF16 | F16 tensor as a double; any other dtype throws Error naming it.
double weight_element(const TensorView& weight, int64_t index);

// x: [n_tokens, in]; weight: [out, in]; bias: [out] or nullptr; y: [n_tokens, out]
// y[t, o] = Σ_i x[t, i] · W[o, i] + bias[o]
void linear_reference(const float* x, int64_t n_tokens, const TensorView& weight, const float* bias, double* y);

}  // namespace latentserve::reference
