// The paged, ragged attention kernel against the f64 reference over contiguous K/V.
// Each case scatters every sequence's K/V into randomly chosen blocks of a shared
// cache, so a wrong block-table or slot computation reads another sequence's data.
// Every case runs on an f32 cache and again on bf16 and fp8 caches (each scale
// granularity): against the reference on the dequantised K/V the kernel must agree to
// f32 accuracy (it dequantises what it reads correctly), and against the reference on the
// original K/V within the error the element format allows (see quantised_error_bound).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "backend/cpu/cpu_kv_cache.h"
#include "backend/cpu/paged_attention.h"
#include "backend/cpu/paged_attention_amx.h"
#include "backend/reference/attention_reference.h"
#include "backend/reference/kv_quant_reference.h"
#include "common/tolerance.h"
#include "core/thread_pool.h"

namespace latentserve {
namespace {

using cpu::KvCacheOptions;
using cpu::KvScaleGranularity;

struct Case {
  int64_t n_head, n_head_kv, head_dim_qk, head_dim_v, block_size, sliding_window;
  std::vector<std::pair<int64_t, int64_t>> seqs;  // (seq_len after this step, new tokens this step)
  bool latent_row = false;  // MLA absorbed: V is the first head_dim_v elements of the K row (one cache row)
  bool allow_avx512 = true;  // false: the AVX2 kernels on an AVX-512 machine
  bool allow_amx = true;     // false: no AMX tiles (bf16 rows of the gemm shape, paged_attention_amx.h)
};

std::vector<float> random_vector(std::mt19937& rng, int64_t n) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = dist(rng);
  return v;
}

// Rows of KV data with the spread real caches have: each head its own magnitude, each token
// a factor in [1/2, 2] and now and then an outlier token 4x larger (so per-block scales grow
// and re-scale, and per-tensor / per-head scales differ).
std::vector<float> kv_rows(std::mt19937& rng, int64_t n_rows, int64_t n_heads, int64_t head_dim) {
  std::vector<float> x = random_vector(rng, n_rows * n_heads * head_dim);
  std::uniform_real_distribution<float> log2_factor(-1.0f, 1.0f);
  for (int64_t t = 0; t < n_rows; ++t) {
    const float token = std::exp2(log2_factor(rng)) * (rng() % 8 == 0 ? 4.0f : 1.0f);
    for (int64_t h = 0; h < n_heads; ++h) {
      const float head = std::exp2(float(h % 3) - 1.0f);
      for (int64_t d = 0; d < head_dim; ++d) x[size_t((t * n_heads + h) * head_dim + d)] *= token * head;
    }
  }
  return x;
}

// An upper bound on |attention(q, K, V) - attention(q, K̂, V̂)| for one query row and head,
// from the element bounds e_k, e_v (reference::kv_store_error_bound): score j moves by at most
// D_j = scale * Σ_d |q_d| e_k[j, d], so every softmax weight by a factor within e^{±2D}
// (D = max_j D_j) and Σ_j |p_j - p̂_j| <= e^{2D} - 1; then
//   |o - ô| <= max_j |v_j - v̂_j| + (e^{2D} - 1) max_j |v̂_j|.
double quantised_error_bound(const float* q, const std::vector<double>& e_k, const std::vector<double>& e_v,
                             const std::vector<float>& v_hat, int64_t first, int64_t last, int64_t dk, int64_t dv,
                             double scale) {
  double d_max = 0, ev_max = 0, v_max = 0;
  for (int64_t j = first; j <= last; ++j) {
    double d = 0;
    for (int64_t i = 0; i < dk; ++i) d += std::fabs(double(q[i])) * e_k[size_t(j * dk + i)];
    d_max = std::max(d_max, d * scale);
    for (int64_t i = 0; i < dv; ++i) {
      ev_max = std::max(ev_max, e_v[size_t(j * dv + i)]);
      v_max = std::max(v_max, std::fabs(double(v_hat[size_t(j * dv + i)])));
    }
  }
  return ev_max + std::expm1(2 * d_max) * v_max;
}

struct Errors {
  double vs_dequantised = 0;       // max |kernel - reference on K̂, V̂|
  double vs_original = 0;          // max |kernel - reference on K, V|
  double worst_bound_ratio = 0;    // max |kernel - reference on K, V| / (bound + f32 tolerance)
  double rms_vs_original = 0, rms_reference = 0;
  bool used_amx = false;
};

Errors run_case(const Case& c, uint32_t seed, const KvCacheOptions& options = {}) {
  std::mt19937 rng(seed);
  const int64_t dk = c.head_dim_qk, dv = c.head_dim_v, bs = c.block_size, nkv = c.n_head_kv;
  const int64_t n_seqs = int64_t(c.seqs.size());
  const double softmax_scale = 1.0 / std::sqrt(double(dk));
  int64_t max_blocks = 0, total_blocks = 0, n_tokens = 0;
  for (auto [len, n_new] : c.seqs) {
    max_blocks = std::max(max_blocks, (len + bs - 1) / bs);
    total_blocks += (len + bs - 1) / bs;
    n_tokens += n_new;
  }
  const int64_t n_blocks = total_blocks + 3;  // a few spare blocks that nobody owns
  std::vector<int32_t> block_ids(static_cast<size_t>(n_blocks));
  std::iota(block_ids.begin(), block_ids.end(), 0);
  std::shuffle(block_ids.begin(), block_ids.end(), rng);

  // MLA's latent row: kv_lora_rank = head_dim_v, qk_rope_head_dim = the rest of head_dim_qk
  const AttentionSpec spec = c.latent_row ? AttentionSpec::latent(c.n_head, dv, 4, dk - dv, dv)
                                          : AttentionSpec::standard(c.n_head, nkv, dk, dv);
  cpu::CpuKvCache cache(spec, 1, n_blocks, bs, options);
  const int64_t k_row = cache.k_row_elements(), v_row = c.latent_row ? 0 : nkv * dv;
  {  // garbage in every slot first (unowned slots keep it)
    std::vector<int64_t> all(static_cast<size_t>(n_blocks * bs));
    std::iota(all.begin(), all.end(), 0);
    const auto k = kv_rows(rng, n_blocks * bs, nkv, dk), v = kv_rows(rng, n_blocks * bs, nkv, dv);
    cache.write(0, k.data(), k_row, c.latent_row ? nullptr : v.data(), v_row, all.data(), n_blocks * bs);
  }
  std::vector<int32_t> tables(size_t(n_seqs * max_blocks), -1), query_start{0}, seq_lens;
  std::vector<std::vector<float>> seq_q, seq_k, seq_v;
  std::vector<std::vector<int64_t>> seq_slots;
  size_t next_block = 0;
  for (int64_t s = 0; s < n_seqs; ++s) {
    auto [len, n_new] = c.seqs[size_t(s)];
    std::vector<float> k = kv_rows(rng, len, nkv, dk), v = kv_rows(rng, len, nkv, dv);
    if (c.latent_row)  // [len, 1, dk] -> V = K[:, :, :dv]
      for (int64_t pos = 0; pos < len; ++pos) std::copy_n(&k[size_t(pos * dk)], dv, &v[size_t(pos * dv)]);
    for (int64_t b = 0; b < (len + bs - 1) / bs; ++b) tables[size_t(s * max_blocks + b)] = block_ids[next_block++];
    std::vector<int64_t> slots;
    for (int64_t pos = 0; pos < len; ++pos)
      slots.push_back(int64_t(tables[size_t(s * max_blocks + pos / bs)]) * bs + pos % bs);
    // written in position order, a few tokens per write (earlier steps), the new tokens last
    for (int64_t begin = 0; begin < len;) {
      const int64_t n = begin < len - n_new ? std::min(len - n_new - begin, 1 + int64_t(rng() % 9)) : n_new;
      cache.write(0, &k[size_t(begin * nkv * dk)], k_row, c.latent_row ? nullptr : &v[size_t(begin * nkv * dv)],
                  v_row, &slots[size_t(begin)], n);
      begin += n;
    }
    seq_q.push_back(random_vector(rng, n_new * c.n_head * dk));
    seq_k.push_back(std::move(k));
    seq_v.push_back(std::move(v));
    seq_slots.push_back(std::move(slots));
    query_start.push_back(query_start.back() + int32_t(n_new));
    seq_lens.push_back(int32_t(len));
  }
  std::vector<float> q_all;
  for (const auto& q : seq_q) q_all.insert(q_all.end(), q.begin(), q.end());

  std::vector<float> out(size_t(n_tokens * c.n_head * dv), std::nanf(""));  // poisoned
  cpu::PagedAttentionParams p{};
  p.q = q_all.data();
  p.q_token_stride = c.n_head * dk;
  p.k_cache = cache.k_rows(0);
  p.v_cache = c.latent_row ? cache.k_rows(0) : cache.v_rows(0);
  p.out = out.data();
  p.query_start_loc = query_start.data();
  p.seq_lens = seq_lens.data();
  p.block_tables = tables.data();
  p.n_seqs = n_seqs;
  p.max_blocks_per_seq = max_blocks;
  p.block_size = bs;
  p.n_head = c.n_head;
  p.n_head_kv = nkv;
  p.head_dim_qk = dk;
  p.head_dim_v = dv;
  p.softmax_scale = float(softmax_scale);
  p.sliding_window = c.sliding_window;
  p.allow_avx512 = c.allow_avx512;
  p.allow_amx = c.allow_amx;
  ThreadPool pool(2);
  cpu::paged_attention(p, pool);

  // References: on what the cache holds (K̂, V̂ decoded by the reference decoder) and on the
  // original K, V; the element bounds of every cached K/V value for the quantisation bound.
  Errors err;
  err.used_amx = cpu::paged_attention_uses_amx(p);
  const cpu::KvRows k_rows = p.k_cache, v_rows = p.v_cache;
  const int64_t group = c.n_head / nkv;
  for (int64_t s = 0; s < n_seqs; ++s) {
    auto [len, n_new] = c.seqs[size_t(s)];
    const auto& slots = seq_slots[size_t(s)];
    const std::vector<float> k_hat = reference::kv_gather(k_rows, slots, 0, nkv * dk);
    const std::vector<float> v_hat = reference::kv_gather(v_rows, slots, 0, nkv * dv);
    std::vector<float> ref_hat(size_t(n_new * c.n_head * dv)), ref(ref_hat.size());
    reference::causal_attention(seq_q[size_t(s)].data(), k_hat.data(), v_hat.data(), ref_hat.data(), n_new, len, c.n_head,
                                nkv, dk, dv, softmax_scale, c.sliding_window);
    reference::causal_attention(seq_q[size_t(s)].data(), seq_k[size_t(s)].data(), seq_v[size_t(s)].data(), ref.data(),
                                n_new, len, c.n_head, nkv, dk, dv, softmax_scale, c.sliding_window);
    for (int64_t hk = 0; hk < nkv; ++hk) {
      // this KV head's element bounds and dequantised V: [len, dk], [len, dv]
      std::vector<double> e_k(size_t(len * dk)), e_v(size_t(len * dv));
      std::vector<float> v_head(size_t(len * dv));
      for (int64_t j = 0; j < len; ++j) {
        for (int64_t i = 0; i < dk; ++i)
          e_k[size_t(j * dk + i)] = reference::kv_store_error_bound(k_rows, slots[size_t(j)], hk * dk + i,
                                                                    seq_k[size_t(s)][size_t((j * nkv + hk) * dk + i)]);
        for (int64_t i = 0; i < dv; ++i) {
          e_v[size_t(j * dv + i)] = reference::kv_store_error_bound(v_rows, slots[size_t(j)], hk * dv + i,
                                                                    seq_v[size_t(s)][size_t((j * nkv + hk) * dv + i)]);
          v_head[size_t(j * dv + i)] = v_hat[size_t((j * nkv + hk) * dv + i)];
        }
      }
      for (int64_t i = 0; i < n_new; ++i) {
        const int64_t pos = len - n_new + i, t = query_start[size_t(s)] + i;
        const int64_t first = c.sliding_window > 0 ? std::max<int64_t>(0, pos - c.sliding_window + 1) : 0;
        for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
          const float* q = &seq_q[size_t(s)][size_t((i * c.n_head + h) * dk)];
          const double bound = quantised_error_bound(q, e_k, e_v, v_head, first, pos, dk, dv, softmax_scale);
          for (int64_t d = 0; d < dv; ++d) {
            const double o = out[size_t((t * c.n_head + h) * dv + d)];
            const size_t at = size_t((i * c.n_head + h) * dv + d);
            const double r_hat = ref_hat[at], r = ref[at];
            EXPECT_FALSE(std::isnan(o)) << "output of token " << t << " head " << h << " was not written";
            err.vs_dequantised = std::max(err.vs_dequantised, std::fabs(o - r_hat));
            err.vs_original = std::max(err.vs_original, std::fabs(o - r));
            err.worst_bound_ratio =
                std::max(err.worst_bound_ratio, std::fabs(o - r) / (bound + testing::kF32KernelRelTol));
            err.rms_vs_original += (o - r) * (o - r);
            err.rms_reference += r * r;
          }
        }
      }
    }
  }
  err.rms_vs_original = std::sqrt(err.rms_vs_original / double(out.size()));
  err.rms_reference = std::sqrt(err.rms_reference / double(out.size()));
  EXPECT_LT(err.vs_dequantised, testing::kF32KernelRelTol) << "max |paged - reference on the cached K/V|";
  EXPECT_LE(err.worst_bound_ratio, 1.0) << "max |paged - reference on the original K/V| exceeds the format's bound";
  // The bound above is a worst case (errors all aligned) and some 20-60x above what happens.
  // A sanity budget for the typical error, not a theorem: the RMS error stays within twice the
  // format's unit roundoff (2^-4 fp8, 2^-8 bf16) of the RMS output; these cases sit near 0.8 u
  // (the outputs are averages of V rows several times larger than themselves).
  const double u = options.dtype == DType::F8_E4M3 ? reference::kE4M3UnitRoundoff
                   : options.dtype == DType::BF16  ? reference::kBf16UnitRoundoff
                                                   : 0.0;
  EXPECT_LE(err.rms_vs_original, 2 * u * err.rms_reference + testing::kF32KernelRelTol);
  return err;
}

