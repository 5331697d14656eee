// The small kernels of a Llama layer on the GPU against scalar host references: the
// cuBLASLt GEMM, RMSNorm (+ residual, per head), SwiGLU, embedding and row gather, argmax,
// and RoPE with the paged K/V write (bf16 and fp8 with on-device calibration). Fresh random
// inputs, odd sizes, NaN-poisoned outputs; bad parameters throw Error.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "backend/cuda/activation.h"
#include "backend/cuda/embedding.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/gemv.h"
#include "backend/cuda/norm.h"
#include "backend/cuda/rope_kv_write.h"
#include "backend/cuda/sampling.h"
#include "core/error.h"
#include "core/fp8.h"
#include "cuda/gpu_test_util.h"

namespace latentserve {
namespace {

using testing::from_bf16_bits;
using testing::poisoned_bf16;
using testing::poisoned_f32;
using testing::random_normal;
using testing::relative_l2;
using testing::round_to_bf16;
using testing::to_bf16_bits;
using testing::to_device;
using testing::to_host;

void sync() { ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess); }

TEST(CudaGemm, MatchesAnF64ReferenceOnOddShapes) {
  LS_REQUIRE_GPU();
  uint32_t seed = 1;
  // cuBLASLt for every m, then the skinny kernel (each of its configurations) for m <= 4; rows
  // not a multiple of a warp's rows, k not a multiple of a warp's 256-element step.
  // Then the model's default: autotune choosing per shape between cuBLASLt and the gemv kernel.
  struct Path {
    int gemv_rows;
    cuda::GemvConfig config;
    bool autotune;  // off on the gemv paths: always the gemv kernel where it applies
  };
  std::vector<Path> paths = {{0, cuda::GemvConfig::Rows4Unroll8, true}};
  for (auto c : cuda::kGemvConfigs) paths.push_back({cuda::kGemvMaxRows, c, false});
  paths.push_back({cuda::kGemvMaxRows, cuda::GemvConfig::Rows4Unroll4, true});
  for (auto [gemv_rows, config, autotune] : paths) {
  cuda::Gemm gemm;
  gemm.set_gemv_max_rows(gemv_rows);
  gemm.set_gemv_config(config);
  gemm.set_autotune(autotune);
  for (int64_t m : {1, 3, 4, 5, 8, 17, 130})
    for (auto [n, k] : {std::pair<int64_t, int64_t>{7, 64}, {4099, 200}, {256, 1000}, {1037, 4104}})
      for (bool y_f32 : {false, true})
        for (bool with_bias : {false, true}) {
          if (k > 1000 && m > 8) continue;  // the host f64 reference would dominate the test's time
          SCOPED_TRACE(::testing::Message() << "gemv rows " << gemv_rows << " autotune " << autotune << " config " << cuda::gemv_config_name(config) << " m " << m << " n " << n << " k " << k << " y_f32 " << y_f32 << " bias " << with_bias);
          const auto x = round_to_bf16(random_normal(size_t(m * k), seed++));
          const auto w = round_to_bf16(random_normal(size_t(n * k), seed++, 0.05f));
          const auto b = round_to_bf16(random_normal(size_t(n), seed++));
          auto dx = to_device(to_bf16_bits(x)), dw = to_device(to_bf16_bits(w)), db = to_device(to_bf16_bits(b));
          auto dy = y_f32 ? poisoned_f32(size_t(m * n)) : poisoned_bf16(size_t(m * n));
          gemm.bf16(dx.data(), dw.data(), dy.data(), m, n, k, y_f32, with_bias ? db.data() : nullptr, nullptr);
          sync();
          std::vector<double> ref(size_t(m * n));
          for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < n; ++j) {
              double acc = with_bias ? b[size_t(j)] : 0.0;
              for (int64_t t = 0; t < k; ++t) acc += double(x[size_t(i * k + t)]) * w[size_t(j * k + t)];
              ref[size_t(i * n + j)] = acc;
            }
          const std::vector<float> got = y_f32 ? to_host<float>(dy, size_t(m * n)) : from_bf16_bits(to_host<uint16_t>(dy, size_t(m * n)));
          EXPECT_LT(relative_l2(got, ref), y_f32 ? 1e-4 : 8e-3);  // f32 accumulation; bf16 output rounding 2^-9
        }
  }
  cuda::Gemm gemm;
  // A repeated shape reuses its plan, which also holds the autotuned gemv-or-cuBLASLt choice
  // (no heuristic query, no timing: capturable).
  auto a = to_device(to_bf16_bits(random_normal(64, 9))), bw = to_device(to_bf16_bits(random_normal(7 * 64, 10)));
  auto y = poisoned_bf16(7);
  gemm.bf16(a.data(), bw.data(), y.data(), 1, 7, 64, false, nullptr, nullptr);
  const size_t plans = gemm.n_cached_plans();
  EXPECT_EQ(plans, 1u);
  gemm.bf16(a.data(), bw.data(), y.data(), 1, 7, 64, false, nullptr, nullptr);
  EXPECT_EQ(gemm.n_cached_plans(), plans);
  EXPECT_THROW(gemm.bf16(nullptr, bw.data(), y.data(), 1, 7, 64, false, nullptr, nullptr), Error);
  EXPECT_THROW(gemm.bf16(a.data(), bw.data(), y.data(), 1, -7, 64, false, nullptr, nullptr), Error);
}

