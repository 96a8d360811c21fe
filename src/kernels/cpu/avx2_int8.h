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

// Batch-1 decode streams every weight once from memory, and on CPUs without VNNI the hardware prefetcher alone does
// not keep that stream at the memory's speed. The kernels without VNNI therefore prefetch, in one of two ways:
// - the 4- and 5-bit types of 32-element blocks (pairs of 576-768 bytes): the bytes kDecodePrefetchAhead past the
//   pair, as one burst at its start (spread over the nibble vectors it decodes no faster and is slower on weights
//   that sit in the L3);
// - Q8_0 (pairs of 1088 bytes) and the K-quants (records of 2368-3392 bytes): the unit ahead (Q8_0: kQ8_0PairsAhead
//   pairs; K-quants: the next record), spread over the current one's k-groups / sub-blocks (prefetch_part), because a
//   burst of 17-53 lines at a unit's start stalls on the core's outstanding misses.
// The distances are those that decoded fastest in alternated `kvik bench` decode runs (bench/compare_llamacpp.sh on
// an AVX2-only CPU).
constexpr int64_t kDecodePrefetchAhead = 1024;
inline void prefetch_ahead(const uint8_t* p, int64_t bytes) { prefetch_span_ahead<kDecodePrefetchAhead>(p, bytes); }
inline constexpr int64_t kQ8_0PairsAhead = 2;
// Part i of kParts of a unit of kBytes (whole cache lines) at `next`: the kBytes/kParts bytes from i times that, a
// prefetch per 64 bytes, so where that span is not whole lines neighbouring parts share a line and the last part
// reaches one line past the unit. That decodes faster than an exact partition of the lines, each in one part.
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