// Every quantised format the cache offers.
std::vector<std::pair<std::string, KvCacheOptions>> quantised_formats(bool latent) {
  std::vector<std::pair<std::string, KvCacheOptions>> formats;
  formats.push_back({"bf16", KvCacheOptions{DType::BF16}});
  for (KvScaleGranularity g : {KvScaleGranularity::PerTensor, KvScaleGranularity::PerHead, KvScaleGranularity::PerBlock})
    for (bool rope_bf16 : latent ? std::vector<bool>{true, false} : std::vector<bool>{true}) {
      KvCacheOptions o;
      o.dtype = DType::F8_E4M3;
      o.scale = g;
      o.mla_rope_bf16 = rope_bf16;
      formats.push_back({"fp8 " + std::string(cpu::kv_scale_granularity_name(g)) +
                             (latent ? (rope_bf16 ? " rope-bf16" : " rope-fp8") : ""),
                         o});
    }
  return formats;
}

// The case on an f32 cache, then on every quantised format.
void run_all_formats(const Case& c, uint32_t seed) {
  {
    SCOPED_TRACE("f32");
    const Errors e = run_case(c, seed);
    EXPECT_LT(e.vs_original, testing::kF32KernelRelTol);
  }
  for (const auto& [name, options] : quantised_formats(c.latent_row)) {
    SCOPED_TRACE(name);
    const Errors e = run_case(c, seed, options);
    EXPECT_GT(e.vs_original, testing::kF32KernelRelTol) << "no quantisation error at all: is the cache really " << name;
  }
}

