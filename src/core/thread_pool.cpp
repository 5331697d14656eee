#include "core/thread_pool.h"

#include <algorithm>
#include <cassert>
#include <chrono>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace latentserve {

namespace {
// The pool whose chunk this thread is running now (nullptr outside parallel_for):
// lets a nested parallel_for on the same pool run inline instead of waiting on itself.
thread_local const ThreadPool* t_running_pool = nullptr;

struct RunningPoolScope {
  const ThreadPool* saved;
  explicit RunningPoolScope(const ThreadPool* pool) : saved(t_running_pool) { t_running_pool = pool; }
  ~RunningPoolScope() { t_running_pool = saved; }
};

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

// Polls ready() for about ThreadPool::kSpinMicroseconds; true as soon as it holds, false
// when the time ran out (the caller then blocks).
template <class Ready>
bool spin_until(const Ready& ready) {
  if (ready()) return true;
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::microseconds(ThreadPool::kSpinMicroseconds);
  for (;;) {
    for (int i = 0; i < 16; ++i) {  // 16 pauses (tens of ns each) between clock reads
      cpu_relax();
      if (ready()) return true;
    }
    if (Clock::now() >= deadline) return ready();
    std::this_thread::yield();  // lets a thread with work have this core when cores are oversubscribed
  }
}
}  // namespace

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0) n_threads = int(std::thread::hardware_concurrency());
  n_threads_ = std::max(n_threads, 1);  // hardware_concurrency() may return 0
  slots_ = std::make_unique<Slot[]>(size_t(n_threads_ - 1));
  workers_.reserve(size_t(n_threads_ - 1));
  for (int i = 0; i < n_threads_ - 1; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(sleep_mutex_);
    stop_.store(true);
  }
  for (int i = 0; i < n_threads_ - 1; ++i) slots_[size_t(i)].wake.notify_one();
  for (auto& w : workers_) w.join();
}

void ThreadPool::worker_loop(int worker_index) {
  Slot& slot = slots_[size_t(worker_index)];
  uint64_t seen_ticket = 0;
  for (;;) {
    const auto posted = [&] {
      return slot.ticket.load(std::memory_order_acquire) != seen_ticket || stop_.load(std::memory_order_relaxed);
    };
    if (!spin_until(posted)) {
      std::unique_lock<std::mutex> lock(sleep_mutex_);
      // seq_cst store then seq_cst load of ticket, against the caller's seq_cst ticket store
      // then seq_cst load of sleeping: at least one side sees the other, so no lost wake-up.
      slot.sleeping.store(true);
      slot.wake.wait(lock, [&] { return slot.ticket.load() != seen_ticket || stop_.load(); });
      slot.sleeping.store(false, std::memory_order_relaxed);
    }
    if (stop_.load(std::memory_order_relaxed)) return;  // the destructor runs with no call in flight
    seen_ticket = slot.ticket.load(std::memory_order_acquire);
    try {
      RunningPoolScope scope(this);
      (*slot.job)(slot.begin, slot.end);
    } catch (...) {
      slot.error = std::current_exception();
    }
    // The last worker to finish wakes the caller if it went to sleep (same pairing as above).
    if (pending_.fetch_sub(1) == 1 && caller_sleeping_.load()) {
      { std::lock_guard<std::mutex> lock(sleep_mutex_); }
      done_.notify_one();
    }
  }
}

void ThreadPool::wait_for_workers() {
  const auto done = [&] { return pending_.load(std::memory_order_acquire) == 0; };
  if (spin_until(done)) return;
  std::unique_lock<std::mutex> lock(sleep_mutex_);
  caller_sleeping_.store(true);
  done_.wait(lock, [&] { return pending_.load() == 0; });
  caller_sleeping_.store(false, std::memory_order_relaxed);
}

void ThreadPool::parallel_for(int64_t begin, int64_t end, const std::function<void(int64_t, int64_t)>& fn,
                              int64_t min_chunk) {
  if (end <= begin) return;
  const int64_t n_items = end - begin;
  min_chunk = std::max<int64_t>(min_chunk, 1);
  const int64_t n_chunks = std::min<int64_t>(n_threads_, std::max<int64_t>(n_items / min_chunk, 1));
  if (n_chunks == 1 || t_running_pool == this) {
    fn(begin, end);
    return;
  }

  std::lock_guard<std::mutex> call_lock(call_mutex_);
  // Even split: the first n_items % n_chunks chunks get one extra item. Chunk 0 is the
  // caller's, chunk i + 1 worker i's; workers past n_chunks - 1 are not touched.
  const int64_t base = n_items / n_chunks, extra = n_items % n_chunks;
  const auto chunk_end_of = [&](int64_t chunk_begin, int64_t i) { return chunk_begin + base + (i < extra ? 1 : 0); };
  const int64_t caller_end = chunk_end_of(begin, 0);
  pending_.store(int(n_chunks - 1), std::memory_order_relaxed);
  int64_t chunk_begin = caller_end;
  for (int64_t i = 1; i < n_chunks; ++i) {
    Slot& slot = slots_[size_t(i - 1)];
    slot.job = &fn;
    slot.begin = chunk_begin;
    slot.end = chunk_begin = chunk_end_of(chunk_begin, i);
    slot.ticket.fetch_add(1);  // seq_cst: publishes job/begin/end (and pending_) to the worker
    if (slot.sleeping.load()) {
      { std::lock_guard<std::mutex> lock(sleep_mutex_); }
      slot.wake.notify_one();
    }
  }
  assert(chunk_begin == end);

  std::exception_ptr error;
  try {
    RunningPoolScope scope(this);
    fn(begin, caller_end);
  } catch (...) {
    error = std::current_exception();
  }
  wait_for_workers();  // fn must outlive every chunk
  for (int64_t i = 1; i < n_chunks; ++i) {
    Slot& slot = slots_[size_t(i - 1)];
    if (slot.error && !error) error = slot.error;
    slot.error = nullptr;
    slot.job = nullptr;
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace latentserve
