#pragma once
// SwiGLU: out = silu(gate) * up, elementwise, f32.
#include <cstdint>

namespace latentserve::cpu {

// gate, up, out: [n] (out may alias gate or up).
void silu_mul(const float* gate, const float* up, float* out, int64_t n);

}  // namespace latentserve::cpu