TEST(PagedAttention, RaggedMixOfPrefillAndDecodeMHA) {
  run_all_formats({4, 4, 16, 16, 16, 0, {{1, 1}, {37, 37}, {70, 1}, {33, 5}}}, 1);
}

TEST(PagedAttention, GQAWithDifferentKAndVHeadDims) {
  run_all_formats({8, 2, 24, 40, 16, 0, {{100, 1}, {17, 17}, {129, 64}}}, 2);
}

TEST(PagedAttention, MQALargeBlocks) {
  run_all_formats({6, 1, 20, 20, 128, 0, {{300, 1}, {5, 5}, {260, 3}}}, 3);
}

TEST(PagedAttention, EveryBlockSize) {
  for (int64_t bs : {16, 32, 64, 128}) {
    SCOPED_TRACE(bs);
    run_all_formats({4, 2, 32, 32, bs, 0, {{bs + 1, 1}, {2 * bs, bs}, {3, 3}}}, uint32_t(10 + bs));
  }
}

// MLA's absorbed form: 6 heads share one 40-wide latent row [c_kv(32) | k_pe(8)] that
// serves as the key, and its first 32 elements as the value.
TEST(PagedAttention, LatentRowSharedByKeyAndValue) {
  Case c{6, 1, 40, 32, 64, 0, {{130, 1}, {70, 70}, {65, 2}}};
  c.latent_row = true;
  run_all_formats(c, 5);
}