TEST(CudaNorm, RmsNormAndAddRmsNormMatchTheReference) {
  LS_REQUIRE_GPU();
  for (int dim : {64, 1000, 4096, 4099}) {
    const int rows = 5;
    SCOPED_TRACE("dim " + std::to_string(dim));
    const auto r = random_normal(size_t(rows * dim), uint32_t(dim), 3.0f);
    const auto delta = round_to_bf16(random_normal(size_t(rows * dim), uint32_t(dim) + 1));
    auto weight = random_normal(size_t(dim), uint32_t(dim) + 2, 0.1f);
    for (auto& v : weight) v += 1.0f;
    weight = round_to_bf16(weight);
    for (bool add : {false, true}) {
      auto dr = to_device(r), dd = to_device(to_bf16_bits(delta)), dw = to_device(to_bf16_bits(weight));
      auto out = poisoned_bf16(size_t(rows * dim));
      if (add)
        cuda::add_rms_norm(dr.as<float>(), dd.data(), dw.data(), out.data(), rows, dim, 1e-5f, nullptr);
      else
        cuda::rms_norm(dr.as<float>(), dw.data(), out.data(), rows, dim, 1e-5f, nullptr);
      sync();
      std::vector<double> ref(size_t(rows * dim)), ref_residual(size_t(rows * dim));
      for (int i = 0; i < rows; ++i) {
        double ss = 0;
        for (int j = 0; j < dim; ++j) {
          const double v = double(r[size_t(i * dim + j)]) + (add ? double(delta[size_t(i * dim + j)]) : 0.0);
          ref_residual[size_t(i * dim + j)] = v;
          ss += v * v;
        }
        const double inv = 1.0 / std::sqrt(ss / dim + 1e-5);
        for (int j = 0; j < dim; ++j) ref[size_t(i * dim + j)] = ref_residual[size_t(i * dim + j)] * inv * weight[size_t(j)];
      }
      EXPECT_LT(relative_l2(from_bf16_bits(to_host<uint16_t>(out, ref.size())), ref), 5e-3) << "add " << add;
      EXPECT_LT(relative_l2(to_host<float>(dr, ref.size()), ref_residual), 1e-6) << "the residual after the add";
    }
  }
  float* null = nullptr;
  EXPECT_THROW(cuda::rms_norm(null, null, null, 1, 8, 1e-5f, nullptr), Error);
}

TEST(CudaNorm, PerHeadNormInPlaceLeavesTheRestOfTheRow) {
  LS_REQUIRE_GPU();
  const int rows = 3, heads = 4, hd = 128, stride = heads * hd + 40;
  const auto x = round_to_bf16(random_normal(size_t(rows * stride), 5, 2.0f));
  auto w = random_normal(size_t(hd), 6, 0.1f);
  for (auto& v : w) v += 1.0f;
  w = round_to_bf16(w);
  auto dx = to_device(to_bf16_bits(x)), dw = to_device(to_bf16_bits(w));
  cuda::rms_norm_heads_inplace(dx.data(), stride, rows, heads, hd, dw.data(), 1e-6f, nullptr);
  sync();
  const auto got = from_bf16_bits(to_host<uint16_t>(dx, x.size()));
  std::vector<double> ref(x.begin(), x.end());
  for (int r = 0; r < rows; ++r)
    for (int h = 0; h < heads; ++h) {
      double ss = 0;
      for (int j = 0; j < hd; ++j) ss += double(x[size_t(r * stride + h * hd + j)]) * x[size_t(r * stride + h * hd + j)];
      const double inv = 1.0 / std::sqrt(ss / hd + 1e-6);
      for (int j = 0; j < hd; ++j) ref[size_t(r * stride + h * hd + j)] = x[size_t(r * stride + h * hd + j)] * inv * w[size_t(j)];
    }
  EXPECT_LT(relative_l2(got, ref), 5e-3);
  for (int r = 0; r < rows; ++r)
    for (int j = heads * hd; j < stride; ++j) EXPECT_EQ(got[size_t(r * stride + j)], x[size_t(r * stride + j)]);
}

