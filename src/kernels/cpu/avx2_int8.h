// Small AVX2 helpers of the packed integer kernels (avx2_packed_q_impl.h, avx2_packed_k_impl.h), in an unnamed
// namespace like them: each ISA translation unit that includes them gets its own copy.
#pragma once

#include <immintrin.h>

#include <cstdint>

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

}  // namespace
}  // namespace kvik::avx2
