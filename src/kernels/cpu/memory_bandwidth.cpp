#include "kernels/cpu/memory_bandwidth.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>

#include "core/thread_pool.h"
#include "kernels/cpu/cpu_kernels.h"

namespace kvik {
namespace {

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

constexpr int64_t kChunk = int64_t{64} << 10;  // the interleaved pattern's unit

// Twice the last-level cache, at least 512 MiB and at most 1 GiB (a VM may report a socket's whole L3, of which it
// holds a slice), a whole number of chunks per thread.
int64_t probe_bytes(int threads) {
  const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  const int64_t bytes =
      std::clamp<int64_t>(2 * static_cast<int64_t>(std::max(l3, 0L)), int64_t{512} << 20, int64_t{1} << 30);
  const int64_t unit = kChunk * threads;
  return (bytes + unit - 1) / unit * unit;
}

struct Reader {
  const uint8_t* buf;
  int64_t bytes;
  std::vector<uint64_t>& sink;

  // Best GB/s of three passes over the buffer by `threads` pool threads (the others idle).
  double best(int threads, bool interleaved, StreamLoad how) const {
    const auto sum = cpu_kernels().stream_sum;
    ThreadPool& pool = ThreadPool::global();
    double best = 0.0;
    for (int rep = 0; rep < 3; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      pool.run([&](int i, int) {
        if (i >= threads) return;
        if (interleaved) {
          for (int64_t c = i * kChunk; c < bytes; c += threads * kChunk) sink[i] += sum(buf + c, kChunk, how);
        } else {
          const int64_t b = bytes / kChunk * i / threads * kChunk, e = bytes / kChunk * (i + 1) / threads * kChunk;
          sink[i] += sum(buf + b, e - b, how);
        }
      });
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      best = std::max(best, static_cast<double>(bytes) / s / 1e9);
    }
    return best;
  }
};

}  // namespace

MemoryProbe probe_memory_bandwidth() {
  ThreadPool& pool = ThreadPool::global();
  const int nt = pool.num_threads();
  MemoryProbe probe;
  probe.buffer_bytes = probe_bytes(nt);
  const auto n = static_cast<size_t>(probe.buffer_bytes);
  std::unique_ptr<uint8_t, FreeDeleter> buf(static_cast<uint8_t*>(std::aligned_alloc(4096, n)));
  if (!buf) return probe;
  // First touch by the threads that read the slices (pages land near them), with values the sums cannot predict.
  pool.run([&](int i, int t) {
    auto* w = reinterpret_cast<uint64_t*>(buf.get());
    const size_t words = n / 8, b = words * i / t, e = words * (i + 1) / t;
    for (size_t k = b; k < e; ++k) w[k] = k * 0x9e3779b97f4a7c15ull;
  });
  std::vector<uint64_t> sink(static_cast<size_t>(nt));
  const Reader r{buf.get(), probe.buffer_bytes, sink};
  const struct {
    const char* name;
    bool interleaved;
    StreamLoad how;
  } kinds[] = {{"slices/plain", false, StreamLoad::kPlain},
               {"slices/nontemporal", false, StreamLoad::kNonTemporal},
               {"slices/prefetch", false, StreamLoad::kPrefetch},
               {"interleaved/plain", true, StreamLoad::kPlain}};
  for (int threads : {nt, 1}) {
    for (const auto& k : kinds) {
      if (threads == 1 && k.interleaved) continue;  // one thread: the same as its slice
      if (threads == 1 && nt == 1) break;           // measured already
      const double gbs = r.best(threads, k.interleaved, k.how);
      probe.patterns.push_back({k.name, threads, gbs});
      double& best = threads == nt ? probe.best_gbs : probe.one_thread_gbs;
      best = std::max(best, gbs);
    }
  }
  if (nt == 1) probe.one_thread_gbs = probe.best_gbs;
  volatile uint64_t keep = 0;
  for (uint64_t v : sink) keep = keep + v;
  return probe;
}

double measure_memory_bandwidth_gbs() { return probe_memory_bandwidth().best_gbs; }

}  // namespace kvik
