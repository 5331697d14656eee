#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace latentserve {
namespace {

struct Chunk {
  int64_t begin, end;
  std::thread::id thread;
};

// Runs one parallel_for and records every chunk it made.
std::vector<Chunk> run_and_record(ThreadPool& pool, int64_t begin, int64_t end, int64_t min_chunk) {
  std::mutex m;
  std::vector<Chunk> chunks;
  pool.parallel_for(
      begin, end,
      [&](int64_t b, int64_t e) {
        std::lock_guard<std::mutex> lock(m);
        chunks.push_back({b, e, std::this_thread::get_id()});
      },
      min_chunk);
  return chunks;
}

TEST(ThreadPool, CoversTheRangeExactlyOnceInBoundedChunks) {
  for (int n_threads : {1, 2, 3, 4, 7}) {
    ThreadPool pool(n_threads);
    for (int64_t begin : {int64_t(0), int64_t(-5), int64_t(1000)}) {
      for (int64_t n : {1, 2, 3, 5, 8, 13, 100, 1001}) {
        for (int64_t min_chunk : {1, 2, 10, 500}) {
          auto chunks = run_and_record(pool, begin, begin + n, min_chunk);
          std::vector<int> hits(size_t(n), 0);
          for (const auto& c : chunks) {
            ASSERT_LT(c.begin, c.end);
            if (chunks.size() > 1) {
              ASSERT_GE(c.end - c.begin, min_chunk);
            }
            for (int64_t i = c.begin; i < c.end; ++i) ++hits[size_t(i - begin)];
          }
          for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[size_t(i)], 1) << "index " << begin + i;
          ASSERT_LE(chunks.size(), size_t(n_threads));
          // Each chunk runs on its own thread, and the caller runs one of them.
          std::set<std::thread::id> threads;
          bool caller_ran_one = false;
          for (const auto& c : chunks) {
            threads.insert(c.thread);
            caller_ran_one |= c.thread == std::this_thread::get_id();
          }
          EXPECT_EQ(threads.size(), chunks.size());
          EXPECT_TRUE(caller_ran_one);
        }
      }
    }
  }
}

TEST(ThreadPool, UsesAllThreadsWhenThereIsEnoughWork) {
  ThreadPool pool(4);
  EXPECT_EQ(run_and_record(pool, 0, 1000, 1).size(), 4u);
  EXPECT_EQ(run_and_record(pool, 0, 1000, 300).size(), 3u);  // 1000 / 300 chunks of >= 300
}

TEST(ThreadPool, EmptyRangeCallsNothing) {
  ThreadPool pool(3);
  int calls = 0;
  pool.parallel_for(5, 5, [&](int64_t, int64_t) { ++calls; });
  pool.parallel_for(5, 2, [&](int64_t, int64_t) { ++calls; });
  EXPECT_EQ(calls, 0);
}

TEST(ThreadPool, NonPositiveCountMeansHardwareConcurrency) {
  const int hw = std::max(1, int(std::thread::hardware_concurrency()));
  EXPECT_EQ(ThreadPool(0).n_threads(), hw);
  EXPECT_EQ(ThreadPool(-3).n_threads(), hw);
  EXPECT_EQ(ThreadPool(5).n_threads(), 5);
}

// Sum of i^2 over [0, n), checked against the closed form n(n-1)(2n-1)/6.
TEST(ThreadPool, ManyRepeatedCallsGiveTheSerialResult) {
  ThreadPool pool(4);
  for (int round = 0; round < 5000; ++round) {
    const int64_t n = 1 + round % 97;
    std::atomic<int64_t> sum{0};
    pool.parallel_for(0, n, [&](int64_t b, int64_t e) {
      int64_t local = 0;
      for (int64_t i = b; i < e; ++i) local += i * i;
      sum += local;
    });
    ASSERT_EQ(sum.load(), n * (n - 1) * (2 * n - 1) / 6) << "round " << round;
  }
}

