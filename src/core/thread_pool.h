#pragma once
// A small fixed-size thread pool for data-parallel loops over the CPU kernels.
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace latentserve {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);  // n_threads <= 0: hardware concurrency
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Threads that run chunks, the caller of parallel_for included (n_threads - 1 workers).
  int n_threads() const { return n_threads_; }

  // Splits [begin, end) into at most n_threads contiguous chunks of at least
  // `min_chunk` items and runs fn(chunk_begin, chunk_end) on each; the calling
  // thread takes a chunk too. Returns when all chunks are done; an exception
  // thrown by fn is re-thrown here (one of them, when several chunks throw), after
  // every chunk has finished.
  // Calls from several threads take turns; a call made from inside fn on the same
  // pool runs its whole range on the calling thread instead of deadlocking.
  void parallel_for(int64_t begin, int64_t end, const std::function<void(int64_t, int64_t)>& fn,
                    int64_t min_chunk = 1);

 private:
  void worker_loop(int worker_index);

  int n_threads_;
  std::vector<std::thread> workers_;
  std::mutex call_mutex_;  // one parallel_for at a time
  std::mutex mutex_;       // guards everything below
  std::condition_variable work_ready_;
  std::condition_variable work_done_;
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  std::vector<std::pair<int64_t, int64_t>> chunks_;  // chunk 0 is the caller's, chunk i+1 worker i's
  uint64_t generation_ = 0;  // bumped once per parallel_for that uses the workers
  int pending_ = 0;          // worker chunks not finished yet
  std::exception_ptr error_;
  bool stop_ = false;
};

}  // namespace latentserve
