// A persistent pool of worker threads for the kernels. The calling thread takes part, so `--threads 2` means
// the caller plus one worker. Workers spin briefly after a job (the next op usually follows within
// microseconds) and then sleep on a futex, so an idle or oversubscribed machine is not burned by spinning.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace kvik {

class ThreadPool {
 public:
  // The process-wide pool used by the kernels (default: one thread per core).
  static ThreadPool& global();

  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }
  void set_num_threads(int n);  // 0 = hardware concurrency; not while a job runs

  // Runs fn(thread_index, num_threads) on every thread of the pool and returns when all are done.
  void run(const std::function<void(int, int)>& fn);

  // Splits [0, n) into contiguous equal ranges, one per thread: fn(begin, end).
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn);
  // As parallel_for (contiguous ranges, one per thread, taken front to back in chunks), but a thread that is
  // done takes chunks from the back of the others' ranges: streams stay sequential, and a thread slowed by
  // the machine (a descheduled vCPU) is helped instead of waited for.
  void parallel_for_balanced(int64_t n, const std::function<void(int64_t, int64_t)>& fn);
  // Hands out [0, n) in chunks from a shared counter (for uneven work): fn(begin, end).
  void parallel_for_dynamic(int64_t n, int64_t chunk, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void start(int n);
  void stop();
  void worker(int index, uint32_t start_generation);

  int num_threads_ = 1;
  std::vector<std::thread> workers_;
  std::mutex run_mu_;  // one job at a time; a concurrent caller runs its job inline
  const std::function<void(int, int)>* job_ = nullptr;
  // 32-bit so that waiting is a plain futex on the word itself.
  std::atomic<uint32_t> generation_{0};
  std::atomic<uint32_t> pending_{0};
  std::atomic<bool> stopping_{false};
};

}  // namespace kvik
