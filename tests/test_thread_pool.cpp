#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <numeric>
#include <set>
#include <thread>

#include "core/thread_pool.h"

using namespace kvik;

TEST(ThreadPool, EveryIndexOnceAcrossManyJobs) {
  for (int threads : {1, 2, 3, 4}) {
    ThreadPool pool(threads);
    for (int job = 0; job < 2000; ++job) {
      const int64_t n = job % 37;
      std::vector<std::atomic<int>> hits(n);
      pool.parallel_for(n, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) hits[i]++;
      });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "threads " << threads << " job " << job;
      std::atomic<int64_t> sum{0};
      pool.parallel_for_dynamic(n * 3, 2, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) sum += i;
      });
      ASSERT_EQ(sum.load(), (n * 3) * (n * 3 - 1) / 2);
    }
  }
}

// The balanced split hands out every index exactly once, also when one thread is slow and the others steal from
// the back of its range (the slow thread's first chunk sleeps), and stealing really happens.
TEST(ThreadPool, BalancedSplitEveryIndexOnceWithStealing) {
  for (int threads : {1, 2, 3, 4}) {
    ThreadPool pool(threads);
    for (int64_t n : {0, 1, 2, 5, 16, 37, 100, 1000, 4099}) {
      std::vector<std::atomic<int>> hits(n);
      std::atomic<int> calls{0};
      pool.parallel_for_balanced(n, [&](int64_t b, int64_t e) {
        ASSERT_LT(b, e);
        ++calls;
        if (b == 0 && n >= 100) std::this_thread::sleep_for(std::chrono::milliseconds(20));
        for (int64_t i = b; i < e; ++i) hits[i]++;
      });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "threads " << threads << " n " << n << " i " << i;
    }
    // Range 0 is slow (every chunk of it sleeps): the threads done with their own ranges must take part of it,
    // so more than one thread runs range 0's indices.
    if (threads > 1) {
      const int64_t n = 1024, range0 = n / threads;
      std::vector<std::thread::id> by(n);
      pool.parallel_for_balanced(n, [&](int64_t b, int64_t e) {
        if (b < range0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
        for (int64_t i = b; i < e; ++i) by[i] = std::this_thread::get_id();
      });
      std::set<std::thread::id> ran_range0(by.begin(), by.begin() + range0);
      EXPECT_GE(ran_range0.size(), 2u) << "threads " << threads << ": nobody helped with the slow range";
    }
  }
}

TEST(ThreadPool, ResizeAndConcurrentCallersDoNotDeadlock) {
  ThreadPool pool(2);
  std::atomic<int64_t> total{0};
  auto work = [&] {
    for (int i = 0; i < 500; ++i) pool.parallel_for(64, [&](int64_t b, int64_t e) { total += e - b; });
  };
  std::thread a(work), b(work);
  a.join();
  b.join();
  EXPECT_EQ(total.load(), 2 * 500 * 64);
  pool.set_num_threads(3);
  EXPECT_EQ(pool.num_threads(), 3);
  pool.parallel_for(10, [&](int64_t b, int64_t e) { total += e - b; });
  EXPECT_EQ(total.load(), 2 * 500 * 64 + 10);
}
