#pragma once
// Scalar f64 reference for the SwiGLU activation.
#include <cstdint>

namespace latentserve::reference {

// gate, up, out: [n]; out[i] = gate[i] / (1 + exp(-gate[i])) · up[i]
void silu_mul_reference(const float* gate, const float* up, int64_t n, double* out);

}  // namespace latentserve::reference
