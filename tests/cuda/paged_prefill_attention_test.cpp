// The CUDA paged prefill attention kernel against a scalar f64 reference that reads the same
// paged cache through the same block tables. Every case scatters the sequences' K/V over a
// shuffled block pool (so a wrong slot reads another sequence's keys), mixes query lengths
// that straddle the 128-row query tile and the 64-key tile (1, 5, 17, 64, 130, 300) and
// sequences with a cached prefix (the queries are the LAST q_len positions), and poisons the
// output with NaN so an unwritten row fails. Every test runs once per kernel variant
// (cuda::PrefillKernelVariant: the same function through different tile shapes), named
// Variants/PagedPrefillAttention.<Test>/<variant>, e.g. --gtest_filter='*PagedPrefillAttention*/w4m2'.
//
// Tolerance: relative_l2 < 1e-2. The kernel sees exactly the bf16 (or fp8-decoded) values the
// reference sees; its errors are P rounded to bf16 before the P·V MMA (relative 2^-9 per
// weight), f32 accumulation, and the final bf16 rounding of out (2^-9 relative): together a
// few 1e-3 in relative L2; 1e-2 leaves room without hiding a wrong key or a missed mask
// (those give O(1) errors).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cuda/cuda_device.h"
#include "backend/cuda/paged_attention_generic.h"
#include "backend/cuda/paged_prefill_attention.h"
#include "backend/cuda/paged_prefill_attention_wgmma.h"
#include "core/error.h"
#include "core/fp8.h"
#include "cuda/gpu_test_util.h"

namespace latentserve {
namespace {

using cuda::DeviceBuffer;
using testing::from_bf16_bits;
using testing::to_bf16_bits;
using testing::to_device;
using testing::to_host;

enum class KvKind { Bf16, Fp8PerHead, Fp8PerTensor };

struct SeqSpec {
  int prefix;  // cached context before this step's queries
  int q_len;   // this step's query tokens (the last q_len positions)
};

struct Case {
  std::string name;
  std::vector<SeqSpec> seqs;
  int n_head, n_head_kv, head_dim, block_size;
  int sliding_window = 0;
  KvKind kv = KvKind::Bf16;
  int padding_tokens = 0;  // rows past qsl[n_seqs]: the kernel must leave them alone
  bool head_major = false;  // the device cache in KvLayout::HeadMajor (the host Problem stays slot-major)
};

constexpr double kRelL2Tol = 1e-2;  // see the header comment

const std::vector<SeqSpec> kRagged = {{0, 1}, {0, 5}, {0, 17}, {0, 64}, {0, 130}, {0, 300},
                                      {33, 40}, {200, 129}, {50, 0}, {7, 1}};

std::string describe(const Case& c) {
  std::ostringstream s;
  s << c.name << " (n_head " << c.n_head << ", n_head_kv " << c.n_head_kv << ", head_dim " << c.head_dim
    << ", block_size " << c.block_size << (c.head_major ? ", head-major" : "") << ", window " << c.sliding_window << ", kv "
    << (c.kv == KvKind::Bf16 ? "bf16" : c.kv == KvKind::Fp8PerHead ? "fp8 per-head" : "fp8 per-tensor")
    << ", seqs (prefix+q_len):";
  for (auto& q : c.seqs) s << " " << q.prefix << "+" << q.q_len;
  s << ")";
  return s.str();
}

// Host copy of one problem: the paged cache (as stored and as the values it decodes to), the
// fused q buffer, the batch layout, and the f64 reference output.
struct Problem {
  int n_tokens = 0, n_real = 0, max_query_len = 0, max_blocks = 0, n_slots = 0;
  int64_t q_stride = 0;
  std::vector<int32_t> qsl, seq_lens, tables;
  std::vector<uint16_t> q_bits;                 // [n_tokens, q_stride] bf16
  std::vector<uint16_t> k_bits, v_bits;         // bf16 cache [n_slots, n_head_kv, head_dim]
  std::vector<uint8_t> k_codes, v_codes;        // fp8 cache
  std::vector<float> k_scale, v_scale;          // [n_head_kv] or [1]
  std::vector<float> k_val, v_val;              // decoded cache values
  std::vector<float> q_val;                     // decoded q
  std::vector<double> ref;                      // [n_real, n_head, head_dim]
  float scale = 0;
};

Problem build(const Case& c, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Problem p;
  const int n_seqs = int(c.seqs.size()), hd = c.head_dim, bs = c.block_size;
  p.qsl.push_back(0);
  int total_blocks = 0;
  for (auto& s : c.seqs) {
    p.qsl.push_back(p.qsl.back() + s.q_len);
    p.seq_lens.push_back(s.prefix + s.q_len);
    p.max_query_len = std::max(p.max_query_len, s.q_len);
    const int blocks = (s.prefix + s.q_len + bs - 1) / bs;
    p.max_blocks = std::max(p.max_blocks, blocks);
    total_blocks += blocks;
  }
  p.max_blocks += 1;  // one unused (-1) entry per row: reading past seq_len would fault
  total_blocks += 3;  // spare blocks nobody owns
  p.n_real = p.qsl.back();
  p.n_tokens = p.n_real + c.padding_tokens;
  p.n_slots = total_blocks * bs;

  std::vector<int32_t> pool(static_cast<size_t>(total_blocks));
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), rng);
  p.tables.assign(size_t(n_seqs) * p.max_blocks, -1);
  size_t next = 0;
  for (int s = 0; s < n_seqs; ++s)
    for (int b = 0; b < (p.seq_lens[size_t(s)] + bs - 1) / bs; ++b)
      p.tables[size_t(s) * p.max_blocks + b] = pool[next++];

