#include "kernels/cpu/memory_bandwidth.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "core/thread_pool.h"

namespace kvik {
namespace {

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

// Sum of the slice with 8 independent accumulators, so the loop is bound by loads, not by one add chain.
uint64_t read_slice(const uint64_t* p, size_t n) {
  uint64_t a[8] = {};
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) a[k] += p[i + k];
  for (; i < n; ++i) a[0] += p[i];
  uint64_t s = 0;
  for (uint64_t v : a) s += v;
  return s;
}

}  // namespace

double measure_memory_bandwidth_gbs() {
  constexpr size_t kBytes = size_t{256} << 20;  // ≫ any last-level cache
  const size_t n = kBytes / sizeof(uint64_t);
  std::unique_ptr<uint64_t, FreeDeleter> buf(static_cast<uint64_t*>(std::aligned_alloc(64, kBytes)));
  if (!buf) return 0.0;
  ThreadPool& pool = ThreadPool::global();
  // First touch by the threads that will read (pages land near them), and a value the sum cannot predict.
  pool.run([&](int i, int nt) {
    const size_t b = n * i / nt, e = n * (i + 1) / nt;
    for (size_t k = b; k < e; ++k) buf.get()[k] = k * 0x9e3779b97f4a7c15ull;
  });
  std::vector<uint64_t> sink(static_cast<size_t>(pool.num_threads()));
  double best = 0.0;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    pool.run([&](int i, int nt) {
      const size_t b = n * i / nt, e = n * (i + 1) / nt;
      sink[i] += read_slice(buf.get() + b, e - b);
    });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, static_cast<double>(kBytes) / s / 1e9);
  }
  volatile uint64_t keep = 0;
  for (uint64_t v : sink) keep = keep + v;
  return best;
}

}  // namespace kvik