// Decode tokens with long contexts: the kernel cuts each token's keys into pieces (split-KV)
// and merges their softmax states; tiles span blocks and pieces start mid-block.
TEST(PagedAttention, LongContextDecodeIsSplitAcrossThreads) {
  run_all_formats({4, 4, 16, 16, 16, 0, {{700, 1}, {333, 1}}}, 6);
}

// The benchmark backbone's shapes (16 query heads of 64): MHA, GQA with groups of 2 and 8
// (the gemm shape with several KV heads), MQA, one decode token each plus a short prefill.
TEST(PagedAttention, BenchShapes) {
  for (int64_t n_kv : {16, 8, 2, 1}) {
    SCOPED_TRACE(n_kv);
    run_case({16, n_kv, 64, 64, 16, 0, {{300, 1}, {50, 1}, {40, 9}}}, uint32_t(20 + n_kv));
  }
}

// More query heads than one pass of the gemm shape takes (16), and a group that is not a
// multiple of 8 (padding lanes); a head count that is not a multiple of 8 on the rows shape.
TEST(PagedAttention, WideAndOddGroups) {
  run_all_formats({40, 1, 24, 24, 32, 0, {{300, 1}, {20, 4}}}, 7);
  run_all_formats({20, 2, 16, 24, 16, 0, {{260, 1}, {30, 30}}}, 8);
  run_all_formats({12, 12, 8, 8, 16, 0, {{500, 1}, {17, 3}}}, 9);
}

