#include "core/thread_pool.h"

#include <immintrin.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>

namespace kvik {
namespace {
constexpr int kSpinIterations = 4000;  // ~10-20 µs of pause instructions before sleeping
thread_local bool t_in_pool_job = false;

// Sleeps while *word == expected (returns at once if it already differs, or spuriously).
void futex_wait(std::atomic<uint32_t>& word, uint32_t expected) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAIT_PRIVATE, expected, nullptr, nullptr, 0);
}
void futex_wake_all(std::atomic<uint32_t>& word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAKE_PRIVATE, INT32_MAX, nullptr, nullptr, 0);
}
}  // namespace

ThreadPool& ThreadPool::global() {
  static ThreadPool pool(0);
  return pool;
}

ThreadPool::ThreadPool(int num_threads) { start(num_threads); }
ThreadPool::~ThreadPool() { stop(); }

void ThreadPool::start(int n) {
  if (n <= 0) n = std::max(1u, std::thread::hardware_concurrency());
  num_threads_ = n;
  stopping_ = false;
  // Workers start from the current generation: a job posted before a worker first runs is still seen.
  const uint32_t g0 = generation_.load(std::memory_order_acquire);
  for (int i = 1; i < n; ++i) workers_.emplace_back([this, i, g0] { worker(i, g0); });
}

void ThreadPool::stop() {
  stopping_ = true;
  generation_.fetch_add(1, std::memory_order_release);
  futex_wake_all(generation_);
  for (auto& t : workers_) t.join();
  workers_.clear();
}

void ThreadPool::set_num_threads(int n) {
  std::lock_guard<std::mutex> lock(run_mu_);
  if (n <= 0) n = std::max(1u, std::thread::hardware_concurrency());
  if (n == num_threads_) return;
  stop();
  start(n);
}

void ThreadPool::worker(int index, uint32_t seen) {
  while (true) {
    uint32_t g = seen;
    for (int i = 0; i < kSpinIterations && (g = generation_.load(std::memory_order_acquire)) == seen; ++i) _mm_pause();
    while (g == seen) {
      futex_wait(generation_, seen);
      g = generation_.load(std::memory_order_acquire);
    }
    seen = g;
    if (stopping_.load(std::memory_order_acquire)) return;
    t_in_pool_job = true;
    (*job_)(index, num_threads_);
    t_in_pool_job = false;
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) futex_wake_all(pending_);
  }
}

void ThreadPool::run(const std::function<void(int, int)>& fn) {
  if (num_threads_ == 1 || t_in_pool_job) {
    fn(0, 1);
    return;
  }
  std::unique_lock<std::mutex> lock(run_mu_, std::try_to_lock);
  if (!lock.owns_lock()) {  // another thread is using the pool: do the work here, alone
    fn(0, 1);
    return;
  }
  job_ = &fn;
  pending_.store(num_threads_ - 1, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  futex_wake_all(generation_);
  t_in_pool_job = true;
  fn(0, num_threads_);
  t_in_pool_job = false;
  uint32_t left = pending_.load(std::memory_order_acquire);
  for (int i = 0; i < kSpinIterations && left != 0; ++i) {
    _mm_pause();
    left = pending_.load(std::memory_order_acquire);
  }
  while (left != 0) {
    futex_wait(pending_, left);
    left = pending_.load(std::memory_order_acquire);
  }
  job_ = nullptr;
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  run([&](int t, int nt) {
    const int64_t begin = n * t / nt, end = n * (t + 1) / nt;
    if (begin < end) fn(begin, end);
  });
}

void ThreadPool::parallel_for_balanced(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  if (n >= (int64_t{1} << 31)) return parallel_for(n, fn);
  // Per thread: the unclaimed part of its range, front in the low and back in the high 32 bits.
  struct alignas(64) Range {
    std::atomic<uint64_t> fb;
  };
  constexpr int kMaxThreads = 64;
  Range ranges[kMaxThreads];
  const int nt = std::min(num_threads_, kMaxThreads);
  if (nt == 1) return fn(0, n);
  for (int t = 0; t < nt; ++t)
    ranges[t].fb.store(static_cast<uint64_t>(n * t / nt) | static_cast<uint64_t>(n * (t + 1) / nt) << 32,
                       std::memory_order_relaxed);
  const int64_t chunk = std::max<int64_t>(1, n / (16 * nt));
  // Claims up to `chunk` unclaimed indices [b, e) of a range, from its front (the owner) or its back (a thief).
  const auto claim = [chunk](std::atomic<uint64_t>& range, bool from_back, int64_t& b, int64_t& e) {
    for (uint64_t v = range.load(std::memory_order_relaxed);;) {
      const int64_t front = static_cast<uint32_t>(v), back = static_cast<uint32_t>(v >> 32);
      if (front >= back) return false;
      b = from_back ? std::max(front, back - chunk) : front;
      e = from_back ? back : std::min(back, front + chunk);
      const uint64_t rest = from_back ? static_cast<uint64_t>(front) | static_cast<uint64_t>(b) << 32
                                      : static_cast<uint64_t>(e) | static_cast<uint64_t>(back) << 32;
      if (range.compare_exchange_weak(v, rest, std::memory_order_relaxed)) return true;
    }
  };
  run([&](int t, int nt_run) {
    if (nt_run == 1) return fn(0, n);  // run inline (the pool was busy): all of it here
    if (t >= nt) return;
    int64_t b, e;
    while (claim(ranges[t].fb, false, b, e)) fn(b, e);  // own range, front to back
    for (int k = 1; k < nt; ++k)                        // then the others', from the back
      while (claim(ranges[(t + k) % nt].fb, true, b, e)) fn(b, e);
  });
}

void ThreadPool::parallel_for_dynamic(int64_t n, int64_t chunk, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  std::atomic<int64_t> next{0};
  run([&](int, int) {
    while (true) {
      const int64_t begin = next.fetch_add(chunk, std::memory_order_relaxed);
      if (begin >= n) break;
      fn(begin, std::min(n, begin + chunk));
    }
  });
}

}  // namespace kvik