  // K/V: each head its own magnitude (so per-head and per-tensor fp8 scales differ).
  const size_t cache_elems = size_t(p.n_slots) * c.n_head_kv * hd;
  std::vector<float> k_raw(cache_elems), v_raw(cache_elems);
  for (size_t i = 0; i < cache_elems; ++i) {
    const int h = int(i / hd) % c.n_head_kv;
    const float head_mag = std::exp2(float(h % 3) - 1.0f);
    k_raw[i] = normal(rng) * head_mag;
    v_raw[i] = normal(rng) * head_mag;
  }
  if (c.kv == KvKind::Bf16) {
    p.k_bits = to_bf16_bits(k_raw);
    p.v_bits = to_bf16_bits(v_raw);
    p.k_val = from_bf16_bits(p.k_bits);
    p.v_val = from_bf16_bits(p.v_bits);
  } else {
    // power-of-two scales putting each head's max near the top of e4m3's range
    const int n_scales = c.kv == KvKind::Fp8PerHead ? c.n_head_kv : 1;
    auto calibrate = [&](const std::vector<float>& x, std::vector<float>& scale) {
      std::vector<float> amax(size_t(n_scales), 0.0f);
      for (size_t i = 0; i < x.size(); ++i) {
        const int h = n_scales == 1 ? 0 : int(i / hd) % c.n_head_kv;
        amax[size_t(h)] = std::max(amax[size_t(h)], std::fabs(x[i]));
      }
      scale.resize(size_t(n_scales));
      for (int h = 0; h < n_scales; ++h) scale[size_t(h)] = std::exp2(std::ceil(std::log2(amax[size_t(h)] / kFp8E4M3Max)));
    };
    calibrate(k_raw, p.k_scale);
    calibrate(v_raw, p.v_scale);
    p.k_codes.resize(cache_elems);
    p.v_codes.resize(cache_elems);
    p.k_val.resize(cache_elems);
    p.v_val.resize(cache_elems);
    for (size_t i = 0; i < cache_elems; ++i) {
      const int h = n_scales == 1 ? 0 : int(i / hd) % c.n_head_kv;
      p.k_codes[i] = f32_to_fp8_e4m3(k_raw[i] / p.k_scale[size_t(h)]);
      p.v_codes[i] = f32_to_fp8_e4m3(v_raw[i] / p.v_scale[size_t(h)]);
      p.k_val[i] = fp8_e4m3_to_f32(p.k_codes[i]) * p.k_scale[size_t(h)];
      p.v_val[i] = fp8_e4m3_to_f32(p.v_codes[i]) * p.v_scale[size_t(h)];
    }
  }