TEST(CudaActivation, SiluMulMatchesTheReference) {
  LS_REQUIRE_GPU();
  for (int inter : {1, 7, 14336}) {
    const int rows = 3;
    const auto gu = round_to_bf16(random_normal(size_t(rows * 2 * inter), uint32_t(inter), 2.0f));
    auto d = to_device(to_bf16_bits(gu));
    auto out = poisoned_bf16(size_t(rows * inter));
    cuda::silu_mul(d.data(), out.data(), rows, inter, nullptr);
    sync();
    std::vector<double> ref(size_t(rows * inter));
    for (int r = 0; r < rows; ++r)
      for (int j = 0; j < inter; ++j) {
        const double g = gu[size_t(r * 2 * inter + j)], u = gu[size_t(r * 2 * inter + inter + j)];
        ref[size_t(r * inter + j)] = g / (1 + std::exp(-g)) * u;
      }
    EXPECT_LT(relative_l2(from_bf16_bits(to_host<uint16_t>(out, ref.size())), ref), 5e-3) << "inter " << inter;
  }
}

TEST(CudaEmbedding, LooksUpRowsAndFlagsBadIds) {
  LS_REQUIRE_GPU();
  const int vocab = 37, dim = 100;
  const auto table = round_to_bf16(random_normal(size_t(vocab * dim), 3));
  const std::vector<int32_t> ids = {5, 0, 36, 5, 99};
  auto dt = to_device(to_bf16_bits(table)), di = to_device(ids), flag = to_device(std::vector<int>{0});
  auto out = poisoned_f32(ids.size() * dim);
  cuda::embedding_lookup(dt.data(), di.as<int32_t>(), out.as<float>(), int(ids.size()), dim, vocab, flag.as<int>(), nullptr);
  sync();
  const auto got = to_host<float>(out, ids.size() * dim);
  for (size_t t = 0; t < ids.size(); ++t)
    for (int j = 0; j < dim; ++j)
      EXPECT_EQ(got[t * dim + size_t(j)], ids[t] < vocab ? table[size_t(ids[t] * dim + j)] : 0.0f) << "token " << t;
  EXPECT_EQ(to_host<int>(flag, 1)[0], 1) << "id 99 is outside the vocabulary";

  const std::vector<int32_t> rows = {3, 0, 3};
  auto dr = to_device(rows);
  auto gathered = poisoned_bf16(rows.size() * dim);
  cuda::gather_rows(dt.data(), dr.as<int32_t>(), gathered.data(), int(rows.size()), dim, nullptr);
  sync();
  const auto g = from_bf16_bits(to_host<uint16_t>(gathered, rows.size() * dim));
  for (size_t i = 0; i < rows.size(); ++i)
    for (int j = 0; j < dim; ++j) EXPECT_EQ(g[i * dim + size_t(j)], table[size_t(rows[i] * dim + j)]);
}

TEST(CudaSampling, ArgmaxPicksTheFirstLargest) {
  LS_REQUIRE_GPU();
  for (int vocab : {1, 5, 1001, 128256}) {
    const int rows = 4;
    auto logits = random_normal(size_t(rows * vocab), uint32_t(vocab));
    if (vocab > 5) {
      logits[size_t(1 * vocab + 3)] = 50.0f;  // a tie: the lower id wins
      logits[size_t(1 * vocab + vocab - 2)] = 50.0f;
      logits[size_t(2 * vocab + 7)] = std::nanf("");  // NaN never wins
    }
    auto d = to_device(logits);
    auto out = to_device(std::vector<int32_t>(rows, -1));
    cuda::argmax_rows(d.as<float>(), rows, vocab, out.as<int32_t>(), nullptr);
    sync();
    const auto got = to_host<int32_t>(out, rows);
    for (int r = 0; r < rows; ++r) {
      int32_t best = 0;
      for (int i = 1; i < vocab; ++i)
        if (logits[size_t(r * vocab + i)] > logits[size_t(r * vocab + best)] || std::isnan(logits[size_t(r * vocab + best)]))
          if (!std::isnan(logits[size_t(r * vocab + i)])) best = i;
      EXPECT_EQ(got[size_t(r)], best) << "vocab " << vocab << " row " << r;
    }
  }
}

