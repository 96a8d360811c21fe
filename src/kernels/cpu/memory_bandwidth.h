// What this machine's memory can stream, for the batch-1 decode roofline that `kvik bench` reports: decode reads
// every weight once per token, so tokens/s ≤ bandwidth ÷ bytes of weights read per token.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kvik {

// One way of reading the probe's buffer and the best GB/s (1 GB = 1e9 bytes) it streamed.
struct MemoryPattern {
  std::string name;  // e.g. "slices/plain": how the threads split the buffer / how they load
  int threads = 0;
  double gbs = 0.0;
};

struct MemoryProbe {
  int64_t buffer_bytes = 0;
  std::vector<MemoryPattern> patterns;
  double best_gbs = 0.0;        // the fastest pattern on all threads: the roofline's bandwidth
  double one_thread_gbs = 0.0;  // the fastest pattern on one thread
};

// Streams a buffer larger than the last-level cache (twice it, 512 MiB to 1 GiB) with the kernel table's widest
// loads in several patterns, three times each, on all threads of the global pool and on one:
//   slices/plain        each thread its own contiguous slice (as the matmuls split weight rows), plain loads;
//   slices/nontemporal  the same with non-temporal loads;
//   slices/prefetch     the same with a software prefetch 1 KiB ahead;
//   interleaved/plain   64 KiB chunks dealt round-robin to the threads (neighbouring threads in neighbouring pages).
// About a second, a fifth of it the first touch of the buffer.
MemoryProbe probe_memory_bandwidth();

// probe_memory_bandwidth().best_gbs.
double measure_memory_bandwidth_gbs();

}  // namespace kvik