  // q inside a fused qkv row, as the model passes it: [n_tokens, (n_head + 2 n_head_kv) * hd]
  p.q_stride = int64_t(c.n_head + 2 * c.n_head_kv) * hd;
  std::vector<float> q_raw(size_t(p.n_tokens) * p.q_stride);
  for (auto& x : q_raw) x = 1.5f * normal(rng);  // a little sharper than unit scores
  p.q_bits = to_bf16_bits(q_raw);
  p.q_val = from_bf16_bits(p.q_bits);
  p.scale = 1.0f / std::sqrt(float(hd));

  // f64 reference through the same block tables
  const int group = c.n_head / c.n_head_kv;
  p.ref.assign(size_t(p.n_real) * c.n_head * hd, 0.0);
  std::vector<double> w;
  for (int s = 0; s < n_seqs; ++s) {
    const int q_len = p.qsl[size_t(s) + 1] - p.qsl[size_t(s)], first_pos = p.seq_lens[size_t(s)] - q_len;
    for (int i = 0; i < q_len; ++i) {
      const int token = p.qsl[size_t(s)] + i, pos = first_pos + i;
      const int lo = c.sliding_window > 0 ? std::max(0, pos - c.sliding_window + 1) : 0;
      for (int h = 0; h < c.n_head; ++h) {
        const int hk = h / group;
        const float* q = &p.q_val[size_t(token) * p.q_stride + size_t(h) * hd];
        w.assign(size_t(pos - lo + 1), 0.0);
        double mx = -INFINITY;
        for (int j = lo; j <= pos; ++j) {
          const int64_t slot = int64_t(p.tables[size_t(s) * p.max_blocks + j / bs]) * bs + j % bs;
          const float* k = &p.k_val[(size_t(slot) * c.n_head_kv + hk) * hd];
          double dot = 0;
          for (int d = 0; d < hd; ++d) dot += double(q[d]) * double(k[d]);
          w[size_t(j - lo)] = dot * double(p.scale);
          mx = std::max(mx, w[size_t(j - lo)]);
        }
        double total = 0;
        for (auto& x : w) total += (x = std::exp(x - mx));
        double* out = &p.ref[(size_t(token) * c.n_head + h) * hd];
        for (int j = lo; j <= pos; ++j) {
          const int64_t slot = int64_t(p.tables[size_t(s) * p.max_blocks + j / bs]) * bs + j % bs;
          const float* v = &p.v_val[(size_t(slot) * c.n_head_kv + hk) * hd];
          const double pj = w[size_t(j - lo)] / total;
          for (int d = 0; d < hd; ++d) out[d] += pj * double(v[d]);
        }
      }
    }
  }
  return p;
}

// The slot-major rows [n_slots, n_head_kv, head_dim] reordered to head-major blocks
// [n_blocks, n_head_kv, block_size, head_dim] (kv_cache_layout.h), or unchanged.
template <typename T>
std::vector<T> in_device_layout(const Case& c, const std::vector<T>& slot_major) {
  if (!c.head_major) return slot_major;
  const size_t hd = size_t(c.head_dim), bs = size_t(c.block_size), nkv = size_t(c.n_head_kv);
  std::vector<T> out(slot_major.size());
  for (size_t slot = 0; slot < slot_major.size() / (nkv * hd); ++slot)
    for (size_t h = 0; h < nkv; ++h)
      std::copy_n(&slot_major[(slot * nkv + h) * hd], hd, &out[(((slot / bs) * nkv + h) * bs + slot % bs) * hd]);
  return out;
}

// Device copies of a Problem and the params that point at them.
struct DeviceProblem {
  DeviceBuffer q, k, v, out, qsl, seq_lens, tables, k_scale, v_scale;
  cuda::PagedPrefillParams params;

