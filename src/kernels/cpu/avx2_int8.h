// Small AVX2 helpers of the packed integer kernels (avx2_packed_q_impl.h, avx2_packed_k_impl.h), in an unnamed
// namespace like them: each ISA translation unit that includes them gets its own copy.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/packed.h"
#include "tensor/dtype.h"

namespace kvik::avx2 {
namespace {  // NOLINT(google-build-namespaces): one copy per ISA translation unit

inline __m256i bcast4(const void* p) {  // 4 bytes in every 32-bit lane
  int32_t v;
  __builtin_memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}
inline __m256i load32(const uint8_t* p) { return _mm256_load_si256(reinterpret_cast<const __m256i*>(p)); }
inline __m128i load16(const uint8_t* p) { return _mm_load_si128(reinterpret_cast<const __m128i*>(p)); }

// vpdpbusd (AVX-VNNI); only instantiated in the translation unit compiled with it.
template <typename V = __m256i>
inline V dpbusd(V s, V w, V x) {
#ifdef __AVXVNNI__
  return _mm256_dpbusd_avx_epi32(s, w, x);
#else
  static_assert(sizeof(V) == 0, "vpdpbusd needs a translation unit compiled with -mavxvnni");
  return s;
#endif
}

// Batch-1 decode streams every weight once from memory, and the hardware prefetcher alone falls short on Zen 3 (2
// threads, 1B shape, `kvik bench` decode tok/s and fraction of the probed bandwidth: Q8_0 19.5 (0.79), Q4_K_M 28.1
// (0.61), Q4_0 38.2 (0.73)). The kernels without VNNI prefetch in one of two ways:
// - the 4- and 5-bit types of 32-element blocks (pairs of 576-768 bytes): the bytes kDecodePrefetchAhead past the
//   pair, as one burst at its start: Q4_0 45.4 tok/s (0.86) at 1024; 768 as good, 2048 and 4096 less. Spread as below
//   over the nibble vectors, 4 pairs ahead: 46.6 against the burst's 46.5 (12 alternated runs), and 3-4% slower on
//   weights that sit in the L3 (2048², one token); 2 / 6 pairs ahead no better.
// - Q8_0 (pairs of 1088 bytes) and the K-quants (records of 2368-3392 bytes): the unit ahead, spread over the current
//   one's k-groups / sub-blocks (prefetch_part) instead of a burst of 17-53 lines at its start. Q8_0 kQ8_0PairsAhead
//   pairs ahead: 24.7 -> 25.5 tok/s (medians of 7 alternated runs, 6 of 7 pairs faster; an earlier build 22.1 -> 24.0
//   in 6 runs; a sweep of 4 runs each: 1 / 2 / 3 / 4 pairs 24.2 / 23.8 / 23.5 / 23.1 against the burst's 21.9).
//   K-quants the next record: 1B Q4_K_M 34.1 -> 41.0 (6 alternated runs); with only Q4_K changed (5 runs) the burst
//   1024 bytes ahead gave 30.0, spread one record ahead 33.4, one and a half 33.5, and the burst 2304-6912 bytes
//   ahead less than at 1024.
// Q8_0 over the 1B's matrices in their decode order (16 × qkv, o, gate-up, down, then the output head: 1.1 GB; one
// process, 2 threads, 11-25 alternated rounds; Zen 3, 2026-12-03): prefetcht1 4 or 6 pairs ahead took 1.00-1.05× the
// time of this, prefetchnta 2 pairs 0.99-1.01×; the kernel streamed at 0.85-0.94 of a bare read's GB/s over the same
// bytes, and a barrier after each matrix (the pool's join) cost nothing measurable there.
constexpr int64_t kDecodePrefetchAhead = 1024;
inline void prefetch_ahead(const uint8_t* p, int64_t bytes) { prefetch_span_ahead<kDecodePrefetchAhead>(p, bytes); }
inline constexpr int64_t kQ8_0PairsAhead = 2;
// Part i of kParts of a unit of kBytes (whole cache lines) at `next`: the kBytes/kParts bytes from i times that, a
// prefetch per 64 bytes, so where that span is not whole lines neighbouring parts share a line and the last part
// reaches one line past the unit. That decoded faster than an exact partition of the lines, each in one part (1B
// Q4_K_M 40.9 vs 36.9 tok/s, medians of 4 alternated runs).
template <int64_t kBytes, int kParts>
inline void prefetch_part(const uint8_t* next, int i) {
  static_assert(kBytes % 64 == 0, "a prefetched unit is whole cache lines, so the next one stays line-aligned");
  constexpr int64_t kSpan = kBytes / kParts;
  prefetch_span_ahead<0>(next + kSpan * i, kSpan);
}

// Activation rows t0, t0 + 1, ... of x (nb blocks a row).
inline ActQ8S rows_from(const ActQ8S& x, int64_t nb, int64_t t0) {
  return {x.qs + t0 * nb * kQK8_0, x.d + t0 * nb, x.sums + t0 * nb, nb};
}
inline ActQ8KS rows_from(const ActQ8KS& x, int64_t nb, int64_t t0) {
  return {x.x + t0 * nb, x.sums32 + t0 * nb * 8, nb};
}

// R tokens through a kernel for at most 4 (K::run<R>, the accumulators of 4 tokens fill the 16 ymm registers): four
// at a time, each four over the whole group, then the rest.
template <class K, class X>
void by_fours(const uint8_t* g, int64_t nb, const X& x, int64_t R, float* y, int64_t ys) {
  int64_t t = 0;
  for (; t + 4 <= R; t += 4) K::template run<4>(g, nb, rows_from(x, nb, t), y + t * ys, ys);
  switch (R - t) {
    case 3: return K::template run<3>(g, nb, rows_from(x, nb, t), y + t * ys, ys);
    case 2: return K::template run<2>(g, nb, rows_from(x, nb, t), y + t * ys, ys);
    case 1: return K::template run<1>(g, nb, rows_from(x, nb, t), y + t * ys, ys);
    default: return;
  }
}

}  // namespace
}  // namespace kvik::avx2
