// MLA attention, both paths, against an f64 reference that materialises K and V from
// the latent exactly as the DeepSeek papers write it, over a paged ragged batch; with an
// f32 latent cache and with bf16 / fp8 ones (every scale granularity, k_pe in bf16 or fp8),
// where the reference runs on the dequantised latent (both paths must dequantise what they
// read correctly) and, looser, on the original one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "attention/mla_attention.h"
#include "backend/cpu/cpu_kv_cache.h"
#include "backend/reference/kv_quant_reference.h"
#include "common/tolerance.h"

namespace latentserve {
namespace {

struct Batch {
  std::vector<std::pair<int64_t, int64_t>> seqs;  // (seq_len after this step, new tokens)
};

void check_mla(const MlaShape& s, const Batch& b, int64_t block_size, uint32_t seed,
               const cpu::KvCacheOptions& options = {}) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto fill = [&](std::vector<float>& v) { for (auto& x : v) x = normal(rng); };
  const int64_t nh = s.n_head, r = s.kv_lora_rank, dn = s.qk_nope_head_dim, dr = s.qk_rope_head_dim,
                dv = s.v_head_dim, dq = s.qk_head_dim(), row = s.latent_row();
  std::vector<float> kv_b(static_cast<size_t>(nh * (dn + dv) * r));
  fill(kv_b);
  for (auto& x : kv_b) x *= 0.3f;
  const TensorView kv_b_view = TensorView::contiguous(kv_b.data(), DType::F32, {nh * (dn + dv), r});
  const double scale = 1.0 / std::sqrt(double(dq));

  // Paged layout: every sequence's blocks drawn from a shuffled pool.
  AttentionMetadata meta;
  meta.block_size_tokens = block_size;
  meta.query_start_loc = {0};
  int64_t total_blocks = 0;
  for (auto [len, n_new] : b.seqs) {
    meta.max_blocks_per_seq = std::max(meta.max_blocks_per_seq, (len + block_size - 1) / block_size);
    total_blocks += (len + block_size - 1) / block_size;
  }
  std::vector<int32_t> ids(static_cast<size_t>(total_blocks + 2));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  std::vector<float> latent(ids.size() * size_t(block_size * row));
  fill(latent);
  for (size_t i = 0; i < latent.size(); ++i)  // k_pe at a larger scale than c_kv, as in real checkpoints
    if (int64_t(i) % row >= r) latent[i] *= 8.0f;
  // The latent cache: every slot written (slot order, a block per write), then decoded.
  const int64_t n_slots = int64_t(ids.size()) * block_size;
  cpu::CpuKvCache cache(AttentionSpec::latent(nh, r, dn, dr, dv), 1, int64_t(ids.size()), block_size, options);
  std::vector<int64_t> all_slots(static_cast<size_t>(n_slots));
  std::iota(all_slots.begin(), all_slots.end(), 0);
  for (int64_t b0 = 0; b0 < n_slots; b0 += block_size)
    cache.write(0, &latent[size_t(b0 * row)], row, nullptr, 0, &all_slots[size_t(b0)], block_size);
  const std::vector<float> latent_hat = reference::kv_gather(cache.k_rows(0), all_slots, 0, row);
  meta.block_tables.assign(b.seqs.size() * size_t(meta.max_blocks_per_seq), -1);
  size_t next = 0;
  int64_t n_tokens = 0;
  for (size_t i = 0; i < b.seqs.size(); ++i) {
    auto [len, n_new] = b.seqs[i];
    for (int64_t k = 0; k < (len + block_size - 1) / block_size; ++k)
      meta.block_tables[i * size_t(meta.max_blocks_per_seq) + size_t(k)] = ids[next++];
    n_tokens += n_new;
    meta.query_start_loc.push_back(int32_t(n_tokens));
    meta.seq_lens.push_back(int32_t(len));
    for (int64_t p = len - n_new; p < len; ++p)
      meta.slot_mapping.push_back(int64_t(meta.block_tables[i * size_t(meta.max_blocks_per_seq) + size_t(p / block_size)]) *
                                      block_size + p % block_size);
  }
  std::vector<float> q(static_cast<size_t>(n_tokens * nh * dq));
  fill(q);

  // f64 reference: K_h = [W_UK[h] c | k_pe], V_h = W_UV[h] c.
  auto reference_on = [&](const std::vector<float>& lat) {
    std::vector<double> expected(static_cast<size_t>(n_tokens * nh * dv));
    for (size_t i = 0; i < b.seqs.size(); ++i) {
      auto [len, n_new] = b.seqs[i];
      auto row_of = [&](int64_t pos) {
        return &lat[size_t((int64_t(meta.block_tables[i * size_t(meta.max_blocks_per_seq) + size_t(pos / block_size)]) *
                                   block_size + pos % block_size) * row)];
      };
      for (int64_t j = 0; j < n_new; ++j) {
        const int64_t t = meta.query_start_loc[i] + j, pos = len - n_new + j;
        for (int64_t h = 0; h < nh; ++h) {
          const float* qh = &q[size_t((t * nh + h) * dq)];
          std::vector<double> w(static_cast<size_t>(pos + 1));
          double max_w = -INFINITY;
          for (int64_t u = 0; u <= pos; ++u) {
            const float* lat = row_of(u);
            double score = 0;
            for (int64_t d = 0; d < dn; ++d) {
              double k = 0;
              for (int64_t c = 0; c < r; ++c) k += double(kv_b[size_t((h * (dn + dv) + d) * r + c)]) * lat[c];
              score += double(qh[d]) * k;
            }
            for (int64_t d = 0; d < dr; ++d) score += double(qh[dn + d]) * lat[r + d];
            w[size_t(u)] = score * scale;
            max_w = std::max(max_w, w[size_t(u)]);
          }
          double total = 0;
          for (auto& x : w) total += (x = std::exp(x - max_w));
          for (int64_t d = 0; d < dv; ++d) {
            double o = 0;
            for (int64_t u = 0; u <= pos; ++u) {
              double v = 0;
              for (int64_t c = 0; c < r; ++c) v += double(kv_b[size_t((h * (dn + dv) + dn + d) * r + c)]) * row_of(u)[c];
              o += w[size_t(u)] * v;
            }
            expected[size_t((t * nh + h) * dv + d)] = o / total;
          }
        }
      }
    }
    return expected;
  };
  const std::vector<double> expected = reference_on(latent_hat), expected_original = reference_on(latent);

