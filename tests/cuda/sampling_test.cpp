// GPU token choice against the CPU: argmax_rows (first index on ties, NaN never wins) and
// sample_rows against the real CPU Sampler (src/sampling/sampler.h) given the same u — the
// test copies the request's SamplerRng, draws u from the copy and hands the GPU that exact
// f64 draw (uniform_f64) while the Sampler draws the same value from the original.
// Parameters are f32 values (temperature 0.7f, ...) so the CPU's f64 copies of them are
// exactly what the GPU reads.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "backend/cuda/sampling.h"
#include "core/error.h"
#include "cuda/gpu_test_util.h"
#include "sampling/sampler.h"
#include "sampling/sampling_params.h"

namespace latentserve {
namespace {

using testing::to_device;
using testing::to_host;

void sync() { ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess); }

int32_t host_argmax(const float* row, int vocab) {
  int32_t best = -1;
  for (int i = 0; i < vocab; ++i)
    if (!std::isnan(row[i]) && (best < 0 || row[i] > row[best])) best = i;
  return best < 0 ? 0 : best;
}

TEST(CudaArgmax, PicksTheFirstLargestAndNeverNaN) {
  LS_REQUIRE_GPU();
  for (int vocab : {1, 3, 5, 1001, 4099, 128256})
    for (int rows : {1, 6}) {
      std::mt19937 rng(uint32_t(vocab + rows));
      std::normal_distribution<float> d(0.0f, 3.0f);
      std::vector<float> logits(size_t(rows) * size_t(vocab));
      for (auto& v : logits) v = d(rng);
      if (vocab > 5 && rows > 1) {
        float* r1 = &logits[size_t(vocab)];
        r1[3] = 50.0f;  // a tie: the lower id wins
        r1[vocab - 2] = 50.0f;
        logits[size_t(2 * vocab) + 7] = std::nanf("");     // NaN never wins
        logits[size_t(2 * vocab) + 8] = INFINITY;           // +inf does
        for (int i = 0; i < vocab; ++i) logits[size_t(3 * vocab + i)] = std::nanf("");  // all NaN: 0
        for (int i = 0; i < vocab; ++i) logits[size_t(4 * vocab + i)] = -INFINITY;      // all -inf: 0
        logits[size_t(4 * vocab) + 2] = std::nanf("");
        for (int i = 0; i < vocab; ++i) logits[size_t(5 * vocab + i)] = std::round(logits[size_t(5 * vocab + i)]);
      }
      auto dl = to_device(logits);
      auto out = to_device(std::vector<int32_t>(size_t(rows), -7));
      cuda::argmax_rows(dl.as<float>(), rows, vocab, out.as<int32_t>(), nullptr);
      sync();
      const auto got = to_host<int32_t>(out, size_t(rows));
      for (int r = 0; r < rows; ++r) {
        int32_t want = host_argmax(&logits[size_t(r) * size_t(vocab)], vocab);
        if (r == 4 && vocab > 5) want = 0;  // every non-NaN is -inf: the first -inf
        EXPECT_EQ(got[size_t(r)], want) << "vocab " << vocab << " row " << r;
      }
    }
  float* null = nullptr;
  EXPECT_THROW(cuda::argmax_rows(null, 1, 10, nullptr, nullptr), Error);
  auto d = to_device(std::vector<float>(10, 1.0f));
  EXPECT_THROW(cuda::argmax_rows(d.as<float>(), 1, 0, reinterpret_cast<int32_t*>(d.data()), nullptr), Error);
  EXPECT_THROW(cuda::argmax_rows(d.as<float>(), -1, 10, reinterpret_cast<int32_t*>(d.data()), nullptr), Error);
}

struct RowParams {
  float temperature;
  int32_t top_k;
  float top_p, min_p;
};

// The GPU sampler on n rows of logits with per-row params and u; returns the tokens.
std::vector<int32_t> gpu_sample(const std::vector<float>& logits, int vocab, const std::vector<RowParams>& params,
                                const std::vector<double>& u, int* flag_out = nullptr, int ctas_per_row = 0) {
  const int n = int(params.size());
  std::vector<float> t, tp, mp;
  std::vector<int32_t> tk;
  for (const auto& p : params) {
    t.push_back(p.temperature);
    tk.push_back(p.top_k);
    tp.push_back(p.top_p);
    mp.push_back(p.min_p);
  }
  std::vector<float> u32(u.begin(), u.end());
  auto dl = to_device(logits), dt = to_device(t), dk = to_device(tk), dp = to_device(tp), dm = to_device(mp),
       du = to_device(u), du32 = to_device(u32), flag = to_device(std::vector<int>{0});
  auto out = to_device(std::vector<int32_t>(size_t(n), -7));
  cuda::DeviceBuffer ws(cuda::sample_rows_workspace_bytes(n, vocab));
  cuda::SampleRowsParams sp{dl.as<float>(), n, vocab, dt.as<float>(), dk.as<int32_t>(), dp.as<float>(),
                            dm.as<float>(), du32.as<float>(), out.as<int32_t>(), ws.data(), ws.bytes()};
  sp.uniform_f64 = du.as<double>();
  sp.invalid_row_flag = flag.as<int>();
  sp.ctas_per_row = ctas_per_row;
  cuda::sample_rows(sp, nullptr);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  if (flag_out) *flag_out = to_host<int>(flag, 1)[0];
  return to_host<int32_t>(out, size_t(n));
}

TEST(CudaSampleRows, EqualsTheCpuSamplerForTheSameDraw) {
  LS_REQUIRE_GPU();
  const std::vector<RowParams> grid = {
      {1.0f, 0, 1.0f, 0.0f},   {0.7f, 0, 1.0f, 0.0f},   {1.3f, 50, 1.0f, 0.0f}, {0.8f, 1, 1.0f, 0.0f},
      {1.0f, 0, 0.9f, 0.0f},   {0.6f, 0, 0.5f, 0.0f},   {1.0f, 40, 0.95f, 0.0f}, {1.0f, 0, 1.0f, 0.05f},
      {0.9f, 20, 0.8f, 0.02f}, {1.5f, 0, 0.999f, 0.0f}, {1.0f, 7, 1.0f, 0.3f},  {0.25f, 0, 0.6f, 0.1f},
      {1.0f, 0, 0.05f, 0.0f},  {2.0f, 1000, 0.97f, 0.0f}};
  Sampler sampler;
  int mismatches = 0, checked = 0;
  for (int vocab : {1, 2, 17, 1000, 5003, 32000, 128256})
    for (bool ties : {false, true}) {
      std::mt19937 rng(uint32_t(vocab * 2 + ties));
      std::normal_distribution<float> d(0.0f, 2.5f);
      const int n = int(grid.size()) * 3;
      std::vector<float> logits(size_t(n) * size_t(vocab));
      for (auto& v : logits) v = ties ? std::round(d(rng) * 2.0f) / 2.0f : d(rng);  // ties: many equal logits
      if (vocab > 10) logits[5] = -INFINITY;  // a -inf token is never sampled
      std::vector<RowParams> params;
      std::vector<double> u;
      std::vector<int32_t> want;
      for (int r = 0; r < n; ++r) {
        const RowParams rp = grid[size_t(r) % grid.size()];
        params.push_back(rp);
        SamplingParams sp;
        sp.temperature = double(rp.temperature);
        sp.top_k = rp.top_k;
        sp.top_p = double(rp.top_p);
        sp.min_p = double(rp.min_p);
        SamplerRng request_rng(uint64_t(1000 * vocab + r));
        SamplerRng copy = request_rng;
        u.push_back(copy.next_uniform());
        const std::span<const float> row(&logits[size_t(r) * size_t(vocab)], size_t(vocab));
        want.push_back(sampler.sample(row, sp, {}, {}, request_rng).token);
      }
      // 0: the launch's own choice (one CTA per row for these small batches); 1, 3, 8: a row
      // split over a cluster, CTAs past the vocab's end included (3: not a power of two)
      for (int ctas : {0, 1, 3, 8}) {
        const auto got = gpu_sample(logits, vocab, params, u, nullptr, ctas);
        for (int r = 0; r < n; ++r) {
          ++checked;
          if (got[size_t(r)] != want[size_t(r)]) {
            ++mismatches;
            const RowParams& rp = params[size_t(r)];
            ADD_FAILURE() << "vocab " << vocab << (ties ? " (ties)" : "") << " ctas_per_row " << ctas << " row " << r
                          << ": temperature " << rp.temperature << " top_k " << rp.top_k << " top_p " << rp.top_p
                          << " min_p " << rp.min_p << " u " << u[size_t(r)] << ": GPU " << got[size_t(r)] << ", CPU "
                          << want[size_t(r)];
          }
        }
      }
    }
  EXPECT_EQ(mismatches, 0) << "of " << checked << " rows";
}

TEST(CudaSampleRows, ManyDrawsOfOneRowFollowTheCpu) {
  LS_REQUIRE_GPU();
  // One distribution, many u: every boundary of the inverse CDF is crossed.
  const int vocab = 300, n = 512;
  std::mt19937 rng(5);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> row(vocab);
  for (auto& v : row) v = d(rng);
  std::vector<float> logits;
  for (int r = 0; r < n; ++r) logits.insert(logits.end(), row.begin(), row.end());
  Sampler sampler;
  for (const RowParams rp : {RowParams{1.0f, 0, 1.0f, 0.0f}, RowParams{0.8f, 30, 0.9f, 0.01f}}) {
    std::vector<RowParams> params(size_t(n), rp);
    std::vector<double> u;
    std::vector<int32_t> want;
    for (int r = 0; r < n; ++r) {
      SamplerRng request_rng(uint64_t(r), 3);
      SamplerRng copy = request_rng;
      u.push_back(copy.next_uniform());
      SamplingParams sp;
      sp.temperature = rp.temperature;
      sp.top_k = rp.top_k;
      sp.top_p = rp.top_p;
      sp.min_p = rp.min_p;
      want.push_back(sampler.sample(row, sp, {}, {}, request_rng).token);
    }
    for (int ctas : {0, 8}) {
      const auto got = gpu_sample(logits, vocab, params, u, nullptr, ctas);
      for (int r = 0; r < n; ++r)
        ASSERT_EQ(got[size_t(r)], want[size_t(r)]) << "draw " << r << " u " << u[size_t(r)] << " top_k " << rp.top_k
                                                    << " top_p " << rp.top_p << " ctas_per_row " << ctas;
    }
  }
}

TEST(CudaSampleRows, TemperatureZeroIsArgmaxAndBadRowsAreFlagged) {
  LS_REQUIRE_GPU();
  const int vocab = 128256, n = 4;
  std::mt19937 rng(9);
  std::normal_distribution<float> d(0.0f, 3.0f);
  std::vector<float> logits(size_t(n) * vocab);
  for (auto& v : logits) v = d(rng);
  logits[17] = 40.0f;
  logits[1000] = 40.0f;  // tie: 17
  const std::vector<RowParams> params(size_t(n), RowParams{0.0f, 5, 0.5f, 0.1f});
  int flag = -1;
  auto got = gpu_sample(logits, vocab, params, std::vector<double>(size_t(n), 0.5), &flag);
  for (int r = 0; r < n; ++r) EXPECT_EQ(got[size_t(r)], host_argmax(&logits[size_t(r) * vocab], vocab)) << "row " << r;
  EXPECT_EQ(flag, 0);
  // A NaN in a sampled row: skipped, and flagged (the CPU Sampler throws there).
  logits[size_t(vocab) + 3] = std::nanf("");
  got = gpu_sample(logits, vocab, std::vector<RowParams>(size_t(n), RowParams{1.0f, 0, 1.0f, 0.0f}),
                   std::vector<double>(size_t(n), 0.25), &flag);
  EXPECT_EQ(flag, 1);
  EXPECT_NE(got[1], 3);
}

TEST(CudaSampleRows, BadParametersThrow) {
  LS_REQUIRE_GPU();
  auto d = to_device(std::vector<float>(64, 0.5f));
  float* f = d.as<float>();
  cuda::SampleRowsParams ok{f, 1, 8, f, reinterpret_cast<const int32_t*>(f), f, f, f, reinterpret_cast<int32_t*>(f + 32), nullptr, 0};
  cuda::SampleRowsParams p = ok;
  p.logits = nullptr;
  EXPECT_THROW(cuda::sample_rows(p, nullptr), Error);
  p = ok;
  p.uniform = nullptr;
  EXPECT_THROW(cuda::sample_rows(p, nullptr), Error);
  p = ok;
  p.vocab = 0;
  EXPECT_THROW(cuda::sample_rows(p, nullptr), Error);
  p = ok;
  p.n_rows = -1;
  EXPECT_THROW(cuda::sample_rows(p, nullptr), Error);
  p = ok;
  p.out = nullptr;
  EXPECT_THROW(cuda::sample_rows(p, nullptr), Error);
  p = ok;
  p.ctas_per_row = 9;  // beyond the portable cluster size
  EXPECT_THROW(cuda::sample_rows(p, nullptr), Error);
  p.ctas_per_row = -1;
  EXPECT_THROW(cuda::sample_rows(p, nullptr), Error);
}

TEST(CudaSampleRows, CtasPerRowFollowTheBatch) {  // host arithmetic only
  EXPECT_EQ(cuda::sample_rows_ctas_per_row(1, 128256, 3), 3);
  EXPECT_EQ(cuda::sample_rows_ctas_per_row(1, 1000), 1);    // one chunk of logits: one CTA
  EXPECT_EQ(cuda::sample_rows_ctas_per_row(1, 10000), 2);   // >= 4096 logits per CTA
  EXPECT_EQ(cuda::sample_rows_ctas_per_row(256, 128256), 1);
}

}  // namespace
}  // namespace latentserve
