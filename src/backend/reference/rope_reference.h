#pragma once
// Scalar f64 reference for rotary position embedding.
#include <cstdint>

#include "backend/cpu/rope.h"

namespace latentserve::reference {

// Reads p.x (not modified) and writes the rotated heads to out: [n_tokens, n_heads,
// head_dim], contiguous. The angle is float(position) · inv_freq[i] rounded to f32,
// as transformers computes it (a long-context position loses bits there, and the
// model was trained with that); cos, sin and the rotation are then done in double.
void rope_reference(const cpu::RopeParams& p, double* out);

}  // namespace latentserve::reference
