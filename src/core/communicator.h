#pragma once
// Communicator: the collectives a tensor-parallel rank needs (all-reduce after the
// row-parallel layers, all-gather of the vocab-parallel logits).
//
// InProcessGroup runs the ranks as threads of one process over shared host memory: the
// path CI exercises on the CPU (docs/tensor-parallel.md). A multi-GPU build would put
// NCCL behind the same interface; none is written yet (no multi-GPU machine to test on).
//
// Every rank must make the same calls in the same order with the same sizes. When one rank
// fails mid-step it calls abort(); every rank waiting in a collective then throws an Error
// (CollectiveAborted) instead of waiting forever, and reset() (once every rank has returned) makes the group
// usable again.
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "core/error.h"

namespace latentserve {

// What a rank waiting in a collective throws when another rank of its group failed.
class CollectiveAborted : public Error {
 public:
  CollectiveAborted() : Error("another tensor-parallel rank failed; this collective was abandoned") {}
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // data[n] <- the sum over ranks of every rank's data[n]. Every rank gets the same bits
  // (the sum is taken in rank order), so replicated state stays replicated.
  virtual void all_reduce_sum(float* data, int64_t n) = 0;
  // Rank r holds local[rows, cols_r], columns [col_begin_r, col_begin_r + cols_r) of a
  // [rows, total_cols] matrix; afterwards out[rows, total_cols] on every rank holds all of it.
  // The ranks' column ranges must tile [0, total_cols) without overlap.
  virtual void all_gather_columns(const float* local, int64_t rows, int64_t col_begin, int64_t cols,
                                  int64_t total_cols, float* out) = 0;
};

class InProcessGroup {
 public:
  explicit InProcessGroup(int n_ranks);  // n_ranks >= 1
  ~InProcessGroup();
  InProcessGroup(const InProcessGroup&) = delete;
  InProcessGroup& operator=(const InProcessGroup&) = delete;

  int size() const { return n_ranks_; }
  Communicator& rank(int r);
  // Wakes every rank waiting in a collective with an Error (one rank failed).
  void abort();
  // Clears an abort; only while no rank is inside a collective.
  void reset();

 private:
  class Rank;
  friend class Rank;
  struct Contribution {
    const float* data = nullptr;
    int64_t n = 0, rows = 0, col_begin = 0, cols = 0, total_cols = 0;
  };
  // Waits until all n_ranks_ have arrived; throws CollectiveAborted if the group was aborted.
  void barrier();

  int n_ranks_;
  std::vector<std::unique_ptr<Rank>> ranks_;
  std::vector<Contribution> posted_;  // [rank]: what each rank offers to the current collective
  std::vector<float> reduced_;        // all_reduce_sum's result, each rank summing its slice
  std::mutex mutex_;
  std::condition_variable arrived_;
  int waiting_ = 0;
  uint64_t generation_ = 0;
  bool aborted_ = false;
};

}  // namespace latentserve