// Host reference of RoPE + the K/V write for one token (f64 angles from the same f32 angle).
struct RopeCase {
  int n_head, n_head_kv, head_dim, rotary_dim;
  bool interleaved;
};

TEST(CudaRopeKvWrite, RotatesQAndKAndStoresKvAtTheSlots) {
  LS_REQUIRE_GPU();
  for (const RopeCase c : {RopeCase{4, 2, 64, 64, false}, RopeCase{4, 2, 64, 32, false}, RopeCase{8, 1, 128, 128, true},
                           RopeCase{3, 3, 16, 16, false}}) {
    for (auto dtype : {cuda::KvDtype::Bf16, cuda::KvDtype::Fp8E4M3}) {
      SCOPED_TRACE(::testing::Message() << "heads " << c.n_head << "/" << c.n_head_kv << " hd " << c.head_dim << " rot "
                                        << c.rotary_dim << " interleaved " << c.interleaved << " fp8 "
                                        << (dtype == cuda::KvDtype::Fp8E4M3));
      const int T = 9, width = (c.n_head + 2 * c.n_head_kv) * c.head_dim, stride = width + 8, n_slots = 64;
      const int kv_row = c.n_head_kv * c.head_dim;
      const auto qkv = round_to_bf16(random_normal(size_t(T * stride), uint32_t(c.head_dim + c.n_head), 1.5f));
      std::vector<int32_t> positions(T);
      std::vector<int64_t> slots(T);
      for (int t = 0; t < T; ++t) {
        positions[size_t(t)] = 3 + 97 * t;
        slots[size_t(t)] = t == 4 ? -1 : (t * 7) % n_slots;  // token 4 is padding
      }
      std::vector<float> inv_freq(size_t(c.rotary_dim / 2));
      for (size_t i = 0; i < inv_freq.size(); ++i) inv_freq[i] = float(std::pow(10000.0, -2.0 * double(i) / c.rotary_dim));
      const float factor = 1.25f;

      const size_t elem = dtype == cuda::KvDtype::Bf16 ? 2 : 1;
      auto dqkv = to_device(to_bf16_bits(qkv)), dpos = to_device(positions), dslots = to_device(slots),
           dfreq = to_device(inv_freq);
      cuda::DeviceBuffer k_cache(size_t(n_slots * kv_row) * elem), v_cache(size_t(n_slots * kv_row) * elem);
      cudaMemset(k_cache.data(), 0x7f, k_cache.bytes());  // poison: bf16 0x7f7f / e4m3 NaN code 0x7f
      cudaMemset(v_cache.data(), 0x7f, v_cache.bytes());
      const bool per_head = c.n_head_kv > 1;
      const int n_groups = per_head ? c.n_head_kv : 1;
      auto scales = to_device(std::vector<float>(size_t(2 * n_groups), 0.0f));
      auto amax = to_device(std::vector<unsigned>(size_t(2 * c.n_head_kv), 0u));

      cuda::RopeKvWriteParams p{};
      p.qkv = dqkv.data();
      p.qkv_token_stride = stride;
      p.positions = dpos.as<int32_t>();
      p.slot_mapping = dslots.as<int64_t>();
      p.kv.k = k_cache.data();
      p.kv.v = v_cache.data();
      p.kv.dtype = dtype;
      if (dtype == cuda::KvDtype::Fp8E4M3) {
        p.kv.k_scale = scales.as<float>();
        p.kv.v_scale = scales.as<float>() + n_groups;
        p.kv.scale_head_stride = per_head ? 1 : 0;
      }
      p.inv_freq = dfreq.as<float>();
      p.attention_factor = factor;
      p.n_tokens = T;
      p.n_head = c.n_head;
      p.n_head_kv = c.n_head_kv;
      p.head_dim = c.head_dim;
      p.rotary_dim = c.rotary_dim;
      p.interleaved = c.interleaved;
      if (dtype == cuda::KvDtype::Fp8E4M3) {  // the model's calibrating step: rotate, calibrate, write
        p.write_kv = false;
        cuda::rope_and_write_kv(p, nullptr);
        cuda::calibrate_kv_scales(p, 4.0f, amax.as<unsigned>(), nullptr);
        p.apply_rope = false;
        p.write_kv = true;
      }
      cuda::rope_and_write_kv(p, nullptr);
      sync();

      // Reference rotation (f64 from the f32 angle), then bf16 rounding as the kernel stores.
      std::vector<double> ref(qkv.begin(), qkv.end());
      const int half = c.rotary_dim / 2;
      for (int t = 0; t < T; ++t)
        for (int h = 0; h < c.n_head + c.n_head_kv; ++h)
          for (int i = 0; i < half; ++i) {
            const float angle = float(positions[size_t(t)]) * inv_freq[size_t(i)];
            const double cs = std::cos(double(angle)) * factor, sn = std::sin(double(angle)) * factor;
            const size_t base = size_t(t * stride + h * c.head_dim);
            const size_t i1 = base + size_t(c.interleaved ? 2 * i : i), i2 = base + size_t(c.interleaved ? 2 * i + 1 : i + half);
            const double a = qkv[i1], b = qkv[i2];
            ref[i1] = a * cs - b * sn;
            ref[i2] = b * cs + a * sn;
          }
      const auto rotated = from_bf16_bits(to_host<uint16_t>(dqkv, qkv.size()));
      EXPECT_LT(relative_l2(rotated, ref), 4e-3) << "q and k rotated in place (v untouched)";

      // Scales: the host formula over the rotated K / V of the non-padding tokens.
      std::vector<float> want_scales(size_t(2 * n_groups), 0.0f);
      if (dtype == cuda::KvDtype::Fp8E4M3) {
        std::vector<float> a(size_t(2 * n_groups), 0.0f);
        for (int t = 0; t < T; ++t) {
          if (slots[size_t(t)] < 0) continue;
          for (int e = 0; e < kv_row; ++e) {
            const int g = per_head ? e / c.head_dim : 0;
            const size_t kidx = size_t(t * stride + c.n_head * c.head_dim + e);
            a[size_t(g)] = std::max(a[size_t(g)], std::fabs(rotated[kidx]));
            a[size_t(n_groups + g)] = std::max(a[size_t(n_groups + g)], std::fabs(rotated[kidx + size_t(kv_row)]));
          }
        }
        for (size_t i = 0; i < a.size(); ++i) want_scales[i] = float(std::exp2(std::ceil(std::log2(double(a[i]) * 4.0 / 448.0))));
        const auto got_scales = to_host<float>(scales, want_scales.size());
        for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(got_scales[i], want_scales[i]) << "scale group " << i;
      }
      // The cache at each slot: the rotated K and V (bf16 exactly; fp8: the code of x / scale).
      const auto kc = to_host<uint8_t>(k_cache, k_cache.bytes()), vc = to_host<uint8_t>(v_cache, v_cache.bytes());
      std::vector<bool> written(size_t(n_slots), false);
      for (int t = 0; t < T; ++t) {
        if (slots[size_t(t)] < 0) continue;
        written[size_t(slots[size_t(t)])] = true;
        for (int e = 0; e < kv_row; ++e) {
          const size_t src = size_t(t * stride + c.n_head * c.head_dim + e), dst = size_t(slots[size_t(t)] * kv_row + e);
          for (int side = 0; side < 2; ++side) {
            const float x = rotated[src + size_t(side * kv_row)];
            const auto& cache = side ? vc : kc;
            if (dtype == cuda::KvDtype::Bf16) {
              uint16_t bits;
              std::memcpy(&bits, &cache[dst * 2], 2);
              ASSERT_EQ(bits, bf16::from_f32(x).bits) << "token " << t << " element " << e << " side " << side;
            } else {
              const int g = per_head ? e / c.head_dim : 0;
              const float scale = want_scales[size_t(side * n_groups + g)];
              ASSERT_EQ(cache[dst], f32_to_fp8_e4m3(x / scale)) << "token " << t << " element " << e << " side " << side;
            }
          }
        }
      }
      for (int s = 0; s < n_slots; ++s)
        if (!written[size_t(s)]) {
          ASSERT_EQ(kc[size_t(s * kv_row) * elem], 0x7f) << "slot " << s << " was never a target";
        }
    }
  }
  cuda::RopeKvWriteParams bad{};
  EXPECT_THROW(cuda::rope_and_write_kv(bad, nullptr), Error);
}

}  // namespace
}  // namespace latentserve
