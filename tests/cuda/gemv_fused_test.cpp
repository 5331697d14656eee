// The gemv kernel with the decode step's neighbours fused in (gemv.h, gemv_bf16_fused): the
// RMSNorm folded in front, SwiGLU or RoPE + the paged K/V write behind, the residual add behind.
// Each mode against a scalar f64 reference of what gemv.h says it computes (bf16 roundings where
// the kernel rounds), and against the unfused kernels it replaces on the same inputs (bit for
// bit for the residual add and for RoPE + K/V write, whose reference is the norm -> store mode
// followed by rope_and_write_kv, itself held to backend/cpu/rope.h in rope_kv_write_test.cpp;
// within the bf16 rounding of the normed row, which the fused norm does not round, for the
// others). Odd sizes, every configuration, bias or none, NaN-poisoned outputs; bad
// parameters throw Error naming the field.
#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <random>
#include <tuple>

#include "backend/cuda/activation.h"
#include "backend/cuda/gemv.h"
#include "backend/cuda/norm.h"
#include "backend/cuda/rope_kv_write.h"
#include "core/bf16.h"
#include "core/error.h"
#include "cuda/gpu_test_util.h"

namespace latentserve {
namespace {

using testing::from_bf16_bits;
using testing::poisoned_bf16;
using testing::random_normal;
using testing::relative_l2;
using testing::round_to_bf16;
using testing::to_bf16_bits;
using testing::to_device;
using testing::to_host;

float bf16_round(double v) { return bf16::from_f32(float(v)).to_f32(); }
void sync() { ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess); }

struct Shape {
  int64_t m, n, k;
};
// n not a multiple of a CTA's rows, k not a multiple of a warp's 256-element step
const Shape kShapes[] = {{1, 14, 64}, {2, 4098, 200}, {3, 1038, 4104}, {4, 262, 1000}, {1, 2 * 1037, 2048}};
const cuda::GemvConfig kEvenConfigs[] = {cuda::GemvConfig::Rows4Unroll4, cuda::GemvConfig::Rows4Unroll8,
                                         cuda::GemvConfig::Rows2Unroll8, cuda::GemvConfig::Rows4Unroll4Split4,
                                         cuda::GemvConfig::Rows2Unroll8Split4};

// f64: y[i, j] = x[i] . w[j] + b[j]
std::vector<double> product_reference(const std::vector<double>& x, const std::vector<float>& w,
                                      const std::vector<float>* b, int64_t m, int64_t n, int64_t k) {
  std::vector<double> y(size_t(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = b ? (*b)[size_t(j)] : 0.0;
      for (int64_t t = 0; t < k; ++t) acc += x[size_t(i * k + t)] * w[size_t(j * k + t)];
      y[size_t(i * n + j)] = acc;
    }
  return y;
}
// f64: the normed rows r / sqrt(mean(r^2) + eps) * g, not rounded (the fused kernel's maths)
std::vector<double> normed_reference(const std::vector<float>& r, const std::vector<float>& g, int64_t m, int64_t k,
                                     float eps) {
  std::vector<double> x(size_t(m * k));
  for (int64_t i = 0; i < m; ++i) {
    double ss = 0;
    for (int64_t t = 0; t < k; ++t) ss += double(r[size_t(i * k + t)]) * r[size_t(i * k + t)];
    const double inv = 1.0 / std::sqrt(ss / double(k) + eps);
    for (int64_t t = 0; t < k; ++t) x[size_t(i * k + t)] = r[size_t(i * k + t)] * inv * g[size_t(t)];
  }
  return x;
}
std::vector<double> widen(const std::vector<float>& x) { return std::vector<double>(x.begin(), x.end()); }

struct Operands {
  std::vector<float> residual, norm_weight, w, bias;
  cuda::DeviceBuffer d_residual, d_norm_weight, d_w, d_bias;
};
Operands make_operands(const Shape& s, uint32_t seed) {
  Operands o;
  o.residual = random_normal(size_t(s.m * s.k), seed, 3.0f);
  o.norm_weight = round_to_bf16(random_normal(size_t(s.k), seed + 1, 0.5f));
  o.w = round_to_bf16(random_normal(size_t(s.n * s.k), seed + 2, 0.05f));
  o.bias = round_to_bf16(random_normal(size_t(s.n), seed + 3));
  o.d_residual = to_device(o.residual);
  o.d_norm_weight = to_device(to_bf16_bits(o.norm_weight));
  o.d_w = to_device(to_bf16_bits(o.w));
  o.d_bias = to_device(to_bf16_bits(o.bias));
  return o;
}

constexpr float kEps = 1e-5f;

TEST(CudaGemvFused, NormInFrontMatchesAnF64ReferenceAndTheNormKernelThenTheGemv) {
  LS_REQUIRE_GPU();
  uint32_t seed = 100;
  for (const Shape& s : kShapes)
    for (auto config : cuda::kGemvConfigs)
      for (bool with_bias : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "m " << s.m << " n " << s.n << " k " << s.k << " config "
                                          << cuda::gemv_config_name(config) << " bias " << with_bias);
        Operands o = make_operands(s, seed += 4);
        const void* bias = with_bias ? o.d_bias.data() : nullptr;
        // unfused: norm kernel -> x (bf16), then the plain gemv
        auto x = poisoned_bf16(size_t(s.m * s.k)), y_unfused = poisoned_bf16(size_t(s.m * s.n));
        cuda::rms_norm(o.d_residual.as<float>(), o.d_norm_weight.data(), x.data(), int(s.m), int(s.k), kEps, nullptr);
        cuda::gemv_bf16(x.data(), o.d_w.data(), y_unfused.data(), s.m, s.n, s.k, false, bias, nullptr, config);
        auto y = poisoned_bf16(size_t(s.m * s.n));
        cuda::GemvFusion f;
        f.norm_residual = o.d_residual.as<float>();
        f.norm_weight = o.d_norm_weight.data();
        f.norm_eps = kEps;
        cuda::gemv_bf16_fused(nullptr, o.d_w.data(), y.data(), s.m, s.n, s.k, bias, f, nullptr, config);
        sync();
        const auto got = from_bf16_bits(to_host<uint16_t>(y, size_t(s.m * s.n)));
        const auto ref = product_reference(normed_reference(o.residual, o.norm_weight, s.m, s.k, kEps), o.w,
                                           with_bias ? &o.bias : nullptr, s.m, s.n, s.k);
        EXPECT_LT(relative_l2(got, ref), 2.5e-3) << "vs f64 (bf16 output rounding: ~1.2e-3)";
        EXPECT_LT(relative_l2(got, widen(from_bf16_bits(to_host<uint16_t>(y_unfused, size_t(s.m * s.n))))), 4e-3)
            << "vs the unfused kernels (which round the normed row to bf16)";
      }
}

TEST(CudaGemvFused, SwiGluBehindMatchesAnF64ReferenceAndTheGemvThenSiluMul) {
  LS_REQUIRE_GPU();
  uint32_t seed = 300;
  for (const Shape& s : kShapes) {
    const Shape gu{s.m, s.n / 2 * 2, s.k};  // [gate | up]: an even row count
    const int64_t inter = gu.n / 2;
    for (auto config : kEvenConfigs)
      for (bool with_bias : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "m " << gu.m << " inter " << inter << " k " << gu.k << " config "
                                          << cuda::gemv_config_name(config) << " bias " << with_bias);
        Operands o = make_operands(gu, seed += 4);
        const void* bias = with_bias ? o.d_bias.data() : nullptr;
        auto x = poisoned_bf16(size_t(gu.m * gu.k)), gate_up = poisoned_bf16(size_t(gu.m * gu.n));
        auto act_unfused = poisoned_bf16(size_t(gu.m * inter));
        cuda::rms_norm(o.d_residual.as<float>(), o.d_norm_weight.data(), x.data(), int(gu.m), int(gu.k), kEps, nullptr);
        cuda::gemv_bf16(x.data(), o.d_w.data(), gate_up.data(), gu.m, gu.n, gu.k, false, bias, nullptr, config);
        cuda::silu_mul(gate_up.data(), act_unfused.data(), int(gu.m), int(inter), nullptr);
        auto act = poisoned_bf16(size_t(gu.m * inter));
        cuda::GemvFusion f;
        f.norm_residual = o.d_residual.as<float>();
        f.norm_weight = o.d_norm_weight.data();
        f.norm_eps = kEps;
        f.swiglu = true;
        cuda::gemv_bf16_fused(nullptr, o.d_w.data(), act.data(), gu.m, gu.n, gu.k, bias, f, nullptr, config);
        sync();
        const auto got = from_bf16_bits(to_host<uint16_t>(act, size_t(gu.m * inter)));
        // f64: gate and up rounded to bf16 (as the stored product is), then silu(g) * u
        const auto prod = product_reference(normed_reference(o.residual, o.norm_weight, gu.m, gu.k, kEps), o.w,
                                            with_bias ? &o.bias : nullptr, gu.m, gu.n, gu.k);
        std::vector<double> ref(size_t(gu.m * inter));
        for (int64_t i = 0; i < gu.m; ++i)
          for (int64_t j = 0; j < inter; ++j) {
            const double g = bf16_round(prod[size_t(i * gu.n + j)]), u = bf16_round(prod[size_t(i * gu.n + inter + j)]);
            ref[size_t(i * inter + j)] = g / (1.0 + std::exp(-g)) * u;
          }
        EXPECT_LT(relative_l2(got, ref), 5e-3) << "vs f64";
        EXPECT_LT(relative_l2(got, widen(from_bf16_bits(to_host<uint16_t>(act_unfused, size_t(gu.m * inter))))), 8e-3)
            << "vs the unfused kernels (which round the normed row to bf16)";
      }
  }
}