  DeviceProblem(const Case& c, const Problem& p) {
    q = to_device(p.q_bits);
    if (c.kv == KvKind::Bf16) {
      k = to_device(in_device_layout(c, p.k_bits));
      v = to_device(in_device_layout(c, p.v_bits));
    } else {
      k = to_device(in_device_layout(c, p.k_codes));
      v = to_device(in_device_layout(c, p.v_codes));
      k_scale = to_device(p.k_scale);
      v_scale = to_device(p.v_scale);
    }
    out = testing::poisoned_bf16(size_t(p.n_tokens) * c.n_head * c.head_dim);
    qsl = to_device(p.qsl);
    seq_lens = to_device(p.seq_lens);
    tables = to_device(p.tables);
    params.q = q.data();
    params.q_token_stride = p.q_stride;
    params.kv.k = k.data();
    params.kv.v = v.data();
    params.kv.dtype = c.kv == KvKind::Bf16 ? cuda::KvDtype::Bf16 : cuda::KvDtype::Fp8E4M3;
    params.kv.k_scale = k_scale.as<float>();
    params.kv.v_scale = v_scale.as<float>();
    params.kv.scale_head_stride = c.kv == KvKind::Fp8PerHead ? 1 : 0;
    params.kv.layout = c.head_major ? cuda::KvLayout::HeadMajor : cuda::KvLayout::SlotMajor;
    params.kv.block_size = c.block_size;
    params.out = out.data();
    params.query_start_loc = qsl.as<int32_t>();
    params.seq_lens = seq_lens.as<int32_t>();
    params.block_tables = tables.as<int32_t>();
    params.n_seqs = int(c.seqs.size());
    params.n_tokens = p.n_tokens;
    params.max_blocks_per_seq = p.max_blocks;
    params.block_size = c.block_size;
    params.max_query_len = p.max_query_len;
    params.n_head = c.n_head;
    params.n_head_kv = c.n_head_kv;
    params.head_dim = c.head_dim;
    params.softmax_scale = p.scale;
    params.sliding_window = c.sliding_window;
  }
};

// Compares the kernel's rows with the reference; padding rows must still hold the NaN poison.
void expect_matches(const Case& c, const Problem& p, const std::vector<uint16_t>& out_bits) {
  const size_t row = size_t(c.n_head) * c.head_dim, n_real = size_t(p.n_real) * row;
  std::vector<float> got = from_bf16_bits(std::vector<uint16_t>(out_bits.begin(), out_bits.begin() + n_real));
  size_t n_nan = 0, first_nan = SIZE_MAX, worst = 0;
  double max_err = 0;
  for (size_t i = 0; i < n_real; ++i) {
    if (std::isnan(got[i])) {
      ++n_nan;
      first_nan = std::min(first_nan, i);
      continue;
    }
    const double err = std::fabs(double(got[i]) - p.ref[i]);
    if (err > max_err) max_err = err, worst = i;
  }
  auto where = [&](size_t i) {
    std::ostringstream s;
    s << "token " << i / row << ", head " << (i % row) / c.head_dim << ", dim " << i % c.head_dim;
    return s.str();
  };
  EXPECT_EQ(n_nan, 0u) << describe(c) << ": " << n_nan << " of " << n_real
                       << " output elements unwritten or NaN; first at " << where(first_nan);
  const double rel = testing::relative_l2(got, p.ref);
  EXPECT_LT(rel, kRelL2Tol) << describe(c) << ": relative_l2 " << rel << ", max |err| " << max_err << " at "
                            << where(worst) << " (got " << got[worst] << ", want " << p.ref[worst] << ")";
  size_t touched = 0;
  for (size_t i = n_real; i < out_bits.size(); ++i) touched += out_bits[i] != 0x7fc0;
  EXPECT_EQ(touched, 0u) << describe(c) << ": " << touched << " elements of the " << c.padding_tokens
                         << " padding rows were written";
}

void run_case(const Case& c, uint32_t seed, cuda::PrefillKernelVariant variant) {
  cuda::CudaDevice device;
  const Problem p = build(c, seed);
  DeviceProblem d(c, p);
  d.params.variant = variant;
  cuda::paged_prefill_attention(d.params, device.stream());
  device.synchronize();
  expect_matches(c, p, to_host<uint16_t>(d.out, size_t(p.n_tokens) * c.n_head * c.head_dim));
}

std::vector<cuda::PrefillKernelVariant> all_variants() {
  std::vector<cuda::PrefillKernelVariant> v;
  for (int i = 0; i < cuda::kPrefillKernelVariantCount; ++i) v.push_back(cuda::PrefillKernelVariant(i));
  return v;
}

class PagedPrefillAttention : public ::testing::TestWithParam<cuda::PrefillKernelVariant> {
 protected:
  void run(const Case& c, uint32_t seed) { run_case(c, seed, GetParam()); }
};

INSTANTIATE_TEST_SUITE_P(Variants, PagedPrefillAttention, ::testing::ValuesIn(all_variants()),
                         [](const ::testing::TestParamInfo<cuda::PrefillKernelVariant>& info) {
                           return std::string(cuda::prefill_kernel_variant_name(info.param));
                         });