// MLA's absorbed decode at DeepSeek's latent width: 16 heads over one 576-wide row (c_kv 512 |
// k_pe 64), the value its first 512 elements.
TEST(PagedAttention, LatentRowDeepSeekWidth) {
  Case c{16, 1, 576, 512, 64, 0, {{400, 1}, {129, 1}, {10, 3}}};
  c.latent_row = true;
  run_all_formats(c, 11);
}

// The gemm shape's AVX2 and AVX-512 small GEMMs (on a machine without AVX-512 both runs take
// AVX2): 16-head chunks, a padded 10-head group, 40 heads (chunks of 16, 16, 8), the bench's
// MQA/GQA-8 shapes and MLA's latent row, each against the reference.
TEST(PagedAttention, GemmShapeAvx2AndAvx512) {
  for (bool avx512 : {false, true}) {
    SCOPED_TRACE(avx512 ? "avx512" : "avx2");
    Case wide{40, 1, 24, 24, 32, 0, {{300, 1}, {20, 4}}};
    Case odd{20, 2, 16, 24, 16, 0, {{260, 1}, {30, 30}}};
    Case latent{16, 1, 576, 512, 64, 0, {{400, 1}, {129, 1}, {10, 3}}};
    latent.latent_row = true;
    Case mqa{16, 1, 64, 64, 16, 0, {{300, 1}, {50, 1}, {40, 9}}};
    Case gqa8{16, 2, 64, 64, 16, 0, {{300, 1}, {50, 1}, {40, 9}}};
    Case odd_dv{16, 1, 20, 37, 16, 0, {{130, 1}, {7, 7}}};  // V columns: 16 + 16 + 5
    uint32_t seed = 30;
    for (Case* c : {&wide, &odd, &latent, &mqa, &gqa8, &odd_dv}) {
      c->allow_avx512 = avx512;
      run_all_formats(*c, seed++);
    }
  }
}