TEST(CudaGemvFused, AddToResidualEqualsTheGemvThenTheAdd) {
  LS_REQUIRE_GPU();
  uint32_t seed = 500;
  for (const Shape& s : kShapes)
    for (auto config : cuda::kGemvConfigs)
      for (bool with_bias : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "m " << s.m << " n " << s.n << " k " << s.k << " config "
                                          << cuda::gemv_config_name(config) << " bias " << with_bias);
        const auto x = round_to_bf16(random_normal(size_t(s.m * s.k), seed++));
        const auto w = round_to_bf16(random_normal(size_t(s.n * s.k), seed++, 0.05f));
        const auto b = round_to_bf16(random_normal(size_t(s.n), seed++));
        const auto residual_in = random_normal(size_t(s.m * s.n), seed++, 2.0f);
        auto dx = to_device(to_bf16_bits(x)), dw = to_device(to_bf16_bits(w)), db = to_device(to_bf16_bits(b));
        auto residual = to_device(residual_in);
        const void* bias = with_bias ? db.data() : nullptr;
        auto delta = poisoned_bf16(size_t(s.m * s.n));
        cuda::gemv_bf16(dx.data(), dw.data(), delta.data(), s.m, s.n, s.k, false, bias, nullptr, config);
        cuda::GemvFusion f;
        f.add_to_residual = residual.as<float>();
        cuda::gemv_bf16_fused(dx.data(), dw.data(), nullptr, s.m, s.n, s.k, bias, f, nullptr, config);
        sync();
        const auto got = to_host<float>(residual, size_t(s.m * s.n));
        const auto d = from_bf16_bits(to_host<uint16_t>(delta, size_t(s.m * s.n)));
        std::vector<float> unfused(got.size());
        for (size_t i = 0; i < got.size(); ++i) unfused[i] = residual_in[i] + d[i];  // add_rms_norm's f32 add
        EXPECT_EQ(got, unfused) << "residual + bf16(x w^T + b), as the gemv then add_rms_norm compute it";
        // f64: each element within a bf16 rounding of the product (the kernel rounds its f32 sum,
        // which may fall on the other side of a rounding boundary) and the f32 add's rounding
        const auto prod = product_reference(widen(x), w, with_bias ? &b : nullptr, s.m, s.n, s.k);
        int outside = 0;
        for (size_t i = 0; i < prod.size(); ++i) {
          const double want = residual_in[i] + prod[i];
          outside += !(std::abs(got[i] - want) <= std::ldexp(std::abs(prod[i]), -8) + 1e-6 * std::abs(want) + 1e-6);
        }
        EXPECT_EQ(outside, 0) << "elements off the f64 residual + product by more than a bf16 rounding";
      }
}