TEST(PagedPrefillAttentionVariants, NamesRoundTrip) {
  for (auto v : all_variants()) {
    const char* name = cuda::prefill_kernel_variant_name(v);
    ASSERT_NE(name, nullptr) << int(v);
    cuda::PrefillKernelVariant parsed{};
    EXPECT_TRUE(cuda::parse_prefill_kernel_variant(name, &parsed)) << name;
    EXPECT_EQ(parsed, v) << name;
    EXPECT_GT(cuda::paged_prefill_query_tile(128, v), 0) << name;
  }
  EXPECT_FALSE(cuda::parse_prefill_kernel_variant("no-such-variant", nullptr));
  EXPECT_EQ(cuda::prefill_kernel_variant_name(cuda::PrefillKernelVariant::kCount), nullptr);
  EXPECT_EQ(cuda::PagedPrefillParams{}.variant, cuda::PrefillKernelVariant::Base) << "the default stays the measured kernel";
}

// The wgmma kernel's two matrix products on one tile, against f64 on the same bf16 inputs:
// S = Q K^T (both K-major in the swizzled layout) and O = bf16(S) V (P from registers, V N-major).
// Random values of mixed sign and magnitude, so a wrong swizzle, descriptor stride or fragment
// position moves the result by O(1). S is exact f32 accumulation of bf16 products (1e-5); O uses
// the kernel's own S rounded to bf16 as P, so only its f32 accumulation differs.
TEST(WgmmaTileProbe, BothProductsMatchF64) {
  LS_REQUIRE_GPU();
  cuda::CudaDevice device;
  std::mt19937 rng(41);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto random_bf16 = [&](size_t n, float scale) {
    std::vector<float> x(n);
    for (auto& v : x) v = normal(rng) * scale;
    return testing::round_to_bf16(x);
  };
  const std::vector<float> q = random_bf16(64 * 128, 0.3f), k = random_bf16(128 * 128, 0.3f),
                           v = random_bf16(128 * 128, 1.0f);
  const DeviceBuffer dq = to_device(to_bf16_bits(q)), dk = to_device(to_bf16_bits(k)), dv = to_device(to_bf16_bits(v));
  DeviceBuffer ds = testing::poisoned_f32(64 * 128), d_o = testing::poisoned_f32(64 * 128);
  cuda::wgmma_attention_tile_probe(dq.data(), dk.data(), dv.data(), static_cast<float*>(ds.data()),
                                   static_cast<float*>(d_o.data()), device.stream());
  device.synchronize();
  const std::vector<float> s = to_host<float>(ds, 64 * 128), o = to_host<float>(d_o, 64 * 128);
  std::vector<double> s_ref(64 * 128), o_ref(64 * 128);
  for (int i = 0; i < 64; ++i)
    for (int j = 0; j < 128; ++j) {
      double acc = 0;
      for (int d = 0; d < 128; ++d) acc += double(q[i * 128 + d]) * k[j * 128 + d];
      s_ref[i * 128 + j] = acc;
    }
  const std::vector<float> p = testing::round_to_bf16(s);  // the kernel's P
  for (int i = 0; i < 64; ++i)
    for (int d = 0; d < 128; ++d) {
      double acc = 0;
      for (int j = 0; j < 128; ++j) acc += double(p[i * 128 + j]) * v[j * 128 + d];
      o_ref[i * 128 + d] = acc;
    }
  EXPECT_LT(testing::relative_l2(s, s_ref), 1e-5) << "S = Q K^T";
  EXPECT_LT(testing::relative_l2(o, o_ref), 1e-5) << "O = P V";
}

TEST_P(PagedPrefillAttention, MhaRaggedHd128Block16) {
  LS_REQUIRE_GPU();
  run({"mha", kRagged, 8, 8, 128, 16}, 1);
}

TEST_P(PagedPrefillAttention, GqaRaggedHd128Block64) {
  LS_REQUIRE_GPU();
  run({"gqa 8/2", kRagged, 8, 2, 128, 64}, 2);
}

TEST_P(PagedPrefillAttention, MqaRaggedHd64Block16) {
  LS_REQUIRE_GPU();
  run({"mqa 8/1", kRagged, 8, 1, 64, 16}, 3);
}

