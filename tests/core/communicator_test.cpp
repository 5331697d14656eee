// InProcessGroup: the collectives tensor-parallel ranks call, run as threads. Checked
// against sums and copies computed here, in f64 and in the documented rank order.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "core/communicator.h"

namespace latentserve {
namespace {

// Runs fn(rank) on one thread per rank and joins them.
template <typename Fn>
void on_every_rank(int n_ranks, Fn fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < n_ranks; ++r) threads.emplace_back(fn, r);
  for (auto& t : threads) t.join();
}

std::vector<float> random_floats(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = u(rng);
  return v;
}

TEST(InProcessGroup, AllReduceSumGivesEveryRankTheSameBitsOfTheRankOrderSum) {
  for (int n_ranks : {1, 2, 3, 4}) {
    for (int64_t n : {0, 1, 3, 1000, 4099}) {  // fewer elements than ranks, and uneven slices
      InProcessGroup group(n_ranks);
      std::vector<std::vector<float>> data(static_cast<size_t>(n_ranks));
      for (int r = 0; r < n_ranks; ++r) data[size_t(r)] = random_floats(n, 100u * uint32_t(n_ranks) + uint32_t(r));
      const auto inputs = data;
      on_every_rank(n_ranks, [&](int r) { group.rank(r).all_reduce_sum(data[size_t(r)].data(), n); });
      for (int64_t i = 0; i < n; ++i) {
        float rank_order = inputs[0][size_t(i)];
        double exact = inputs[0][size_t(i)];
        for (int r = 1; r < n_ranks; ++r) {
          rank_order += inputs[size_t(r)][size_t(i)];
          exact += inputs[size_t(r)][size_t(i)];
        }
        for (int r = 0; r < n_ranks; ++r) {
          ASSERT_EQ(std::memcmp(&data[size_t(r)][size_t(i)], &rank_order, sizeof(float)), 0)
              << n_ranks << " ranks, element " << i << " of rank " << r;
        }
        ASSERT_NEAR(rank_order, exact, 1e-5) << "element " << i;
      }
    }
  }
}

TEST(InProcessGroup, ManyCollectivesInARowStayInStep) {
  const int n_ranks = 4;
  InProcessGroup group(n_ranks);
  std::vector<double> totals(n_ranks, 0.0);
  on_every_rank(n_ranks, [&](int r) {
    for (int step = 0; step < 200; ++step) {
      std::vector<float> x(size_t(1 + step % 7), float(r + 1) * float(step + 1));
      group.rank(r).all_reduce_sum(x.data(), int64_t(x.size()));
      for (float v : x) totals[size_t(r)] += v;
    }
  });
  double expected = 0;  // every element of step s sums (1 + 2 + 3 + 4) * (s + 1)
  for (int step = 0; step < 200; ++step) expected += double(1 + step % 7) * 10.0 * double(step + 1);
  for (double t : totals) EXPECT_DOUBLE_EQ(t, expected);
}

TEST(InProcessGroup, AllGatherColumnsAssemblesUnevenBlocks) {
  const int n_ranks = 4;
  const int64_t rows = 3, total = 10;  // columns split 2, 3, 2, 3 (tp_split of 10 over 4)
  const int64_t begin[] = {0, 2, 5, 7, 10};
  InProcessGroup group(n_ranks);
  std::vector<float> full = random_floats(rows * total, 7);
  std::vector<std::vector<float>> out(n_ranks, std::vector<float>(size_t(rows * total), -1.0f));
  on_every_rank(n_ranks, [&](int r) {
    const int64_t cols = begin[r + 1] - begin[r];
    std::vector<float> local(size_t(rows * cols));
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t c = 0; c < cols; ++c) local[size_t(i * cols + c)] = full[size_t(i * total + begin[r] + c)];
    group.rank(r).all_gather_columns(local.data(), rows, begin[r], cols, total, out[size_t(r)].data());
  });
  for (int r = 0; r < n_ranks; ++r) EXPECT_EQ(out[size_t(r)], full) << "rank " << r;
}

TEST(InProcessGroup, AbortReleasesTheRanksWaitingInACollective) {
  const int n_ranks = 3;
  InProcessGroup group(n_ranks);
  std::vector<int> aborted(n_ranks, 0);
  on_every_rank(n_ranks, [&](int r) {
    if (r == 2) {  // fails before its collective, as a rank whose forward threw would
      group.abort();
      return;
    }
    std::vector<float> x(8, 1.0f);
    try {
      group.rank(r).all_reduce_sum(x.data(), 8);
    } catch (const CollectiveAborted&) {
      aborted[size_t(r)] = 1;
    }
  });
  EXPECT_EQ(aborted[0], 1);
  EXPECT_EQ(aborted[1], 1);
  group.reset();  // usable again once every rank has returned
  std::vector<std::vector<float>> x(n_ranks, std::vector<float>(5, 2.0f));
  on_every_rank(n_ranks, [&](int r) { group.rank(r).all_reduce_sum(x[size_t(r)].data(), 5); });
  for (const auto& v : x) EXPECT_EQ(v, std::vector<float>(5, 6.0f));
}

TEST(InProcessGroup, MismatchedCallsNameTheRanksAndBadArgumentsThrow) {
  InProcessGroup group(2);
  std::vector<std::string> errors(2);
  on_every_rank(2, [&](int r) {
    std::vector<float> x(size_t(4 + r), 1.0f);
    try {
      group.rank(r).all_reduce_sum(x.data(), int64_t(x.size()));
    } catch (const Error& e) {
      errors[size_t(r)] = e.what();
    }
  });
  EXPECT_NE(errors[0].find("rank 0 reduces 4 elements but rank 1 reduces 5"), std::string::npos) << errors[0];
  EXPECT_NE(errors[1].find("rank 1 reduces 5 elements but rank 0 reduces 4"), std::string::npos) << errors[1];
  EXPECT_THROW(InProcessGroup(0), Error);
  EXPECT_THROW(group.rank(2), Error);
}

}  // namespace
}  // namespace latentserve
