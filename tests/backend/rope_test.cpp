// apply_rope against the f64 reference: neox and interleaved, partial rotary,
// attention_factor, long-context positions, a token stride wider than the heads (the
// elements in between must stay untouched).
#include <gtest/gtest.h>

#include <cmath>

#include "backend/cpu/rope.h"
#include "backend/reference/rope_reference.h"
#include "common/tolerance.h"
#include "kernel_test_util.h"

namespace latentserve {
namespace {

using testing::all_close;
using testing::kF32KernelRelTol;
using testing::random_floats;

struct Case {
  int64_t n_tokens, n_heads, head_dim, rotary_dim, extra_stride;
  float attention_factor;
};

void check(const Case& c, cpu::RopeLayout layout, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t token_stride = c.n_heads * c.head_dim + c.extra_stride;
  const int64_t half = c.rotary_dim / 2;
  std::vector<float> inv_freq(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) inv_freq[size_t(i)] = float(std::pow(10000.0, -2.0 * double(i) / double(c.rotary_dim)));
  std::uniform_int_distribution<int32_t> pos_dist(0, 131071);
  std::vector<int32_t> positions(size_t(c.n_tokens));
  for (auto& p : positions) p = pos_dist(rng);
  positions[0] = 0;

  auto x = random_floats(rng, c.n_tokens * token_stride);
  const auto original = x;
  cpu::RopeParams p{x.data(), token_stride, c.n_tokens, c.n_heads, c.head_dim, c.rotary_dim,
                    positions.data(), inv_freq.data(), c.attention_factor, layout};
  std::vector<double> ref(size_t(c.n_tokens * c.n_heads * c.head_dim));
  cpu::RopeParams ref_params = p;
  ref_params.x = const_cast<float*>(original.data());
  reference::rope_reference(ref_params, ref.data());

  cpu::apply_rope(p);
  std::vector<float> heads;  // the rotated heads, contiguous, to compare with the reference
  for (int64_t t = 0; t < c.n_tokens; ++t) {
    heads.insert(heads.end(), x.begin() + t * token_stride, x.begin() + t * token_stride + c.n_heads * c.head_dim);
    for (int64_t j = c.n_heads * c.head_dim; j < token_stride; ++j)
      ASSERT_EQ(x[size_t(t * token_stride + j)], original[size_t(t * token_stride + j)]) << "outside the heads";
  }
  EXPECT_TRUE(all_close(heads.data(), ref.data(), int64_t(ref.size()), kF32KernelRelTol))
      << (layout == cpu::RopeLayout::Neox ? "neox" : "interleaved") << " head_dim " << c.head_dim << " rotary "
      << c.rotary_dim;
}

TEST(Rope, MatchesReference) {
  const Case cases[] = {
      {7, 3, 24, 12, 0, 1.0f},    // partial rotary (half of each head passes through)
      {5, 4, 64, 64, 0, 1.0f},    // full rotary
      {9, 2, 64, 64, 17, 1.2f},   // yarn-style attention_factor, strided tokens (q inside fused qkv)
      {1, 1, 2, 2, 0, 1.0f},      // smallest head
  };
  uint32_t seed = 1;
  for (const Case& c : cases)
    for (auto layout : {cpu::RopeLayout::Neox, cpu::RopeLayout::Interleaved}) check(c, layout, seed++);
}

TEST(Rope, PositionZeroIsIdentityTimesAttentionFactor) {
  std::vector<float> x = {1.0f, 2.0f, 3.0f, 4.0f};
  const float inv_freq[2] = {1.0f, 0.5f};
  const int32_t position = 0;
  cpu::RopeParams p{x.data(), 4, 1, 1, 4, 4, &position, inv_freq, 2.0f, cpu::RopeLayout::Neox};
  cpu::apply_rope(p);
  EXPECT_EQ(x, (std::vector<float>{2.0f, 4.0f, 6.0f, 8.0f}));
}

}  // namespace
}  // namespace latentserve
