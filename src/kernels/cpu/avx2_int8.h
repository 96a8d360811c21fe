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

// Batch-1 decode streams every weight once from memory; the Q8_0 / Q4_0-family kernels prefetch the bytes
// kDecodePrefetchAhead past the block pair they read (576-1088 bytes). On Zen 3 (2 threads, 1B shape, medians of 4-5
// alternated runs of `kvik bench`, decode tok/s and fraction of the probed bandwidth) the hardware prefetcher alone
// reached Q8_0 19.5 (0.79), Q4_K_M 28.1 (0.61), Q4_0 38.2 (0.73); with 1024 bytes ahead 21.9 (0.91), 32.9 (0.71), 45.4
// (0.86). 768 bytes did as well as 1024; 2048 and 4096 less.
constexpr int64_t kDecodePrefetchAhead = 1024;
inline void prefetch_ahead(const uint8_t* p, int64_t bytes) { prefetch_span_ahead<kDecodePrefetchAhead>(p, bytes); }
// The K-quant records (2368-3392 bytes) instead prefetch the next record, an eighth of it per sub-block of the
// current one, so the prefetches are spread over the record's work rather than issued as one burst of 37-53 lines at
// its start. Zen 3, 2 threads, 1B Q4_K_M (Q4_K and Q6_K), `kvik bench` decode: 34.1 -> 41.0 tok/s (medians of 6
// alternated runs). An experiment with only Q4_K changed (5 alternated runs): the burst 1024 bytes ahead 30.0 tok/s,
// spread one record ahead 33.4, one and a half records 33.5; the burst 2304-6912 bytes ahead was slower than at 1024.
inline void prefetch_eighth(const uint8_t* next_record, int64_t record, int j) {
  prefetch_span_ahead<0>(next_record + record / 8 * j, record / 8);
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
