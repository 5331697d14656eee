#include "core/communicator.h"

#include <algorithm>
#include <cstring>


namespace latentserve {

class InProcessGroup::Rank final : public Communicator {
 public:
  Rank(InProcessGroup& group, int rank) : group_(group), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return group_.n_ranks_; }

  void all_reduce_sum(float* data, int64_t n) override {
    InProcessGroup& g = group_;
    if (n < 0) fail("all_reduce_sum on rank {}: n must be >= 0, found {}", rank_, n);
    g.posted_[size_t(rank_)] = {data, n};
    g.barrier();  // every rank's data is posted
    for (int r = 0; r < g.n_ranks_; ++r)
      if (g.posted_[size_t(r)].n != n)
        fail("all_reduce_sum: rank {} reduces {} elements but rank {} reduces {}", rank_, n, r, g.posted_[size_t(r)].n);
    if (rank_ == 0) g.reduced_.resize(size_t(n));
    g.barrier();  // reduced_ is sized
    // This rank sums its slice of the elements over every rank, in rank order.
    const int64_t begin = n * rank_ / g.n_ranks_, end = n * (rank_ + 1) / g.n_ranks_;
    for (int64_t i = begin; i < end; ++i) {
      float sum = g.posted_[0].data[i];
      for (int r = 1; r < g.n_ranks_; ++r) sum += g.posted_[size_t(r)].data[i];
      g.reduced_[size_t(i)] = sum;
    }
    g.barrier();  // every slice is summed; nobody reads the inputs any more
    if (n > 0) std::memcpy(data, g.reduced_.data(), size_t(n) * sizeof(float));  // (data may be null at n = 0)
    g.barrier();  // every rank has its copy: reduced_ may be reused
  }

  void all_gather_columns(const float* local, int64_t rows, int64_t col_begin, int64_t cols, int64_t total_cols,
                          float* out) override {
    InProcessGroup& g = group_;
    if (rows < 0 || cols < 0 || col_begin < 0 || col_begin + cols > total_cols)
      fail("all_gather_columns on rank {}: columns [{}, {}) of {} (rows {}) are not a range of the matrix", rank_,
           col_begin, col_begin + cols, total_cols, rows);
    g.posted_[size_t(rank_)] = {local, 0, rows, col_begin, cols, total_cols};
    g.barrier();
    int64_t covered = 0;
    for (int r = 0; r < g.n_ranks_; ++r) {
      const Contribution& c = g.posted_[size_t(r)];
      if (c.rows != rows || c.total_cols != total_cols)
        fail("all_gather_columns: rank {} gathers [{}, {}] but rank {} gathers [{}, {}]", rank_, rows, total_cols, r,
             c.rows, c.total_cols);
      covered += c.cols;
      if (c.cols == 0) continue;
      for (int64_t i = 0; i < rows; ++i)
        std::memcpy(out + i * total_cols + c.col_begin, c.data + i * c.cols, size_t(c.cols) * sizeof(float));
    }
    if (covered != total_cols)
      fail("all_gather_columns: the ranks' column ranges cover {} of {} columns", covered, total_cols);
    g.barrier();  // every rank has read every contribution
  }

 private:
  InProcessGroup& group_;
  int rank_;
};

InProcessGroup::InProcessGroup(int n_ranks) : n_ranks_(n_ranks) {
  if (n_ranks < 1) fail("a communicator group needs at least one rank, found {}", n_ranks);
  posted_.resize(size_t(n_ranks));
  for (int r = 0; r < n_ranks; ++r) ranks_.push_back(std::make_unique<Rank>(*this, r));
}

InProcessGroup::~InProcessGroup() = default;

Communicator& InProcessGroup::rank(int r) {
  if (r < 0 || r >= n_ranks_) fail("rank {} is outside the group of {} ranks", r, n_ranks_);
  return *ranks_[size_t(r)];
}

void InProcessGroup::barrier() {
  std::unique_lock lock(mutex_);
  if (aborted_) throw CollectiveAborted();
  const uint64_t generation = generation_;
  if (++waiting_ == n_ranks_) {
    waiting_ = 0;
    ++generation_;
    arrived_.notify_all();
    return;
  }
  arrived_.wait(lock, [&] { return generation_ != generation || aborted_; });
  if (generation_ == generation) throw CollectiveAborted();
}

void InProcessGroup::abort() {
  std::lock_guard lock(mutex_);
  aborted_ = true;
  arrived_.notify_all();
}

void InProcessGroup::reset() {
  std::lock_guard lock(mutex_);
  aborted_ = false;
  waiting_ = 0;
  ++generation_;
}

}  // namespace latentserve