  ThreadPool pool(2);
  MlaAttention mla(s, kv_b_view, float(scale));
  std::vector<float> naive(expected.size(), std::nanf("")), absorbed(expected.size(), std::nanf(""));
  if (options.dtype == DType::F32) {  // the raw f32 pointer form
    mla.forward(MlaPath::Naive, q.data(), meta, latent.data(), naive.data(), pool);
    mla.forward(MlaPath::Absorbed, q.data(), meta, latent.data(), absorbed.data(), pool);
  } else {
    mla.forward(MlaPath::Naive, q.data(), meta, cache.k_rows(0), naive.data(), pool);
    mla.forward(MlaPath::Absorbed, q.data(), meta, cache.k_rows(0), absorbed.data(), pool);
  }
  double ref_max = 0, err_naive = 0, err_absorbed = 0, err_between = 0, sq_err_original = 0, sq_ref = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    ASSERT_FALSE(std::isnan(naive[i]) || std::isnan(absorbed[i])) << "output " << i << " not written";
    ref_max = std::max(ref_max, std::abs(expected[i]));
    err_naive = std::max(err_naive, std::abs(naive[i] - expected[i]));
    err_absorbed = std::max(err_absorbed, std::abs(absorbed[i] - expected[i]));
    err_between = std::max(err_between, std::abs(double(naive[i]) - double(absorbed[i])));
    sq_err_original += (absorbed[i] - expected_original[i]) * (absorbed[i] - expected_original[i]);
    sq_ref += expected_original[i] * expected_original[i];
  }
  EXPECT_LE(err_naive / ref_max, 1e-5) << "naive vs f64 reference on the cached latent";
  EXPECT_LE(err_absorbed / ref_max, 1e-5) << "absorbed vs f64 reference on the cached latent";
  EXPECT_LE(err_between / ref_max, 1e-5) << "naive vs absorbed";
  // vs the original latent: RMS error within twice the format's unit roundoff of the RMS output
  // (a sanity budget, as in tests/backend/paged_attention_test.cpp)
  const double u = options.dtype == DType::F8_E4M3 ? reference::kE4M3UnitRoundoff
                   : options.dtype == DType::BF16  ? reference::kBf16UnitRoundoff
                                                   : 1e-6;
  EXPECT_LE(std::sqrt(sq_err_original), 2 * u * std::sqrt(sq_ref)) << "absorbed vs f64 reference on the original latent";
  if (options.dtype != DType::F32) {
    EXPECT_GT(std::sqrt(sq_err_original), 1e-6 * std::sqrt(sq_ref)) << "not quantised?";
  }
}

std::vector<std::pair<std::string, cpu::KvCacheOptions>> latent_formats() {
  std::vector<std::pair<std::string, cpu::KvCacheOptions>> formats = {{"bf16", {DType::BF16}}};
  for (auto g : {cpu::KvScaleGranularity::PerTensor, cpu::KvScaleGranularity::PerHead, cpu::KvScaleGranularity::PerBlock})
    for (bool rope_bf16 : {true, false}) {
      cpu::KvCacheOptions o;
      o.dtype = DType::F8_E4M3;
      o.scale = g;
      o.mla_rope_bf16 = rope_bf16;
      const std::string name = "fp8 " + std::string(cpu::kv_scale_granularity_name(g));
      formats.push_back({name + (rope_bf16 ? " rope-bf16" : " rope-fp8"), o});
    }
  return formats;
}

TEST(MlaAttention, BothPathsReadQuantisedLatentCaches) {
  for (const auto& [name, options] : latent_formats()) {
    SCOPED_TRACE(name);
    check_mla({3, 20, 6, 4, 5}, {{{1, 1}, {37, 37}, {70, 1}, {20, 6}}}, 16, 1, options);
    check_mla({4, 48, 16, 8, 12}, {{{130, 1}, {9, 9}, {65, 3}}}, 64, 2, options);
  }
}

TEST(MlaAttention, BothPathsMatchTheReferenceOnARaggedPagedBatch) {
  check_mla({3, 20, 6, 4, 5}, {{{1, 1}, {37, 37}, {70, 1}, {20, 6}}}, 16, 1);
}

TEST(MlaAttention, RankLargerThanHeadDimsAndBigBlocks) {
  check_mla({4, 48, 16, 8, 12}, {{{130, 1}, {9, 9}, {65, 3}}}, 64, 2);
}

}  // namespace
}  // namespace latentserve