TEST_P(PagedPrefillAttention, Gqa12Over4Hd64Block64) {
  LS_REQUIRE_GPU();
  run({"gqa 12/4", kRagged, 12, 4, 64, 64}, 4);
}

TEST_P(PagedPrefillAttention, GqaHd128Block16) {
  LS_REQUIRE_GPU();
  run({"gqa 12/4 hd128", kRagged, 12, 4, 128, 16}, 5);
}

TEST_P(PagedPrefillAttention, LongSequenceManyTilesAndChunkedPrefill) {
  LS_REQUIRE_GPU();
  // 700 queries: 6 query tiles, 11 key tiles; then a 300-token chunk after a 1000-token prefix
  run({"long", {{0, 700}, {1000, 300}}, 8, 8, 128, 16}, 6);
  run({"long hd64 bs8/bs256", {{0, 389}, {517, 211}}, 4, 2, 64, 8}, 7);
  run({"long bs256", {{0, 389}, {517, 211}}, 4, 2, 128, 256}, 8);
}

TEST_P(PagedPrefillAttention, SlidingWindow) {
  LS_REQUIRE_GPU();
  // windows below, at and above the key tile (64), and over a cached prefix
  run({"window 48", kRagged, 8, 2, 128, 16, 48}, 9);
  run({"window 64", kRagged, 8, 8, 64, 64, 64}, 10);
  run({"window 100", {{0, 700}, {1000, 300}, {33, 40}}, 8, 2, 128, 16, 100}, 11);
  run({"window 1", {{0, 130}, {5, 17}}, 4, 4, 64, 16, 1}, 12);
}

TEST_P(PagedPrefillAttention, Fp8PerHeadScales) {
  LS_REQUIRE_GPU();
  run({"fp8 per-head", kRagged, 8, 2, 128, 16, 0, KvKind::Fp8PerHead}, 13);
  run({"fp8 per-head hd64", kRagged, 12, 4, 64, 64, 0, KvKind::Fp8PerHead}, 14);
}

TEST_P(PagedPrefillAttention, Fp8PerTensorScale) {
  LS_REQUIRE_GPU();
  run({"fp8 per-tensor", kRagged, 8, 8, 128, 64, 0, KvKind::Fp8PerTensor}, 15);
  run({"fp8 per-tensor window", kRagged, 8, 1, 64, 16, 48, KvKind::Fp8PerTensor}, 16);
}

TEST_P(PagedPrefillAttention, HeadMajorCache) {
  LS_REQUIRE_GPU();
  for (Case c : {Case{"head-major gqa", kRagged, 8, 2, 128, 16}, Case{"head-major mha hd64 bs64", kRagged, 8, 8, 64, 64},
                 Case{"head-major fp8", kRagged, 8, 2, 128, 16, 0, KvKind::Fp8PerHead},
                 Case{"head-major long", {{0, 700}, {1000, 300}}, 8, 4, 128, 32}}) {
    c.head_major = true;
    run(c, 17);
  }
}

TEST_P(PagedPrefillAttention, PaddingRowsAreLeftAlone) {
  LS_REQUIRE_GPU();
  Case c{"padding", kRagged, 8, 2, 128, 16};
  c.padding_tokens = 5;
  run(c, 17);
}

TEST_P(PagedPrefillAttention, GroupWiderThanTheTile) {
  LS_REQUIRE_GPU();
  // 136 query heads on one KV head: more than the 128 rows of a GQA-packed tile (that variant
  // falls back to one head per CTA); the others see a plain MQA
  run({"mqa 136/1", {{0, 5}, {3, 70}, {0, 129}}, 136, 1, 64, 16}, 20);
}

TEST_P(PagedPrefillAttention, CapturedInACudaGraph) {
  LS_REQUIRE_GPU();
  cuda::CudaDevice device;
  const Case c{"graph", {{0, 130}, {33, 40}}, 8, 2, 128, 16};
  const Problem p = build(c, 18);
  DeviceProblem d(c, p);
  d.params.variant = GetParam();
  cuda::paged_prefill_attention(d.params, device.stream());  // first call outside capture (function attributes)
  device.synchronize();
  d.out = testing::poisoned_bf16(size_t(p.n_tokens) * c.n_head * c.head_dim);
  d.params.out = d.out.data();
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(device.stream(), cudaStreamCaptureModeGlobal), cudaSuccess);
  cuda::paged_prefill_attention(d.params, device.stream());
  ASSERT_EQ(cudaStreamEndCapture(device.stream(), &graph), cudaSuccess) << "the launcher is not capturable";
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, device.stream()), cudaSuccess);
  device.synchronize();
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  expect_matches(c, p, to_host<uint16_t>(d.out, size_t(p.n_tokens) * c.n_head * c.head_dim));
}