// The gemm shape on AMX tiles (bf16 rows; the query and the weights split into three bf16
// terms): the same f32 tolerance against the reference on the cached rows as the f32 kernels,
// and the AMX-less kernels on the same cases. MLA's latent row with blocks of 16 and 64, MQA,
// groups of 16 over several KV heads and two 16-head chunks per KV head; ragged lengths, so
// split pieces and tiles start mid-block and the last 16-key groups are partial; prefill
// chunks; a sliding window.
TEST(PagedAttention, GemmShapeOnAmxTilesAtF32Accuracy) {
  if (!cpu::amx::available()) GTEST_SKIP() << "this CPU (or OS) has no AMX-BF16";
  Case latent16{16, 1, 576, 512, 16, 0, {{1000, 1}, {129, 1}, {37, 5}, {3, 3}}};
  Case latent64{16, 1, 576, 512, 64, 0, {{700, 1}, {65, 17}}};
  latent16.latent_row = latent64.latent_row = true;
  Case mqa{16, 1, 64, 64, 16, 0, {{1300, 1}, {50, 1}, {40, 9}}};
  Case groups{32, 2, 128, 128, 32, 0, {{517, 1}, {31, 31}, {200, 2}}};
  Case chunks{32, 1, 96, 64, 16, 0, {{800, 1}, {20, 4}}};
  Case window{16, 1, 64, 32, 16, 300, {{900, 1}, {310, 2}}};
  uint32_t seed = 50;
  for (Case* c : {&latent16, &latent64, &mqa, &groups, &chunks, &window})
    for (bool amx : {true, false}) {
      SCOPED_TRACE(::testing::Message() << "n_head " << c->n_head << " n_head_kv " << c->n_head_kv << " dk "
                                      << c->head_dim_qk << (amx ? " amx" : " no amx"));
      c->allow_amx = amx;
      const Errors e = run_case(*c, seed, KvCacheOptions{DType::BF16});
      EXPECT_EQ(e.used_amx, amx);
      EXPECT_GT(e.vs_original, testing::kF32KernelRelTol) << "no bf16 rounding at all: is the cache bf16?";
      ++seed;
    }
}

TEST(PagedAttention, SlidingWindow) {
  run_all_formats({4, 2, 16, 16, 16, 7, {{50, 1}, {40, 40}, {20, 9}}}, 4);
  run_all_formats({16, 1, 32, 32, 16, 300, {{900, 1}, {310, 2}}}, 12);  // split pieces of the window
}

}  // namespace
}  // namespace latentserve
