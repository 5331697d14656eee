#pragma once
// exp(x) for 8 f32 lanes (AVX2 + FMA), about 1 ulp, so loops that need it stay vectorised
// (SwiGLU's silu in activation.cpp, the online softmax in paged_attention.cpp).
#include <immintrin.h>

namespace latentserve::cpu {

// x = n·ln2 + r with |r| <= ln2/2, exp(r) by a degree-6 (Cephes) polynomial, 2^n through the
// exponent bits. Inputs are clamped to [-87, 88] so that n stays in [-126, 127] and 2^n is a
// normal float: exp(-87) ~ 1.6e-38 stands in for exp(-inf) = 0 (softmax feeds x <= 0, silu only
// needs exp's order of magnitude out there).
inline __m256 exp8(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.0f)), _mm256_set1_ps(88.0f));
  const __m256 n = _mm256_floor_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), _mm256_set1_ps(0.5f)));
  // r = x - n·ln2, ln2 split in two for accuracy
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 y = _mm256_set1_ps(1.9875691500e-4f);
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.3981999507e-3f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(8.3334519073e-3f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(4.1665795894e-2f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.6666665459e-1f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(5.0000001201e-1f));
  y = _mm256_fmadd_ps(y, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  // 2^n: n + 127 in the exponent field
  const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(y, _mm256_castsi256_ps(bits));
}

}  // namespace latentserve::cpu