TEST(ThreadPool, ExceptionFromAWorkerChunkIsRethrownAndPoolStaysUsable) {
  ThreadPool pool(4);
  for (int round = 0; round < 50; ++round) {
    std::atomic<int> finished{0};
    EXPECT_THROW(pool.parallel_for(0, 4,
                                   [&](int64_t b, int64_t) {
                                     if (b == 3) throw std::runtime_error("chunk 3 failed");  // a worker's chunk
                                     ++finished;
                                   }),
                 std::runtime_error);
    EXPECT_EQ(finished.load(), 3);  // the other chunks still ran to the end
  }
  std::atomic<int64_t> sum{0};
  pool.parallel_for(0, 100, [&](int64_t b, int64_t e) { sum += e - b; });
  EXPECT_EQ(sum.load(), 100);
}

TEST(ThreadPool, ExceptionFromTheCallersChunkIsRethrown) {
  ThreadPool pool(3);
  try {
    pool.parallel_for(0, 3, [&](int64_t b, int64_t) {
      if (b == 0) throw std::invalid_argument("caller chunk");
    });
    FAIL() << "expected an exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "caller chunk");
  }
  // Every chunk throwing: one of the exceptions comes out.
  EXPECT_THROW(pool.parallel_for(0, 3, [](int64_t, int64_t) { throw std::runtime_error("all"); }),
               std::runtime_error);
  // Single-chunk path (runs inline) propagates too.
  EXPECT_THROW(pool.parallel_for(0, 1, [](int64_t, int64_t) { throw std::runtime_error("one"); }),
               std::runtime_error);
}

TEST(ThreadPool, NestedCallOnTheSamePoolRunsInline) {
  ThreadPool pool(3);
  std::atomic<int64_t> total{0};
  pool.parallel_for(0, 3, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      pool.parallel_for(0, 10, [&](int64_t ib, int64_t ie) { total += ie - ib; });
  });
  EXPECT_EQ(total.load(), 30);
}

TEST(ThreadPool, CallsFromSeveralThreadsTakeTurns) {
  ThreadPool pool(3);
  std::atomic<int64_t> total{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < 3; ++t)
    callers.emplace_back([&] {
      for (int round = 0; round < 300; ++round)
        pool.parallel_for(0, 30, [&](int64_t b, int64_t e) { total += e - b; });
    });
  for (auto& c : callers) c.join();
  EXPECT_EQ(total.load(), 3 * 300 * 30);
}

// Back-to-back calls that alternate between throwing and not, on the caller's chunk and on
// workers' chunks, with varying chunk counts (so some workers sit out some calls): every
// call either throws or gives the serial sum, and a throwing call still ran every chunk.
TEST(ThreadPool, BackToBackCallsWithExceptionsKeepEveryCallSeparate) {
  for (int n_threads : {2, 3, 4}) {
    ThreadPool pool(n_threads);
    for (int round = 0; round < 3000; ++round) {
      const int64_t n = 1 + round % 7;  // 1 .. 7 items: 1 .. n_threads chunks
      const int64_t thrower = round % 3 == 0 ? round % n : -1;  // the item whose chunk throws
      std::atomic<int64_t> items{0};
      bool threw = false;
      try {
        pool.parallel_for(0, n, [&](int64_t b, int64_t e) {
          items += e - b;
          if (thrower >= b && thrower < e) throw std::runtime_error("item " + std::to_string(thrower));
        });
      } catch (const std::runtime_error& e) {
        threw = true;
        ASSERT_EQ(std::string(e.what()), "item " + std::to_string(thrower)) << "round " << round;
      }
      ASSERT_EQ(threw, thrower >= 0) << "round " << round;
      ASSERT_EQ(items.load(), n) << "round " << round;  // every chunk ran, thrower or not
    }
  }
}

