// A short read-bandwidth test of this machine, for the batch-1 decode roofline that `kvik bench` reports:
// decode reads every weight once per token, so tokens/s ≤ bandwidth ÷ bytes of weights read per token.
#pragma once

namespace kvik {

// Streams a buffer much larger than the last-level cache once per thread of the global pool (each thread its own
// slice, as the matmuls split weight rows), three times, and returns the best GB/s (1 GB = 1e9 bytes). Takes
// about a second, mostly page faults of the first touch of the 256 MiB buffer.
double measure_memory_bandwidth_gbs();

}  // namespace kvik