// RoPE + K/V write behind the q|k|v product: the same bits as the norm -> store mode followed by
// rope_and_write_kv, for q|k|v rows (y) and both caches (every byte: written slots and the
// poisoned rest). Neox and interleaved, full and partial rotary, a head_dim whose q|k|v row is
// not a multiple of a warp's rows, GQA / MQA / MHA, per-token tables (dynamic NTK), bf16 and FP8
// caches (per-head scales set, and per-tensor 0 = uncalibrated), both cache layouts, a padding
// token, 1-4 rows, every even configuration, bias or none.
struct RopeShape {
  int n_head, n_head_kv, head_dim, rotary_dim;
  bool interleaved;
};
const RopeShape kRopeShapes[] = {{4, 2, 64, 64, false},  {4, 2, 64, 32, false}, {6, 2, 32, 32, true},
                                 {3, 1, 34, 34, false},  {2, 2, 66, 66, false}, {8, 1, 128, 96, true}};

TEST(CudaGemvFused, RopeKvWriteBehindEqualsTheNormStoreThenRopeAndWriteKv) {
  LS_REQUIRE_GPU();
  uint32_t seed = 700;
  const int n_slots = 24, block = 4;
  int cases = 0;
  for (const RopeShape& r : kRopeShapes)
    for (int64_t m : {1, 2, 4, 3})
      for (auto dtype : {cuda::KvDtype::Bf16, cuda::KvDtype::Fp8E4M3})
        for (auto layout : {cuda::KvLayout::SlotMajor, cuda::KvLayout::HeadMajor})
          for (auto config : kEvenConfigs) {
            // not every combination: the shape, m, dtype and layout each vary against every config
            if ((seed++ + int(config)) % 3 != 0) continue;
            const bool with_bias = seed % 2 == 0, tables = seed % 4 < 2;
            const int64_t n = int64_t(r.n_head + 2 * r.n_head_kv) * r.head_dim, k = m == 3 ? 1000 : 200;
            SCOPED_TRACE(::testing::Message() << "heads " << r.n_head << "/" << r.n_head_kv << " hd " << r.head_dim
                                              << " rotary " << r.rotary_dim << (r.interleaved ? " interleaved" : " neox")
                                              << " m " << m << " k " << k << " fp8 " << (dtype != cuda::KvDtype::Bf16)
                                              << " head-major " << (layout == cuda::KvLayout::HeadMajor) << " config "
                                              << cuda::gemv_config_name(config) << " bias " << with_bias);
            ++cases;
            Operands o = make_operands({m, n, k}, seed * 5);
            const void* bias = with_bias ? o.d_bias.data() : nullptr;
            std::vector<int32_t> positions(static_cast<size_t>(m)), rows(static_cast<size_t>(m));
            std::vector<int64_t> slots(static_cast<size_t>(m));
            for (int64_t i = 0; i < m; ++i) {
              positions[size_t(i)] = int32_t(3 + 1777 * i + seed % 50);
              rows[size_t(i)] = int32_t(i % 3);
              slots[size_t(i)] = i == 1 ? -1 : (5 * i + seed) % n_slots;  // row 1 is padding
            }
            const int half = r.rotary_dim / 2;
            std::vector<float> inv_freq(size_t(3 * half));
            for (int t = 0; t < 3; ++t)
              for (int i = 0; i < half; ++i)
                inv_freq[size_t(t * half + i)] = float(std::pow(10000.0 * (1 + 40 * t), -2.0 * i / r.rotary_dim));
            const std::vector<float> scales = {0.5f, 0.25f, 0.125f, 1.0f, 2.0f, 0.0625f, 0.5f, 4.0f,
                                               1.0f, 0.5f, 0.25f, 2.0f, 0.125f, 1.0f, 8.0f, 0.5f};
            auto dpos = to_device(positions), drows = to_device(rows), dslots = to_device(slots),
                 dfreq = to_device(inv_freq), dscales = to_device(scales);
            const size_t elem = dtype == cuda::KvDtype::Bf16 ? 2 : 1;
            const size_t cache_bytes = size_t(n_slots) * r.n_head_kv * r.head_dim * elem;
            auto cache = [&] {
              cuda::DeviceBuffer c(cache_bytes);
              EXPECT_EQ(cudaMemset(c.data(), 0x7f, cache_bytes), cudaSuccess);  // bf16 0x7f7f, e4m3 NaN
              return c;
            };
            cuda::DeviceBuffer k_ref = cache(), v_ref = cache(), k_got = cache(), v_got = cache();
            auto y_ref = poisoned_bf16(size_t(m * n)), y_got = poisoned_bf16(size_t(m * n));
            const auto params = [&](cuda::DeviceBuffer& y, cuda::DeviceBuffer& kc, cuda::DeviceBuffer& vc) {
              cuda::RopeKvWriteParams p{};
              p.qkv = y.data();
              p.qkv_token_stride = n;
              p.positions = dpos.as<int32_t>();
              p.slot_mapping = dslots.as<int64_t>();
              p.kv.k = kc.data();
              p.kv.v = vc.data();
              p.kv.dtype = dtype;
              p.kv.layout = layout;
              p.kv.block_size = block;
              if (dtype == cuda::KvDtype::Fp8E4M3) {  // per head (set) or per tensor (0: uncalibrated)
                const bool per_head = seed % 3 != 0;
                p.kv.k_scale = dscales.as<float>() + (per_head ? 0 : 15);
                p.kv.v_scale = dscales.as<float>() + (per_head ? 8 : 15);
                p.kv.scale_head_stride = per_head ? 1 : 0;
                if (!per_head) {
                  EXPECT_EQ(cudaMemset(dscales.as<float>() + 15, 0, sizeof(float)), cudaSuccess);
                }
              }
              p.inv_freq = dfreq.as<float>();
              p.inv_freq_rows = tables ? drows.as<int32_t>() : nullptr;
              p.attention_factor = 1.0625f;
              p.n_tokens = int(m);
              p.n_head = r.n_head;
              p.n_head_kv = r.n_head_kv;
              p.head_dim = r.head_dim;
              p.rotary_dim = r.rotary_dim;
              p.interleaved = r.interleaved;
              return p;
            };
            cuda::GemvFusion f;
            f.norm_residual = o.d_residual.as<float>();
            f.norm_weight = o.d_norm_weight.data();
            f.norm_eps = kEps;
            // reference: the product stored, then the RoPE kernel
            cuda::gemv_bf16_fused(nullptr, o.d_w.data(), y_ref.data(), m, n, k, bias, f, nullptr, config);
            cuda::rope_and_write_kv(params(y_ref, k_ref, v_ref), nullptr);
            f.rope_kv_write = true;
            f.rope_kv = params(y_got, k_got, v_got);
            cuda::gemv_bf16_fused(nullptr, o.d_w.data(), y_got.data(), m, n, k, bias, f, nullptr, config);
            sync();
            const auto yr = to_host<uint16_t>(y_ref, size_t(m * n)), yg = to_host<uint16_t>(y_got, size_t(m * n));
            ASSERT_EQ(yg, yr) << "q|k|v rows (q and k rotated)";
            EXPECT_EQ(std::count(yg.begin(), yg.end(), uint16_t(0x7fc0)), 0) << "unwritten elements of y";
            for (auto [got, ref, side] : {std::tuple{&k_got, &k_ref, "K"}, std::tuple{&v_got, &v_ref, "V"}}) {
              const auto g = to_host<uint8_t>(*got, cache_bytes), w = to_host<uint8_t>(*ref, cache_bytes);
              ASSERT_EQ(g, w) << side << " cache bytes";
              // every element of the written slots (m - 1 tokens; row 1 is padding) left the
              // poison (bf16 0x7f7f is the largest finite bf16: not reached here; e4m3 0x7f is NaN)
              size_t poisoned = 0;
              for (size_t b = 0; b < cache_bytes; b += elem)
                poisoned += g[b] == 0x7f && (elem == 1 || g[b + 1] == 0x7f);
              const size_t slot_elements = size_t(r.n_head_kv) * r.head_dim;
              EXPECT_EQ(poisoned, (size_t(n_slots) - size_t(m > 1 ? m - 1 : 1)) * slot_elements)
                  << side << ": the written slots' elements, and only those, hold values";
            }
          }
  EXPECT_GE(cases, 40);
}

