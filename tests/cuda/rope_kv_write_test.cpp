// RoPE + the paged K/V write, and the on-device FP8 calibration, against the CPU semantics:
// backend/cpu/rope.h (f32 rotation; the reference here is cpu::apply_rope itself) and
// backend/cpu/kv_quant.h (bf16 saturating stores, e4m3 of x / scale, fp8_pow2_scale over
// fp8_amax of the rotated K / V of the non-padding tokens). Neox and interleaved, partial
// rotary, GQA, per-tensor and per-head scales, both calibration call sequences; padding
// slots (-1) leave the poisoned cache untouched.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/kv_quant.h"
#include "backend/cpu/rope.h"
#include "backend/cuda/rope_kv_write.h"
#include "core/bf16.h"
#include "core/error.h"
#include "core/fp8.h"
#include "cuda/gpu_test_util.h"

namespace latentserve {
namespace {

using testing::from_bf16_bits;
using testing::round_to_bf16;
using testing::to_bf16_bits;
using testing::to_device;
using testing::to_host;

// Distance in units in the last place between two bf16 (same sign assumed near each other).
int bf16_ulps(uint16_t a, uint16_t b) {
  auto ordered = [](uint16_t v) { return (v & 0x8000) ? -int(v & 0x7fff) : int(v); };
  return std::abs(ordered(a) - ordered(b));
}
// Distance in e4m3 code steps (sign-magnitude codes ordered like bf16).
int fp8_steps(uint8_t a, uint8_t b) {
  auto ordered = [](uint8_t v) { return (v & 0x80) ? -int(v & 0x7f) : int(v); };
  return std::abs(ordered(a) - ordered(b));
}

struct RopeCase {
  int n_head, n_head_kv, head_dim, rotary_dim;
  bool interleaved;
};

enum class Flow { CalibrateThenWrite, RotateCalibrateWrite };

// n_tables > 1: inv_freq holds that many tables (bases 5e5, 1e4, 3e6, ...: dynamic NTK's per-
// sequence tables) and token t rotates with row (t * 2) % n_tables, through inv_freq_rows.
// head_major_block > 0: the cache in KvLayout::HeadMajor with blocks of that many slots.
void run_case(const RopeCase& c, cuda::KvDtype dtype, bool per_head, Flow flow, bool precalibrated_group,
              int n_tables = 1, int head_major_block = 0) {
  const int T = 11, width = (c.n_head + 2 * c.n_head_kv) * c.head_dim, stride = width + 6, n_slots = 40;
  const int kv_row = c.n_head_kv * c.head_dim, half = c.rotary_dim / 2;
  // where element e (head e / head_dim) of a slot's K (or V) lives in the cache, in elements
  auto dst_of = [&](int64_t slot, int e) {
    if (head_major_block == 0) return size_t(slot) * kv_row + size_t(e);
    const int64_t bs = head_major_block, h = e / c.head_dim;
    return size_t((((slot / bs) * c.n_head_kv + h) * bs + slot % bs) * c.head_dim + e % c.head_dim);
  };
  std::mt19937 rng(uint32_t(c.head_dim * 31 + c.n_head * 7 + c.rotary_dim + int(dtype) * 3 + per_head));
  std::normal_distribution<float> normal(0.0f, 1.5f);
  std::vector<float> qkv(size_t(T * stride));
  for (auto& v : qkv) v = normal(rng);
  qkv = round_to_bf16(qkv);
  std::vector<int32_t> positions(T);
  std::vector<int64_t> slots(T);
  for (int t = 0; t < T; ++t) {
    positions[size_t(t)] = t == 0 ? 0 : 1 + 977 * t;  // up to ~10k: large angles
    slots[size_t(t)] = (t == 3 || t == 8) ? -1 : (t * 7 + 2) % n_slots;  // tokens 3 and 8 are padding
  }
  const double bases[] = {500000.0, 10000.0, 3.0e6, 77777.0};
  std::vector<float> inv_freq(size_t(n_tables * half));
  for (int r = 0; r < n_tables; ++r)
    for (int i = 0; i < half; ++i)
      inv_freq[size_t(r * half + i)] = float(std::pow(bases[r % 4] * (1 + r / 4), -2.0 * i / c.rotary_dim));
  std::vector<int32_t> rows(T);
  for (int t = 0; t < T; ++t) rows[size_t(t)] = (t * 2) % n_tables;
  const float factor = 1.125f;

  // CPU reference: f32 rotation of q and k heads (cpu::apply_rope), v untouched; token by token
  // with its own table.
  std::vector<float> want = qkv;
  for (int t = 0; t < T; ++t) {
    cpu::RopeParams rp{want.data() + size_t(t) * stride, stride, 1, c.n_head + c.n_head_kv, c.head_dim, c.rotary_dim,
                       positions.data() + t, inv_freq.data() + size_t(rows[size_t(t)] * half), factor,
                       c.interleaved ? cpu::RopeLayout::Interleaved : cpu::RopeLayout::Neox};
    cpu::apply_rope(rp);
  }

  const int n_groups = per_head ? c.n_head_kv : 1;
  // Scales: K groups then V groups. Optionally one K group calibrated already: it must stay.
  std::vector<float> scales(size_t(2 * n_groups), 0.0f);
  const float preset = 0.25f;
  if (precalibrated_group) scales[0] = preset;
  std::vector<float> want_scales = scales;
  // What the calibration measures: the f32 rotation when it rotates K itself; the bf16 written
  // back into qkv when it reads K after the rotation pass.
  const std::vector<float> measured = flow == Flow::CalibrateThenWrite ? want : round_to_bf16(want);
  if (dtype == cuda::KvDtype::Fp8E4M3) {
    for (int side = 0; side < 2; ++side)
      for (int g = 0; g < n_groups; ++g) {
        float a = 0.0f;
        for (int t = 0; t < T; ++t) {
          if (slots[size_t(t)] < 0) continue;
          const int64_t begin = int64_t(t) * stride + int64_t(c.n_head + side * c.n_head_kv) * c.head_dim +
                                (per_head ? int64_t(g) * c.head_dim : 0);
          a = std::max(a, cpu::fp8_amax(measured.data() + begin, per_head ? c.head_dim : kv_row));
        }
        float& s = want_scales[size_t(side * n_groups + g)];
        if (s == 0.0f) s = cpu::fp8_pow2_scale(a, 4.0f);
      }
  }

  const size_t elem = dtype == cuda::KvDtype::Bf16 ? 2 : 1;
  auto dqkv = to_device(to_bf16_bits(qkv)), dpos = to_device(positions), dslots = to_device(slots),
       dfreq = to_device(inv_freq), dscales = to_device(scales), drows = to_device(rows);
  cuda::DeviceBuffer k_cache(size_t(n_slots * kv_row) * elem), v_cache(size_t(n_slots * kv_row) * elem);
  ASSERT_EQ(cudaMemset(k_cache.data(), 0x7f, k_cache.bytes()), cudaSuccess);  // poison: bf16 0x7f7f, e4m3 NaN 0x7f
  ASSERT_EQ(cudaMemset(v_cache.data(), 0x7f, v_cache.bytes()), cudaSuccess);

  cuda::RopeKvWriteParams p{};
  p.qkv = dqkv.data();
  p.qkv_token_stride = stride;
  p.positions = dpos.as<int32_t>();
  p.slot_mapping = dslots.as<int64_t>();
  p.kv.k = k_cache.data();
  p.kv.v = v_cache.data();
  p.kv.dtype = dtype;
  p.kv.layout = head_major_block ? cuda::KvLayout::HeadMajor : cuda::KvLayout::SlotMajor;
  p.kv.block_size = head_major_block;
  if (dtype == cuda::KvDtype::Fp8E4M3) {
    p.kv.k_scale = dscales.as<float>();
    p.kv.v_scale = dscales.as<float>() + n_groups;
    p.kv.scale_head_stride = per_head ? 1 : 0;
  }
  p.inv_freq = dfreq.as<float>();
  if (n_tables > 1) p.inv_freq_rows = drows.as<int32_t>();
  p.attention_factor = factor;
  p.n_tokens = T;
  p.n_head = c.n_head;
  p.n_head_kv = c.n_head_kv;
  p.head_dim = c.head_dim;
  p.rotary_dim = c.rotary_dim;
  p.interleaved = c.interleaved;
  if (dtype == cuda::KvDtype::Fp8E4M3 && flow == Flow::CalibrateThenWrite) {
    cuda::calibrate_kv_scales(p, 4.0f, nullptr);  // rotates K itself
    cuda::rope_and_write_kv(p, nullptr);
  } else if (dtype == cuda::KvDtype::Fp8E4M3) {  // the model's sequence: rotate, calibrate as it stands, write
    p.write_kv = false;
    cuda::rope_and_write_kv(p, nullptr);
    cuda::calibrate_kv_scales(p, 4.0f, static_cast<unsigned*>(nullptr), nullptr);
    p.apply_rope = false;
    p.write_kv = true;
    cuda::rope_and_write_kv(p, nullptr);
  } else {
    cuda::rope_and_write_kv(p, nullptr);
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  // q and k rotated in place: within one bf16 ulp of bf16(CPU f32 rotation); v and the row's
  // tail unchanged bit for bit.
  const auto got_bits = to_host<uint16_t>(dqkv, qkv.size());
  const auto want_bits = to_bf16_bits(want);
  for (int t = 0; t < T; ++t)
    for (int e = 0; e < stride; ++e) {
      const size_t i = size_t(t * stride + e);
      const bool rotated_part = e < (c.n_head + c.n_head_kv) * c.head_dim && e % c.head_dim < c.rotary_dim;
      // Near zero (a*cos - b*sin cancelling, inputs of order 1) f32 arithmetic itself is only
      // good to ~1e-7 absolute, so there the bound is absolute, elsewhere one bf16 ulp.
      if (rotated_part)
        ASSERT_TRUE(bf16_ulps(got_bits[i], want_bits[i]) <= 1 ||
                    std::abs(bf16::from_bits(got_bits[i]).to_f32() - want[i]) <= 1e-6f)
            << "token " << t << " element " << e << ": got " << bf16::from_bits(got_bits[i]).to_f32() << ", want "
            << want[i];
      else
        ASSERT_EQ(got_bits[i], want_bits[i]) << "token " << t << " element " << e << " must pass through";
    }

  if (dtype == cuda::KvDtype::Fp8E4M3) {
    const auto got_scales = to_host<float>(dscales, scales.size());
    for (size_t i = 0; i < scales.size(); ++i)
      EXPECT_EQ(got_scales[i], want_scales[i]) << "scale group " << i << " (K groups first, then V; "
                                               << (precalibrated_group && i == 0 ? "preset, must stay" : "calibrated")
                                               << ")";
  }

  // The cache: written slots hold the rotated K and V; the others stay poisoned.
  const auto kc = to_host<uint8_t>(k_cache, k_cache.bytes()), vc = to_host<uint8_t>(v_cache, v_cache.bytes());
  std::vector<bool> written(size_t(n_slots), false);
  for (int t = 0; t < T; ++t) {
    const int64_t slot = slots[size_t(t)];
    if (slot < 0) continue;
    written[size_t(slot)] = true;
    for (int side = 0; side < 2; ++side) {
      const auto& cache = side ? vc : kc;
      const float* x = want.data() + size_t(t) * stride + size_t(c.n_head + side * c.n_head_kv) * c.head_dim;
      for (int e = 0; e < kv_row; ++e) {
        const size_t dst = dst_of(slot, e);
        if (dtype == cuda::KvDtype::Bf16) {
          uint16_t bits;
          std::memcpy(&bits, &cache[dst * 2], 2);
          ASSERT_LE(bf16_ulps(bits, cpu::f32_to_bf16_saturating(x[e])), 1)
              << (side ? "V" : "K") << " token " << t << " element " << e;
        } else {
          const int g = per_head ? e / c.head_dim : 0;
          uint8_t want_code;
          cpu::quantize_fp8(&x[e], 1, want_scales[size_t(side * n_groups + g)], &want_code);
          ASSERT_LE(fp8_steps(cache[dst], want_code), 1)
              << (side ? "V" : "K") << " token " << t << " element " << e << ": code " << int(cache[dst])
              << ", want " << int(want_code) << " (scale " << want_scales[size_t(side * n_groups + g)] << ")";
        }
      }
    }
  }
  for (int s = 0; s < n_slots; ++s) {
    if (written[size_t(s)]) continue;
    for (int e = 0; e < kv_row; ++e)
      for (size_t b = 0; b < elem; ++b) {
        ASSERT_EQ(kc[dst_of(s, e) * elem + b], 0x7f) << "K slot " << s << " is no token's target";
        ASSERT_EQ(vc[dst_of(s, e) * elem + b], 0x7f) << "V slot " << s << " is no token's target";
      }
  }
}

const RopeCase kCases[] = {
    {4, 2, 64, 64, false},   // GQA, neox
    {4, 2, 64, 32, false},   // partial rotary 32 of 64
    {8, 1, 128, 128, true},  // MQA, interleaved
    {6, 2, 64, 32, true},    // partial, interleaved
    {3, 3, 16, 16, false},   // MHA, odd head count
    {32, 8, 128, 128, false},  // Llama-3-8B
};

TEST(CudaRopeKvWrite, Bf16CacheMatchesTheCpuRotation) {
  LS_REQUIRE_GPU();
  for (const RopeCase& c : kCases) {
    SCOPED_TRACE(::testing::Message() << "heads " << c.n_head << "/" << c.n_head_kv << " head_dim " << c.head_dim
                                      << " rotary " << c.rotary_dim << " interleaved " << c.interleaved);
    run_case(c, cuda::KvDtype::Bf16, false, Flow::CalibrateThenWrite, false);
  }
}

TEST(CudaRopeKvWrite, HeadMajorCacheGetsEachRowInItsBlock) {
  LS_REQUIRE_GPU();
  for (const RopeCase& c : kCases) {
    SCOPED_TRACE(::testing::Message() << "heads " << c.n_head << "/" << c.n_head_kv << " head_dim " << c.head_dim
                                      << " rotary " << c.rotary_dim << " interleaved " << c.interleaved);
    run_case(c, cuda::KvDtype::Bf16, false, Flow::CalibrateThenWrite, false, 1, 8);
    run_case(c, cuda::KvDtype::Fp8E4M3, true, Flow::RotateCalibrateWrite, false, 1, 8);
  }
}

TEST(CudaRopeKvWrite, EachTokenRotatesWithItsOwnTableRow) {
  LS_REQUIRE_GPU();
  for (const RopeCase& c : kCases) {
    SCOPED_TRACE(::testing::Message() << "heads " << c.n_head << "/" << c.n_head_kv << " head_dim " << c.head_dim
                                      << " rotary " << c.rotary_dim << " interleaved " << c.interleaved);
    run_case(c, cuda::KvDtype::Bf16, false, Flow::CalibrateThenWrite, false, 5);
    run_case(c, cuda::KvDtype::Fp8E4M3, true, Flow::CalibrateThenWrite, false, 3);  // calibration rotates K too
  }
}

TEST(CudaRopeKvWrite, Fp8CacheCalibratesOnTheRotatedValuesAsTheCpuDoes) {
  LS_REQUIRE_GPU();
  for (const RopeCase& c : kCases)
    for (bool per_head : {false, true})
      for (Flow flow : {Flow::CalibrateThenWrite, Flow::RotateCalibrateWrite})
        for (bool preset : {false, true}) {
          SCOPED_TRACE(::testing::Message() << "heads " << c.n_head << "/" << c.n_head_kv << " head_dim " << c.head_dim
                                            << " rotary " << c.rotary_dim << " interleaved " << c.interleaved
                                            << (per_head ? " per-head" : " per-tensor")
                                            << (flow == Flow::CalibrateThenWrite ? " calibrate+write" : " rotate+calibrate+write")
                                            << (preset ? " with a preset scale" : ""));
          run_case(c, cuda::KvDtype::Fp8E4M3, per_head, flow, preset);
        }
}

TEST(CudaRopeKvWrite, BadParametersThrow) {
  LS_REQUIRE_GPU();
  cuda::RopeKvWriteParams bad{};
  EXPECT_THROW(cuda::rope_and_write_kv(bad, nullptr), Error);
  auto buf = to_device(std::vector<float>(4096, 0.0f));
  cuda::RopeKvWriteParams p{};
  p.qkv = buf.data();
  p.positions = buf.as<int32_t>();
  p.slot_mapping = reinterpret_cast<const int64_t*>(buf.data());
  p.inv_freq = buf.as<float>();
  p.kv.k = buf.data();
  p.kv.v = buf.data();
  p.n_tokens = 1;
  p.n_head = 4;
  p.n_head_kv = 2;
  p.head_dim = 16;
  p.rotary_dim = 16;
  p.qkv_token_stride = 128;
  p.attention_factor = 1.0f;
  cuda::RopeKvWriteParams q = p;
  q.rotary_dim = 15;  // odd
  EXPECT_THROW(cuda::rope_and_write_kv(q, nullptr), Error);
  q = p;
  q.rotary_dim = 32;  // > head_dim
  EXPECT_THROW(cuda::rope_and_write_kv(q, nullptr), Error);
  q = p;
  q.qkv_token_stride = 127;  // < (4 + 2*2) * 16
  EXPECT_THROW(cuda::rope_and_write_kv(q, nullptr), Error);
  q = p;
  q.n_head = 3;  // not a multiple of n_head_kv
  EXPECT_THROW(cuda::rope_and_write_kv(q, nullptr), Error);
  q = p;
  q.kv.dtype = cuda::KvDtype::Fp8E4M3;  // no scales
  EXPECT_THROW(cuda::rope_and_write_kv(q, nullptr), Error);
  EXPECT_THROW(cuda::calibrate_kv_scales(p, 4.0f, nullptr), Error);  // a bf16 layer has nothing to calibrate
  q.kv.k_scale = buf.as<float>();
  q.kv.v_scale = buf.as<float>();
  EXPECT_THROW(cuda::calibrate_kv_scales(q, 0.5f, nullptr), Error);  // headroom < 1
  q.kv.scale_head_stride = 2;
  EXPECT_THROW(cuda::rope_and_write_kv(q, nullptr), Error);
}

}  // namespace
}  // namespace latentserve
