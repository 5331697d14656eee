// RMSNorm (+ residual add, per-head in place), SwiGLU, embedding lookup and row gather on the
// GPU against the scalar f64 references (backend/reference/*_reference.h). Fresh random
// inputs, odd sizes, both the 16-byte-vector and the scalar (misaligned / odd dim) paths,
// NaN-poisoned outputs; bad parameters throw Error.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/activation.h"
#include "backend/cuda/embedding.h"
#include "backend/cuda/norm.h"
#include "backend/reference/activation_reference.h"
#include "backend/reference/norm_reference.h"
#include "core/error.h"
#include "core/tensor_view.h"
#include "cuda/gpu_test_util.h"

namespace latentserve {
namespace {

using testing::from_bf16_bits;
using testing::poisoned_bf16;
using testing::poisoned_f32;
using testing::relative_l2;
using testing::round_to_bf16;
using testing::to_bf16_bits;
using testing::to_device;
using testing::to_host;

std::vector<float> random_vector(size_t n, uint32_t seed, float scale = 1.0f, float mean = 0.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(mean, scale);
  std::vector<float> x(n);
  for (auto& v : x) v = d(rng);
  return x;
}

void sync() { ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess); }

std::string first_bad(const std::vector<float>& got, const std::vector<double>& ref, double rel) {
  for (size_t i = 0; i < got.size(); ++i)
    if (!(std::fabs(double(got[i]) - ref[i]) <= rel * std::fabs(ref[i]) + 1e-3))
      return "first bad element " + std::to_string(i) + ": got " + std::to_string(got[i]) + ", want " +
             std::to_string(ref[i]);
  return "no single bad element";
}

// A device buffer holding `values` as bf16 starting `offset` elements in (offset 1 breaks the
// 16-byte alignment, which selects the scalar kernels).
struct OffsetBf16 {
  cuda::DeviceBuffer buffer;
  int offset;
  OffsetBf16(const std::vector<float>& values, int offset_elements) : offset(offset_elements) {
    std::vector<uint16_t> bits(size_t(offset_elements), 0x7fc0);
    const auto v = to_bf16_bits(values);
    bits.insert(bits.end(), v.begin(), v.end());
    buffer = to_device(bits);
  }
  void* data() const { return buffer.as<uint16_t>() + offset; }
  std::vector<float> host(size_t n) const {
    auto all = from_bf16_bits(to_host<uint16_t>(buffer, n + size_t(offset)));
    return std::vector<float>(all.begin() + offset, all.end());
  }
};

TEST(CudaNorm, RmsNormAndAddRmsNormMatchTheF64ReferenceOnBothPaths) {
  LS_REQUIRE_GPU();
  for (int dim : {8, 64, 1000, 1001, 4096, 4099, 8192, 16384 + 8})
    for (int rows : {1, 5})
      for (int offset : {0, 1})
        for (bool add : {false, true}) {
          SCOPED_TRACE(::testing::Message() << "dim " << dim << " rows " << rows << " offset " << offset << " add "
                                            << add);
          const uint32_t seed = uint32_t(dim * 7 + rows);
          const auto r = random_vector(size_t(rows * dim), seed, 3.0f);
          const auto delta = round_to_bf16(random_vector(size_t(rows * dim), seed + 1));
          const auto weight = round_to_bf16(random_vector(size_t(dim), seed + 2, 0.1f, 1.0f));
          std::vector<float> r_padded(size_t(offset), 0.0f);
          r_padded.insert(r_padded.end(), r.begin(), r.end());
          auto dr = to_device(r_padded);
          float* residual = dr.as<float>() + offset;
          OffsetBf16 dd(delta, offset), dw(weight, offset), out(std::vector<float>(size_t(rows * dim), std::nanf("")), offset);
          if (add)
            cuda::add_rms_norm(residual, dd.data(), dw.data(), out.data(), rows, dim, 1e-5f, nullptr);
          else
            cuda::rms_norm(residual, dw.data(), out.data(), rows, dim, 1e-5f, nullptr);
          sync();
          std::vector<uint16_t> wbits = to_bf16_bits(weight);
          const TensorView w_view = TensorView::contiguous(wbits.data(), DType::BF16, {dim});
          std::vector<double> ref(size_t(rows * dim)), ref_residual(size_t(rows * dim));
          if (add)
            reference::add_rms_norm_reference(r.data(), delta.data(), rows, dim, w_view, 1e-5, ref_residual.data(), ref.data());
          else
            reference::rms_norm_reference(r.data(), rows, dim, w_view, 1e-5, ref.data());
          const auto got = out.host(ref.size());
          // One bf16 rounding of the output (2^-9 relative) dominates: relative L2 < 1e-2.
          EXPECT_LT(relative_l2(got, ref), 1e-2) << first_bad(got, ref, 1e-2);
          const auto res_all = to_host<float>(dr, r_padded.size());
          const std::vector<float> res(res_all.begin() + offset, res_all.end());
          if (add) {
            // f32 add of an f32 and a bf16 value: one f32 rounding.
            EXPECT_LT(relative_l2(res, ref_residual), 1e-6) << "the residual after the add";
          } else {
            for (size_t i = 0; i < r.size(); ++i) ASSERT_EQ(res[i], r[i]) << "rms_norm must not write the residual, element " << i;
          }
        }
}

TEST(CudaNorm, PerHeadNormMatchesTheReferenceAndLeavesTheRowTail) {
  LS_REQUIRE_GPU();
  struct Case { int rows, heads, hd, extra; };
  for (const Case c : {Case{3, 4, 128, 40}, Case{2, 5, 64, 0}, Case{4, 3, 256, 8}, Case{2, 2, 36, 3}, Case{1, 9, 512, 0}}) {
    SCOPED_TRACE(::testing::Message() << "rows " << c.rows << " heads " << c.heads << " head_dim " << c.hd << " extra "
                                      << c.extra);
    const int stride = c.heads * c.hd + c.extra;
    const auto x = round_to_bf16(random_vector(size_t(c.rows * stride), uint32_t(c.hd + c.heads), 2.0f));
    const auto w = round_to_bf16(random_vector(size_t(c.hd), 6, 0.1f, 1.0f));
    auto dx = to_device(to_bf16_bits(x)), dw = to_device(to_bf16_bits(w));
    cuda::rms_norm_heads_inplace(dx.data(), stride, c.rows, c.heads, c.hd, dw.data(), 1e-6f, nullptr);
    sync();
    const auto got_all = from_bf16_bits(to_host<uint16_t>(dx, x.size()));
    std::vector<uint16_t> wbits = to_bf16_bits(w);
    const TensorView w_view = TensorView::contiguous(wbits.data(), DType::BF16, {c.hd});
    std::vector<float> heads_in, heads_got;
    for (int r = 0; r < c.rows; ++r)
      for (int j = 0; j < c.heads * c.hd; ++j) {
        heads_in.push_back(x[size_t(r * stride + j)]);
        heads_got.push_back(got_all[size_t(r * stride + j)]);
      }
    std::vector<double> ref(heads_in.size());
    reference::rms_norm_reference(heads_in.data(), int64_t(c.rows) * c.heads, c.hd, w_view, 1e-6, ref.data());
    EXPECT_LT(relative_l2(heads_got, ref), 1e-2) << first_bad(heads_got, ref, 1e-2);
    for (int r = 0; r < c.rows; ++r)
      for (int j = c.heads * c.hd; j < stride; ++j)
        ASSERT_EQ(got_all[size_t(r * stride + j)], x[size_t(r * stride + j)]) << "row " << r << " element " << j;
  }
}

TEST(CudaNorm, BadParametersThrow) {
  LS_REQUIRE_GPU();
  auto r = poisoned_f32(64), w = poisoned_bf16(64), o = poisoned_bf16(64);
  float* null = nullptr;
  EXPECT_THROW(cuda::rms_norm(null, w.data(), o.data(), 1, 64, 1e-5f, nullptr), Error);
  EXPECT_THROW(cuda::rms_norm(r.as<float>(), nullptr, o.data(), 1, 64, 1e-5f, nullptr), Error);
  EXPECT_THROW(cuda::rms_norm(r.as<float>(), w.data(), nullptr, 1, 64, 1e-5f, nullptr), Error);
  EXPECT_THROW(cuda::rms_norm(r.as<float>(), w.data(), o.data(), 1, 0, 1e-5f, nullptr), Error);
  EXPECT_THROW(cuda::rms_norm(r.as<float>(), w.data(), o.data(), -1, 64, 1e-5f, nullptr), Error);
  EXPECT_THROW(cuda::add_rms_norm(r.as<float>(), nullptr, w.data(), o.data(), 1, 64, 1e-5f, nullptr), Error);
  EXPECT_THROW(cuda::rms_norm_heads_inplace(o.data(), 30, 1, 2, 16, w.data(), 1e-6f, nullptr), Error);  // stride < 32
  EXPECT_THROW(cuda::rms_norm_heads_inplace(o.data(), 32, 1, 0, 16, w.data(), 1e-6f, nullptr), Error);
}

TEST(CudaActivation, SiluMulMatchesTheF64ReferenceOnBothPaths) {
  LS_REQUIRE_GPU();
  for (int inter : {1, 7, 8, 1000, 14336, 14336 + 3})
    for (int rows : {1, 3})
      for (int offset : {0, 1}) {
        SCOPED_TRACE(::testing::Message() << "inter " << inter << " rows " << rows << " offset " << offset);
        const auto gu = round_to_bf16(random_vector(size_t(rows * 2 * inter), uint32_t(inter + rows), 2.0f));
        OffsetBf16 d(gu, offset), out(std::vector<float>(size_t(rows * inter), std::nanf("")), offset);
        cuda::silu_mul(d.data(), out.data(), rows, inter, nullptr);
        sync();
        std::vector<float> gate, up;
        for (int r = 0; r < rows; ++r)
          for (int j = 0; j < inter; ++j) {
            gate.push_back(gu[size_t(r * 2 * inter + j)]);
            up.push_back(gu[size_t(r * 2 * inter + inter + j)]);
          }
        std::vector<double> ref(gate.size());
        reference::silu_mul_reference(gate.data(), up.data(), int64_t(gate.size()), ref.data());
        const auto got = out.host(ref.size());
        EXPECT_LT(relative_l2(got, ref), 1e-2) << first_bad(got, ref, 1e-2);  // one bf16 rounding
      }
  float* null = nullptr;
  EXPECT_THROW(cuda::silu_mul(null, null, 1, 8, nullptr), Error);
  auto b = poisoned_bf16(16);
  EXPECT_THROW(cuda::silu_mul(b.data(), b.data(), 1, 0, nullptr), Error);
  EXPECT_THROW(cuda::silu_mul(b.data(), b.data(), -1, 8, nullptr), Error);
}

TEST(CudaActivation, AddBiasF32AddsPerColumn) {
  LS_REQUIRE_GPU();
  const int64_t m = 5, n = 1001;
  const auto y = random_vector(size_t(m * n), 77), bias = round_to_bf16(random_vector(size_t(n), 78));
  auto dy = to_device(y), db = to_device(to_bf16_bits(bias));
  cuda::add_bias_f32(dy.as<float>(), db.data(), m, n, nullptr);
  sync();
  const auto got = to_host<float>(dy, y.size());
  for (int64_t i = 0; i < m * n; ++i) ASSERT_EQ(got[size_t(i)], y[size_t(i)] + bias[size_t(i % n)]) << "element " << i;
}

TEST(CudaEmbedding, LookupAndGatherOnBothPathsFlagBadIds) {
  LS_REQUIRE_GPU();
  for (int dim : {100, 4096, 13})
    for (int offset : {0, 1}) {
      SCOPED_TRACE(::testing::Message() << "dim " << dim << " offset " << offset);
      const int vocab = 37;
      const auto table = round_to_bf16(random_vector(size_t(vocab * dim), uint32_t(dim)));
      const std::vector<int32_t> ids = {5, 0, 36, 5, 99, -3, 17};
      OffsetBf16 dt(table, offset);
      auto di = to_device(ids), flag = to_device(std::vector<int>{0});
      auto out = poisoned_f32(ids.size() * size_t(dim));
      cuda::embedding_lookup(dt.data(), di.as<int32_t>(), out.as<float>(), int(ids.size()), dim, vocab,
                             flag.as<int>(), nullptr);
      sync();
      const auto got = to_host<float>(out, ids.size() * size_t(dim));
      for (size_t t = 0; t < ids.size(); ++t)
        for (int j = 0; j < dim; ++j) {
          const bool ok = ids[t] >= 0 && ids[t] < vocab;
          ASSERT_EQ(got[t * size_t(dim) + size_t(j)], ok ? table[size_t(ids[t]) * size_t(dim) + size_t(j)] : 0.0f)
              << "token " << t << " (id " << ids[t] << ") element " << j;
        }
      EXPECT_EQ(to_host<int>(flag, 1)[0], 1) << "ids 99 and -3 are outside the vocabulary";

      // Good ids only: the flag stays 0.
      auto good = to_device(std::vector<int32_t>{1, 2}), flag2 = to_device(std::vector<int>{0});
      cuda::embedding_lookup(dt.data(), good.as<int32_t>(), out.as<float>(), 2, dim, vocab, flag2.as<int>(), nullptr);
      cuda::embedding_lookup(dt.data(), good.as<int32_t>(), out.as<float>(), 2, dim, vocab, nullptr, nullptr);
      sync();
      EXPECT_EQ(to_host<int>(flag2, 1)[0], 0);

      const std::vector<int32_t> rows = {3, 0, 3, 36};
      auto dr = to_device(rows);
      OffsetBf16 gathered(std::vector<float>(rows.size() * size_t(dim), std::nanf("")), offset);
      cuda::gather_rows(dt.data(), dr.as<int32_t>(), gathered.data(), int(rows.size()), dim, nullptr);
      sync();
      const auto g = gathered.host(rows.size() * size_t(dim));
      for (size_t i = 0; i < rows.size(); ++i)
        for (int j = 0; j < dim; ++j)
          ASSERT_EQ(g[i * size_t(dim) + size_t(j)], table[size_t(rows[i]) * size_t(dim) + size_t(j)])
              << "gathered row " << i << " element " << j;
    }
  float* null = nullptr;
  auto t = poisoned_bf16(8);
  EXPECT_THROW(cuda::embedding_lookup(nullptr, nullptr, null, 1, 8, 1, nullptr, nullptr), Error);
  EXPECT_THROW(cuda::embedding_lookup(t.data(), reinterpret_cast<const int32_t*>(t.data()), t.as<float>(), 1, 8, 0,
                                      nullptr, nullptr), Error);
  EXPECT_THROW(cuda::gather_rows(t.data(), nullptr, t.data(), 1, 8, nullptr), Error);
  EXPECT_THROW(cuda::gather_rows(t.data(), reinterpret_cast<const int32_t*>(t.data()), t.data(), 1, 0, nullptr), Error);
}

}  // namespace
}  // namespace latentserve