TEST(CudaGemvFused, BadParametersThrowNamingTheField) {
  LS_REQUIRE_GPU();
  const Shape s{1, 16, 64};
  Operands o = make_operands(s, 7);
  auto y = poisoned_bf16(64);
  cuda::GemvFusion norm;
  norm.norm_residual = o.d_residual.as<float>();
  norm.norm_weight = o.d_norm_weight.data();
  const auto message = [&](const cuda::GemvFusion& f, const void* x, void* out, int64_t m, int64_t n, int64_t k,
                           cuda::GemvConfig config = cuda::GemvConfig::Rows4Unroll4) {
    try {
      cuda::gemv_bf16_fused(x, o.d_w.data(), out, m, n, k, nullptr, f, nullptr, config);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  cuda::GemvFusion swiglu = norm;
  swiglu.swiglu = true;
  EXPECT_NE(message(swiglu, nullptr, y.data(), 1, 15, 64).find("n even"), std::string::npos);
  EXPECT_NE(message(swiglu, nullptr, y.data(), 1, 16, 64, cuda::GemvConfig::Rows1Unroll8).find("r1u8"), std::string::npos);
  cuda::GemvFusion no_weight = norm;
  no_weight.norm_weight = nullptr;
  EXPECT_NE(message(no_weight, nullptr, y.data(), 1, 16, 64).find("norm_weight"), std::string::npos);
  EXPECT_NE(message(cuda::GemvFusion{}, nullptr, y.data(), 1, 16, 64).find("add_to_residual"), std::string::npos);
  cuda::GemvFusion both = norm;
  both.add_to_residual = o.d_residual.as<float>();
  EXPECT_NE(message(both, nullptr, y.data(), 1, 16, 64).find("norm_residual set"), std::string::npos);
  EXPECT_NE(message(norm, nullptr, y.data(), 5, 16, 64).find("m must be in [1, 4]"), std::string::npos);
  EXPECT_NE(message(norm, nullptr, y.data(), 1, 16, 60).find("multiple of 8"), std::string::npos);
  EXPECT_NE(message(norm, nullptr, nullptr, 1, 16, 64).find("y is null"), std::string::npos);
  cuda::GemvFusion add;
  add.add_to_residual = o.d_residual.as<float>();
  EXPECT_NE(message(add, nullptr, nullptr, 1, 16, 64).find("x is null"), std::string::npos);
  EXPECT_EQ(message(norm, nullptr, y.data(), 1, 16, 64), "no error");
  // RoPE + K/V write behind: y is a q|k|v row of (1 + 2 * 1) heads of 8, so n = 24
  cuda::GemvFusion rope = norm;
  rope.rope_kv_write = true;
  cuda::RopeKvWriteParams& p = rope.rope_kv;
  p.qkv = y.data();
  p.qkv_token_stride = 24;
  p.positions = o.d_bias.as<int32_t>();  // never read: every call below is refused
  p.slot_mapping = o.d_bias.as<int64_t>();
  p.inv_freq = o.d_residual.as<float>();
  p.kv.k = p.kv.v = o.d_residual.data();
  p.n_tokens = 1;
  p.n_head = p.n_head_kv = 1;
  p.head_dim = p.rotary_dim = 8;
  p.attention_factor = 1.0f;
  EXPECT_NE(message(rope, nullptr, y.data(), 1, 16, 64).find("n must be (n_head + 2 n_head_kv) * head_dim = 24"),
            std::string::npos);
  EXPECT_NE(message(rope, nullptr, y.data(), 1, 24, 64, cuda::GemvConfig::Rows1Unroll8).find("whole rotated pairs"),
            std::string::npos);
  EXPECT_NE(message(rope, nullptr, y.data(), 2, 24, 64).find("rope_kv.n_tokens must be m = 2"), std::string::npos);
  cuda::GemvFusion other_y = rope;
  other_y.rope_kv.qkv = o.d_w.data();
  EXPECT_NE(message(other_y, nullptr, y.data(), 1, 24, 64).find("rope_kv.qkv must be y"), std::string::npos);
  cuda::GemvFusion no_slots = rope;
  no_slots.rope_kv.slot_mapping = nullptr;
  EXPECT_NE(message(no_slots, nullptr, y.data(), 1, 24, 64).find("slot_mapping is null"), std::string::npos);
  cuda::GemvFusion rope_swiglu = rope;
  rope_swiglu.swiglu = true;
  EXPECT_NE(message(rope_swiglu, nullptr, y.data(), 1, 24, 64).find("rope_kv_write 1"), std::string::npos);
}

}  // namespace
}  // namespace latentserve
