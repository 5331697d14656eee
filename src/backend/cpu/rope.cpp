// Rotary position embedding, in place, f32. Per token the angles are computed once,
// as transformers computes them: angle = float(position) * inv_freq[i] in f32, then
// cos and sin in f32, each scaled by attention_factor.
#include "backend/cpu/rope.h"

#include <cassert>
#include <cmath>
#include <vector>

namespace latentserve::cpu {
namespace {

// Neox (rotate_half): pairs (i, i + half).
void rotate_neox(float* x, int64_t half, const float* cos, const float* sin) {
  float* x1 = x;
  float* x2 = x + half;
  for (int64_t i = 0; i < half; ++i) {
    const float a = x1[i], b = x2[i];
    x1[i] = a * cos[i] - b * sin[i];
    x2[i] = b * cos[i] + a * sin[i];
  }
}

// Interleaved (GPT-J style): pairs (2i, 2i + 1).
void rotate_interleaved(float* x, int64_t half, const float* cos, const float* sin) {
  for (int64_t i = 0; i < half; ++i) {
    const float a = x[2 * i], b = x[2 * i + 1];
    x[2 * i] = a * cos[i] - b * sin[i];
    x[2 * i + 1] = b * cos[i] + a * sin[i];
  }
}

}  // namespace

void apply_rope(const RopeParams& p) {
  assert(p.rotary_dim % 2 == 0 && p.rotary_dim <= p.head_dim);
  const int64_t half = p.rotary_dim / 2;
  thread_local std::vector<float> table;
  table.resize(size_t(2 * half));
  float* cos = table.data();
  float* sin = table.data() + half;
  for (int64_t t = 0; t < p.n_tokens; ++t) {
    const float position = float(p.positions[t]);
    for (int64_t i = 0; i < half; ++i) {
      const float angle = position * p.inv_freq[i];
      cos[i] = std::cos(angle) * p.attention_factor;
      sin[i] = std::sin(angle) * p.attention_factor;
    }
    // x[t]: [n_heads, head_dim]; only the first rotary_dim of each head rotate
    float* x_token = p.x + t * p.token_stride;
    for (int64_t h = 0; h < p.n_heads; ++h) {
      float* head = x_token + h * p.head_dim;
      if (p.layout == RopeLayout::Neox)
        rotate_neox(head, half, cos, sin);
      else
        rotate_interleaved(head, half, cos, sin);
    }
  }
}

}  // namespace latentserve::cpu
