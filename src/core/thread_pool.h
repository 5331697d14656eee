#pragma once
// A small fixed-size thread pool for data-parallel loops over the CPU kernels.
//
// Hand-off is through atomics, not a mutex: the caller posts each worker's chunk into that
// worker's slot and bumps the slot's ticket; a worker that has just finished a chunk spins
// (bounded, kSpinMicroseconds, pausing and yielding) on its ticket before it blocks on a
// condition variable, and the caller spins on the pending count the same way before it
// blocks. A decode step makes ~90 back-to-back calls (tiny-bench, counted); under this
// hypervisor a futex wake-up costs tens of microseconds (an empty call on 2 threads took
// ~50 us through mutex + condition variable, ~1 us now: bench/bench_thread_pool.cpp), so
// those calls should never sleep. The spin is bounded and yields, so an idle pool goes
// back to sleeping at once and oversubscribed cores (tests run in parallel) still progress.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace latentserve {

class ThreadPool {
 public:
  // How long a worker waits for its next chunk, and the caller for the workers, spinning
  // before it blocks.
  static constexpr int64_t kSpinMicroseconds = 50;

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
  // One worker's mailbox. The caller writes job/begin/end and then bumps ticket (release);
  // the worker reads them after seeing the new ticket (acquire), runs the chunk, stores
  // error and then decrements pending_ (release). The caller touches a slot again only
  // after pending_ reached 0, so job/begin/end/error need no lock.
  struct alignas(64) Slot {
    std::atomic<uint64_t> ticket{0};
    std::atomic<bool> sleeping{false};  // the worker is (about to be) blocked on wake
    std::condition_variable wake;
    const std::function<void(int64_t, int64_t)>* job = nullptr;
    int64_t begin = 0, end = 0;
    std::exception_ptr error;
  };

  void worker_loop(int worker_index);
  void wait_for_workers();

  int n_threads_;
  std::unique_ptr<Slot[]> slots_;  // slot i is worker i's
  std::vector<std::thread> workers_;
  std::mutex call_mutex_;  // one parallel_for at a time
  std::mutex sleep_mutex_;  // only the blocking fallbacks (and stop_) take it
  std::condition_variable done_;
  alignas(64) std::atomic<int> pending_{0};  // worker chunks of the current call not finished yet
  std::atomic<bool> caller_sleeping_{false};  // the caller is (about to be) blocked on done_
  std::atomic<bool> stop_{false};
};

}  // namespace latentserve
