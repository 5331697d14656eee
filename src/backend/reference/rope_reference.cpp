#include "backend/reference/rope_reference.h"

#include <cmath>

namespace latentserve::reference {

void rope_reference(const cpu::RopeParams& p, double* out) {
  const int64_t half = p.rotary_dim / 2;
  for (int64_t t = 0; t < p.n_tokens; ++t)
    for (int64_t h = 0; h < p.n_heads; ++h) {
      const float* x = p.x + t * p.token_stride + h * p.head_dim;
      double* o = out + (t * p.n_heads + h) * p.head_dim;
      for (int64_t d = 0; d < p.head_dim; ++d) o[d] = double(x[d]);  // the pass-through part
      for (int64_t i = 0; i < half; ++i) {
        // One f32 multiplication, exactly: the double product of two floats is exact.
        const float angle = float(double(float(p.positions[t])) * double(p.inv_freq[i]));
        const double c = std::cos(double(angle)) * double(p.attention_factor);
        const double s = std::sin(double(angle)) * double(p.attention_factor);
        const int64_t i1 = p.layout == cpu::RopeLayout::Neox ? i : 2 * i;
        const int64_t i2 = p.layout == cpu::RopeLayout::Neox ? i + half : 2 * i + 1;
        const double a = double(x[i1]), b = double(x[i2]);
        o[i1] = a * c - b * s;
        o[i2] = b * c + a * s;
      }
    }
}

}  // namespace latentserve::reference