TEST_P(PagedPrefillAttention, InvalidParamsThrow) {
  LS_REQUIRE_GPU();
  cuda::CudaDevice device;
  const Case c{"valid", {{3, 5}}, 4, 2, 64, 16};
  const Problem p = build(c, 19);
  DeviceProblem d(c, p);
  d.params.variant = GetParam();
  EXPECT_NO_THROW(cuda::paged_prefill_attention(d.params, device.stream()));
  device.synchronize();
  auto expect_throw = [&](const char* what, auto mutate) {
    cuda::PagedPrefillParams bad = d.params;
    mutate(bad);
    EXPECT_THROW(cuda::paged_prefill_attention(bad, device.stream()), Error) << what;
  };
  expect_throw("head_dim 96", [](auto& b) { b.head_dim = 96; });
  expect_throw("n_head 0", [](auto& b) { b.n_head = 0; });
  expect_throw("n_head_kv 3 does not divide 4", [](auto& b) { b.n_head_kv = 3; });
  expect_throw("n_head_kv 0", [](auto& b) { b.n_head_kv = 0; });
  expect_throw("block_size 12", [](auto& b) { b.block_size = 12; });
  expect_throw("block_size 4", [](auto& b) { b.block_size = 4; });
  expect_throw("block_size 512", [](auto& b) { b.block_size = 512; });
  expect_throw("kv.block_size 32 against block_size 16", [](auto& b) { b.kv.block_size = 2 * b.block_size; });
  expect_throw("max_blocks_per_seq 0", [](auto& b) { b.max_blocks_per_seq = 0; });
  expect_throw("max_query_len > n_tokens", [](auto& b) { b.max_query_len = b.n_tokens + 1; });
  expect_throw("max_query_len 0 with tokens", [](auto& b) { b.max_query_len = 0; });
  expect_throw("n_seqs -1", [](auto& b) { b.n_seqs = -1; });
  expect_throw("softmax_scale 0", [](auto& b) { b.softmax_scale = 0; });
  expect_throw("softmax_scale NaN", [](auto& b) { b.softmax_scale = std::nanf(""); });
  expect_throw("sliding_window -1", [](auto& b) { b.sliding_window = -1; });
  expect_throw("variant out of range", [](auto& b) { b.variant = cuda::PrefillKernelVariant::kCount; });
  expect_throw("variant -1", [](auto& b) { b.variant = cuda::PrefillKernelVariant(-1); });
  expect_throw("q_token_stride too small", [](auto& b) { b.q_token_stride = b.n_head * b.head_dim - 8; });
  expect_throw("q_token_stride not a multiple of 8", [](auto& b) { b.q_token_stride += 1; });
  expect_throw("q null", [](auto& b) { b.q = nullptr; });
  expect_throw("q misaligned", [](auto& b) { b.q = static_cast<const char*>(b.q) + 2; });
  expect_throw("out null", [](auto& b) { b.out = nullptr; });
  expect_throw("k null", [](auto& b) { b.kv.k = nullptr; });
  expect_throw("v null", [](auto& b) { b.kv.v = nullptr; });
  expect_throw("query_start_loc null", [](auto& b) { b.query_start_loc = nullptr; });
  expect_throw("seq_lens null", [](auto& b) { b.seq_lens = nullptr; });
  expect_throw("block_tables null", [](auto& b) { b.block_tables = nullptr; });
  expect_throw("fp8 without scales", [](auto& b) {
    b.kv.dtype = cuda::KvDtype::Fp8E4M3;
    b.kv.k_scale = b.kv.v_scale = nullptr;
  });
  expect_throw("fp8 scale_head_stride 2", [&](auto& b) {
    b.kv.dtype = cuda::KvDtype::Fp8E4M3;
    b.kv.k_scale = b.kv.v_scale = d.seq_lens.as<float>();  // any non-null device pointer
    b.kv.scale_head_stride = 2;
  });
  try {
    cuda::PagedPrefillParams bad = d.params;
    bad.head_dim = 96;
    cuda::paged_prefill_attention(bad, device.stream());
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("head_dim"), std::string::npos) << "the error must name the field: " << e.what();
  }
}

