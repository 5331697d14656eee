// SwiGLU: out = silu(gate) * up with silu(g) = g / (1 + exp(-g)), f32. exp is
// simd_exp.h's 8-lane polynomial (about 1 ulp), so the loop stays vectorised.
#include "backend/cpu/activation.h"

#include <immintrin.h>

#include <cmath>

#include "backend/cpu/simd_exp.h"

namespace latentserve::cpu {

void silu_mul(const float* gate, const float* up, float* out, int64_t n) {
  int64_t i = 0;
  const __m256 one = _mm256_set1_ps(1.0f);
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    const __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), g));
    const __m256 silu = _mm256_div_ps(g, _mm256_add_ps(one, e));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(silu, _mm256_loadu_ps(up + i)));
  }
  for (; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

}  // namespace latentserve::cpu
