// How the CPU ops split work across the thread pool, shared by ops.cpp and paged_attention.cpp.
#pragma once

#include <cstdint>
#include <vector>

#include "core/thread_pool.h"

namespace kvik::cpu_detail {

// Grows a per-thread scratch buffer; after warm-up no step allocates.
template <typename T>
T* scratch(std::vector<T>& buf, size_t n) {
  if (buf.size() < n) buf.resize(n);
  return buf.data();
}

// Rows of the weight handled per task: enough work per task to amortise scheduling, small enough for balance.
constexpr int64_t kRowsPerTask = 16;
// Multiply-adds below which an op is not worth splitting across threads.
constexpr int64_t kMinParallelWork = int64_t{1} << 20;

// Runs fn(begin, end) over [0, n) on the pool, or inline when the op is too small to be worth waking it.
template <typename Fn>
void split(int64_t n, int64_t work, Fn&& fn) {
  if (work < kMinParallelWork || n == 1)
    fn(int64_t{0}, n);
  else
    ThreadPool::global().parallel_for(n, fn);
}

template <typename Fn>
void split_balanced(int64_t n, int64_t work, Fn&& fn) {
  if (work < kMinParallelWork || n == 1)
    fn(int64_t{0}, n);
  else
    ThreadPool::global().parallel_for_balanced(n, fn);
}

}  // namespace kvik::cpu_detail