// The portable kernel (paged_attention_generic.h) the model runs where the fast kernels do not
// take the shape (head_dim other than 64 / 128), against the same f64 reference: any head_dim
// up to 256 (odd multiples of 8 and sizes below a warp's width), ragged prefill with cached
// prefixes, decode-only rows, GQA / MQA, windows, FP8 scales, both cache orders, padding rows.
void run_generic_case(const Case& c, uint32_t seed) {
  cuda::CudaDevice device;
  const Problem p = build(c, seed);
  DeviceProblem d(c, p);
  cuda::paged_attention_generic(d.params, device.stream());
  device.synchronize();
  expect_matches(c, p, to_host<uint16_t>(d.out, size_t(p.n_tokens) * c.n_head * c.head_dim));
}

TEST(PagedAttentionGeneric, EveryHeadDimMatchesReference) {
  LS_REQUIRE_GPU();
  uint32_t seed = 40;
  for (int hd : {16, 24, 40, 64, 96, 128, 256})
    for (auto [n_head, n_kv] : {std::pair{8, 8}, std::pair{8, 2}, std::pair{6, 1}}) {
      Case c{"generic hd" + std::to_string(hd), kRagged, n_head, n_kv, hd, hd == 96 ? 64 : 16};
      c.padding_tokens = 3;
      run_generic_case(c, seed++);
    }
}

TEST(PagedAttentionGeneric, DecodeRowsWindowsFp8AndHeadMajor) {
  LS_REQUIRE_GPU();
  const std::vector<SeqSpec> decode = {{0, 1}, {700, 1}, {15, 1}, {64, 1}, {300, 1}};
  run_generic_case({"generic decode hd16", decode, 4, 2, 16, 16}, 60);
  run_generic_case({"generic long prefill", {{0, 700}, {1000, 300}}, 4, 1, 32, 32}, 61);
  run_generic_case({"generic window 48", kRagged, 8, 2, 16, 16, 48}, 62);
  run_generic_case({"generic window 1", {{0, 130}, {5, 17}}, 4, 4, 24, 8, 1}, 63);
  run_generic_case({"generic fp8 per-head", kRagged, 8, 2, 16, 16, 0, KvKind::Fp8PerHead}, 64);
  run_generic_case({"generic fp8 per-tensor hd96", kRagged, 6, 3, 96, 64, 0, KvKind::Fp8PerTensor}, 65);
  Case hm{"generic head-major", kRagged, 8, 2, 16, 32};
  hm.head_major = true;
  run_generic_case(hm, 66);
  Case hm8{"generic head-major fp8 bs256", {{0, 389}, {517, 211}}, 4, 2, 40, 256, 0, KvKind::Fp8PerHead};
  hm8.head_major = true;
  run_generic_case(hm8, 67);
}

TEST(PagedAttentionGeneric, InvalidParamsNameTheField) {
  LS_REQUIRE_GPU();
  cuda::CudaDevice device;
  const Case c{"generic bad", {{0, 5}}, 4, 2, 16, 16};
  const Problem p = build(c, 70);
  DeviceProblem d(c, p);
  auto expect_names = [&](const char* field, auto mutate) {
    cuda::PagedPrefillParams bad = d.params;
    mutate(bad);
    try {
      cuda::paged_attention_generic(bad, device.stream());
      ADD_FAILURE() << "no error for a bad " << field;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << "the error must name " << field << ": " << e.what();
    }
  };
  expect_names("head_dim", [](auto& b) { b.head_dim = 258; });
  expect_names("n_head_kv", [](auto& b) { b.n_head_kv = 3; });
  expect_names("q_token_stride", [](auto& b) { b.q_token_stride = 8; });
  expect_names("null", [](auto& b) { b.kv.k = nullptr; });
  expect_names("k_scale", [](auto& b) {
    b.kv.dtype = cuda::KvDtype::Fp8E4M3;
    b.kv.k_scale = b.kv.v_scale = nullptr;
  });
}

}  // namespace
}  // namespace latentserve