// Nested calls back to back: each outer chunk makes many inner calls, which run inline on
// that chunk's thread; an exception from an inner call comes out of the outer one.
TEST(ThreadPool, ManyNestedCallsRunInlineOnTheChunksThread) {
  ThreadPool pool(3);
  for (int round = 0; round < 500; ++round) {
    std::atomic<int64_t> total{0};
    std::atomic<int> off_thread{0};
    pool.parallel_for(0, 3, [&](int64_t b, int64_t e) {
      const auto me = std::this_thread::get_id();
      for (int64_t i = b; i < e; ++i)
        for (int k = 0; k < 5; ++k)
          pool.parallel_for(0, 10, [&](int64_t ib, int64_t ie) {
            if (std::this_thread::get_id() != me) ++off_thread;
            total += ie - ib;
          });
    });
    ASSERT_EQ(total.load(), 3 * 5 * 10) << "round " << round;
    ASSERT_EQ(off_thread.load(), 0) << "round " << round;
  }
  EXPECT_THROW(pool.parallel_for(0, 3,
                                 [&](int64_t b, int64_t) {
                                   pool.parallel_for(0, 4, [&](int64_t, int64_t) {
                                     if (b == 2) throw std::runtime_error("inner");
                                   });
                                 }),
               std::runtime_error);
}

// Calls spaced further apart than the workers spin, so every call has to wake sleeping
// workers (the blocking fall-back), mixed with back-to-back ones.
TEST(ThreadPool, CallsAfterTheWorkersWentToSleepStillRun) {
  ThreadPool pool(3);
  for (int round = 0; round < 40; ++round) {
    if (round % 2 == 0)
      std::this_thread::sleep_for(std::chrono::microseconds(4 * ThreadPool::kSpinMicroseconds));
    std::atomic<int64_t> sum{0};
    std::set<std::thread::id> threads;
    std::mutex m;
    pool.parallel_for(0, 300, [&](int64_t b, int64_t e) {
      // Longer than the caller spins, so the caller's blocking wait is exercised too.
      if (b != 0) std::this_thread::sleep_for(std::chrono::microseconds(3 * ThreadPool::kSpinMicroseconds));
      sum += e - b;
      std::lock_guard<std::mutex> lock(m);
      threads.insert(std::this_thread::get_id());
    });
    ASSERT_EQ(sum.load(), 300) << "round " << round;
    ASSERT_EQ(threads.size(), 3u) << "round " << round;
  }
}

// A pool destroyed right after a call, with its workers still spinning or just gone to sleep.
TEST(ThreadPool, DestroyedRightAfterACall) {
  for (int round = 0; round < 200; ++round) {
    ThreadPool pool(1 + round % 4);
    std::atomic<int64_t> sum{0};
    pool.parallel_for(0, 8, [&](int64_t b, int64_t e) { sum += e - b; });
    ASSERT_EQ(sum.load(), 8);
    if (round % 3 == 0) std::this_thread::sleep_for(std::chrono::microseconds(2 * ThreadPool::kSpinMicroseconds));
  }
}

// Several calling threads taking turns while chunks throw.
TEST(ThreadPool, CallsFromSeveralThreadsWithExceptions) {
  ThreadPool pool(3);
  std::atomic<int64_t> total{0}, thrown{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < 3; ++t)
    callers.emplace_back([&, t] {
      for (int round = 0; round < 300; ++round) {
        try {
          pool.parallel_for(0, 30, [&](int64_t b, int64_t e) {
            total += e - b;
            if ((round + t) % 4 == 0 && b != 0) throw std::runtime_error("worker chunk");
          });
        } catch (const std::runtime_error&) {
          ++thrown;
        }
      }
    });
  for (auto& c : callers) c.join();
  EXPECT_EQ(total.load(), 3 * 300 * 30);
  EXPECT_EQ(thrown.load(), 3 * 75);
}

}  // namespace
}  // namespace latentserve
