// Helpers shared by the AVX-512 kernel files (isa_avx512.cpp, isa_avx512_packed.cpp, isa_avx512_attention.cpp), all
// compiled with the AVX-512 flags (CMakeLists.txt) and used only on CPUs that have them (dispatch.cpp), and the
// kernels the other two files give the table in isa_avx512.cpp. Include from those files only.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/packed.h"

namespace kvik::avx512 {

inline float f16(uint16_t h) { return _cvtsh_ss(h); }  // exact, as fp16_to_f32

inline __mmask16 tail_mask(int64_t k) { return static_cast<__mmask16>((1u << k) - 1); }

inline __m512 bf16_widen(__m256i v) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(v), 16)); }
template <bool kF16>
inline __m512 load_half(const uint16_t* p) {
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return kF16 ? _mm512_cvtph_ps(v) : bf16_widen(v);
}
template <bool kF16>
inline __m512 load_half(const uint16_t* p, __mmask16 m) {
  const __m256i v = _mm256_maskz_loadu_epi16(m, p);
  return kF16 ? _mm512_cvtph_ps(v) : bf16_widen(v);
}

inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline __m512i load512(const void* p) { return _mm512_loadu_si512(p); }
inline __m512i join(__m256i lo, __m256i hi) { return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1); }

// Software prefetch of the next bytes of a streamed weight group. With R > 1 tokens the per-block work grows and the
// hardware prefetcher alone no longer keeps DRAM ahead of the loop (bench_matmul_packed at several token counts);
// asking for the lines kPrefetchAhead bytes ahead overlaps the fetch with the dot products. Prefetching
// past the end of an allocation is harmless (no fault).
inline constexpr int64_t kPrefetchAhead = 4096;
inline void prefetch_span(const uint8_t* p, int64_t bytes) { prefetch_span_ahead<kPrefetchAhead>(p, bytes); }
inline float hsum256(__m256 p) {
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(p), _mm256_extractf128_ps(p, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_movehdup_ps(h));
  return _mm_cvtss_f32(h);
}

// K<R>::run(args...) for a runtime token count R in 1..8 (8 for more): one instance per R, so that each keeps its
// per-token accumulators in registers.
template <template <int> class K, typename... A>
void by_tokens(int64_t R, const A&... a) {
  switch (R) {
    case 1: return K<1>::run(a...);
    case 2: return K<2>::run(a...);
    case 3: return K<3>::run(a...);
    case 4: return K<4>::run(a...);
    case 5: return K<5>::run(a...);
    case 6: return K<6>::run(a...);
    case 7: return K<7>::run(a...);
    default: return K<8>::run(a...);
  }
}

// Packed weights (isa_avx512_packed.cpp).
void gemm_f32_x16(const uint8_t* g, int64_t n, const float* x, int64_t xs, int64_t R, float* y, int64_t ys);
void gemm_f16_x16(const uint8_t* g, int64_t n, const float* x, int64_t xs, int64_t R, float* y, int64_t ys);
void gemm_bf16_x16(const uint8_t* g, int64_t G, size_t gb, int64_t n, const float* x, int64_t xs, int64_t R, float* y,
                   int64_t ys);
// AVX512_BF16 only (the table avx512_bf16_kernels(), chosen where the CPU has it).
void gemm_bf16_dp_x16(const uint8_t* g, int64_t G, size_t gb, int64_t n, const uint16_t* x, int64_t xs, int64_t R,
                      float* y, int64_t ys);
void gemm_q8_0_x16(const uint8_t* g, int64_t nb, const ActQ8S& x, int64_t R, float* y, int64_t ys);
void gemm_q4_0_x16(const uint8_t* g, int64_t nb, const ActQ8S& x, int64_t R, float* y, int64_t ys);
void gemm_iq4_nl_x16(const uint8_t* g, int64_t nb, const ActQ8S& x, int64_t R, float* y, int64_t ys);
void gemm_q5_0_x16(const uint8_t* g, int64_t nb, const ActQ8S& x, int64_t R, float* y, int64_t ys);
void gemm_q4_1_x16(const uint8_t* g, int64_t nb, const ActQ8S& x, int64_t R, float* y, int64_t ys);
void gemm_q5_1_x16(const uint8_t* g, int64_t nb, const ActQ8S& x, int64_t R, float* y, int64_t ys);
void gemm_q4_k_x16(const uint8_t* g, int64_t nb, const ActQ8KS& x, int64_t R, float* y, int64_t ys);
void gemm_q5_k_x16(const uint8_t* g, int64_t nb, const ActQ8KS& x, int64_t R, float* y, int64_t ys);
void gemm_q6_k_x16(const uint8_t* g, int64_t nb, const ActQ8KS& x, int64_t R, float* y, int64_t ys);

// Attention, softmax and silu·mul (isa_avx512_attention.cpp).
float dot_f32_f16(const float* x, const uint16_t* h, int64_t n);
void scores_f32(const float* q, const float* k, const int64_t* off, int64_t n, int64_t d, float scale, float* out);
void scores_f16(const float* q, const uint16_t* k, const int64_t* off, int64_t n, int64_t d, float scale, float* out);
void scores_multi_f32(const float* q, int64_t q_stride, int64_t nq, const float* k, const int64_t* off, int64_t n,
                      int64_t d, float scale, float* out, int64_t out_stride);
void wsum_multi_f32(const float* p, int64_t p_stride, int64_t nq, const float* v, const int64_t* off, int64_t n,
                    int64_t d, float* out, int64_t out_stride);
void wsum_multi_f16(const float* p, int64_t p_stride, int64_t nq, const uint16_t* v, const int64_t* off, int64_t n,
                    int64_t d, float* out, int64_t out_stride);
void scores_multi_f16(const float* q, int64_t q_stride, int64_t nq, const uint16_t* k, const int64_t* off, int64_t n,
                      int64_t d, float scale, float* out, int64_t out_stride);
void scores_multi_q8_0(const float* q, int64_t q_stride, int64_t nq, const BlockQ8_0* k, const int64_t* off, int64_t n,
                       int64_t d, float scale, float* out, int64_t out_stride);
void wsum_multi_q8_0(const float* p, int64_t p_stride, int64_t nq, const BlockQ8_0* v, const int64_t* off, int64_t n,
                     int64_t d, float* out, int64_t out_stride);
void scores_multi_fp8(const float* q, int64_t q_stride, int64_t nq, const uint8_t* k, const int64_t* off, int64_t n,
                      int64_t d, float scale, float* out, int64_t out_stride);
void wsum_multi_fp8(const float* p, int64_t p_stride, int64_t nq, const uint8_t* v, const int64_t* off, int64_t n,
                    int64_t d, float* out, int64_t out_stride);
void wsum_f32(const float* p, const float* v, const int64_t* off, int64_t n, int64_t d, float* out);
void wsum_f16(const float* p, const uint16_t* v, const int64_t* off, int64_t n, int64_t d, float* out);
void softmax(float* x, int64_t n);
void silu_mul(float* gate, const float* up, int64_t n);

}  // namespace kvik::avx512
