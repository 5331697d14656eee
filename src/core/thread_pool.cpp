#include "core/thread_pool.h"

#include <algorithm>
#include <cassert>

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
}  // namespace

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0) n_threads = int(std::thread::hardware_concurrency());
  n_threads_ = std::max(n_threads, 1);  // hardware_concurrency() may return 0
  workers_.reserve(size_t(n_threads_ - 1));
  for (int i = 0; i < n_threads_ - 1; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  work_ready_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::worker_loop(int worker_index) {
  uint64_t seen_generation = 0;
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    work_ready_.wait(lock, [&] { return stop_ || generation_ != seen_generation; });
    if (stop_) return;
    seen_generation = generation_;
    // A worker that slept through a whole call (it had no chunk there) simply joins
    // the newest one; a worker with a chunk cannot miss it, as the caller waits for it.
    const size_t chunk_index = size_t(worker_index) + 1;
    if (chunk_index >= chunks_.size()) continue;
    const auto [chunk_begin, chunk_end] = chunks_[chunk_index];
    const auto* job = job_;
    lock.unlock();
    std::exception_ptr error;
    try {
      RunningPoolScope scope(this);
      (*job)(chunk_begin, chunk_end);
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    if (error && !error_) error_ = error;
    if (--pending_ == 0) work_done_.notify_one();
  }
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
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // Even split: the first n_items % n_chunks chunks get one extra item.
    chunks_.clear();
    const int64_t base = n_items / n_chunks, extra = n_items % n_chunks;
    int64_t chunk_begin = begin;
    for (int64_t i = 0; i < n_chunks; ++i) {
      const int64_t chunk_end = chunk_begin + base + (i < extra ? 1 : 0);
      chunks_.emplace_back(chunk_begin, chunk_end);
      chunk_begin = chunk_end;
    }
    assert(chunk_begin == end);
    job_ = &fn;
    pending_ = int(n_chunks - 1);
    error_ = nullptr;
    ++generation_;
  }
  work_ready_.notify_all();

  std::exception_ptr caller_error;
  try {
    RunningPoolScope scope(this);
    fn(chunks_[0].first, chunks_[0].second);  // chunks_ does not change until this call ends
  } catch (...) {
    caller_error = std::current_exception();
  }

  std::exception_ptr error;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    work_done_.wait(lock, [&] { return pending_ == 0; });  // fn must outlive every chunk
    error = caller_error ? caller_error : error_;
    job_ = nullptr;
    chunks_.clear();
    error_ = nullptr;
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace latentserve
