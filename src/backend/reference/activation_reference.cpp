#include "backend/reference/activation_reference.h"

#include <cmath>

namespace latentserve::reference {

void silu_mul_reference(const float* gate, const float* up, int64_t n, double* out) {
  for (int64_t i = 0; i < n; ++i) {
    const double g = double(gate[i]);
    out[i] = g / (1.0 + std::exp(-g)) * double(up[i]);
  }
}

}  // namespace latentserve::reference
