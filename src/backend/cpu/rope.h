#pragma once
// Rotary position embedding applied in place.
//  neox (Llama/HF default, rotate_half): pairs (i, i + rotary_dim/2)
//  interleaved (GPT-J, DeepSeek with rope_interleave): pairs (2i, 2i+1)
// Only the first rotary_dim elements of each head rotate (partial rotary).
// cos/sin = cos/sin(position * inv_freq[i]) * attention_factor, angles computed in f32
// as transformers does.
#include <cstdint>

namespace latentserve::cpu {

enum class RopeLayout { Neox, Interleaved };

struct RopeParams {
  float* x;                 // [n_tokens, n_heads, head_dim], rows of head_dim contiguous
  int64_t token_stride;     // elements between consecutive tokens
  int64_t n_tokens;
  int64_t n_heads;
  int64_t head_dim;
  int64_t rotary_dim;       // even, <= head_dim
  const int32_t* positions; // [n_tokens]
  const float* inv_freq;    // [rotary_dim / 2]
  float attention_factor;
  RopeLayout layout;
};

void apply_rope(const RopeParams& p);

}  // namespace latentserve::cpu
