#include <gtest/gtest.h>

#include <atomic>
#include <numeric>
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
