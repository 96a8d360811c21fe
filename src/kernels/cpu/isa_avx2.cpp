// AVX2 + FMA + F16C kernels (compiled with -mavx2 -mfma -mf16c; chosen at run time only on CPUs that have them).
#include <immintrin.h>

#include "core/fp16.h"
#include "kernels/cpu/avx2_attention.h"
#include "kernels/cpu/avx2_blocks.h"
#include "kernels/cpu/avx2_packed.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/kv_quant_kernels.h"

namespace kvik {
namespace {

float dot_f32(const float* w, const float* x, int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(x + i), a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 8), _mm256_loadu_ps(x + i + 8), a1);
    a2 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 16), _mm256_loadu_ps(x + i + 16), a2);
    a3 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 24), _mm256_loadu_ps(x + i + 24), a3);
  }
  for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(x + i), a0);
  float s = avx2::hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  for (; i < n; ++i) s += w[i] * x[i];
  return s;
}

inline __m256 load_f16(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline __m256 load_bf16(const uint16_t* p) {
  return _mm256_castsi256_ps(
      _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
}

// f16 / bf16 dot product: the two formats differ only in how 8 halves widen to floats.
template <__m256 (*Load)(const uint16_t*), float (*ToF32)(uint16_t)>
float dot_half(const uint16_t* w, const uint16_t* x, int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    a0 = _mm256_fmadd_ps(Load(w + i), Load(x + i), a0);
    a1 = _mm256_fmadd_ps(Load(w + i + 8), Load(x + i + 8), a1);
  }
  for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(Load(w + i), Load(x + i), a0);
  float s = avx2::hsum(_mm256_add_ps(a0, a1));
  for (; i < n; ++i) s += ToF32(w[i]) * ToF32(x[i]);
  return s;
}
float dot_f16(const uint16_t* w, const uint16_t* x, int64_t n) { return dot_half<load_f16, fp16_to_f32>(w, x, n); }
float dot_bf16(const uint16_t* w, const uint16_t* x, int64_t n) { return dot_half<load_bf16, bf16_to_f32>(w, x, n); }

// Q8_0 / Q4_0 × ActQ8: a pair of blocks as two 256-bit halves whose 32-bit lanes alternate between the blocks
// (groups 0..3, then 4..7); the weight pair is brought into the same order with unpack + lane permutes. The
// activation bytes lose their +128 (xor) and go through the signed maddubs trick.
struct WeightPair {
  __m256i lo, hi;  // s8
  __m256 d;        // d0, d1, d0, d1, ...
};
inline WeightPair interleave(__m256i a, __m256i b, uint16_t da, uint16_t db) {
  const __m256i l = _mm256_unpacklo_epi32(a, b), h = _mm256_unpackhi_epi32(a, b);
  return {_mm256_permute2x128_si256(l, h, 0x20), _mm256_permute2x128_si256(l, h, 0x31),
          _mm256_cvtph_ps(_mm_set1_epi32(static_cast<int32_t>(da | (uint32_t{db} << 16))))};
}
template <typename Block>
inline __m256i weight_block(const Block& w) {
  return avx2::quants(w);
}
inline __m256i load_act(const uint8_t* p) {
  return _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)), _mm256_set1_epi8(-128));
}
inline __m256i dot_i8(__m256i w, __m256i x) {  // 8 int32 lanes of 4-pair sums, exact
  return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w)), _mm256_set1_epi16(1));
}

template <typename Block>
void gemv_q(const Block* w, const ActQ8& x, int64_t R, float* out) {
  const int64_t nb = x.nb, row_bytes = nb * kQK8_0;
  for (int64_t r = 0; r < R; ++r) {
    const uint8_t* xq = x.qs + r * row_bytes;
    const float* xd = x.d + r * nb;
    __m256 acc = _mm256_setzero_ps();
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
      const WeightPair wp = interleave(weight_block(w[b]), weight_block(w[b + 1]), w[b].d, w[b + 1].d);
      const __m256i p =
          _mm256_add_epi32(dot_i8(wp.lo, load_act(xq + 32 * b)), dot_i8(wp.hi, load_act(xq + 32 * b + 32)));
      const __m256 dx = _mm256_castpd_ps(_mm256_broadcast_sd(reinterpret_cast<const double*>(xd + b)));
      acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_mul_ps(wp.d, dx), acc);
    }
    float s = avx2::hsum(acc);
    if (b < nb)
      s += avx2::hsum(_mm256_cvtepi32_ps(dot_i8(weight_block(w[b]), load_act(xq + 32 * b)))) *
           (fp16_to_f32(w[b].d) * xd[b]);
    out[r] = s + avx2::min_terms(w, x.s ? x.s + r * nb : nullptr, nb);
  }
}
void gemv_q8_0(const BlockQ8_0* w, const ActQ8& x, int64_t R, float* out) { gemv_q(w, x, R, out); }
void gemv_q4_0(const BlockQ4_0* w, const ActQ8& x, int64_t R, float* out) { gemv_q(w, x, R, out); }
void gemv_q4_1(const BlockQ4_1* w, const ActQ8& x, int64_t R, float* out) { gemv_q(w, x, R, out); }
void gemv_q5_0(const BlockQ5_0* w, const ActQ8& x, int64_t R, float* out) { gemv_q(w, x, R, out); }
void gemv_q5_1(const BlockQ5_1* w, const ActQ8& x, int64_t R, float* out) { gemv_q(w, x, R, out); }
void gemv_iq4_nl(const BlockIQ4_NL* w, const ActQ8& x, int64_t R, float* out) { gemv_q(w, x, R, out); }

void to_f16(const float* x, uint16_t* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; ++i) y[i] = f32_to_fp16(x[i]);
}

void to_bf16(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = f32_to_bf16(x[i]);
}

void round_f16(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT)));
  if (i < n) round_through_half(x + i, y + i, n - i, true);
}
void round_bf16(const float* x, float* y, int64_t n) { round_through_half(x, y, n, false); }

void quantize_act_q8(const float* x, uint8_t* qs, float* d, int64_t n) {
  generic_kernels().quantize_act_q8(x, qs, d, n);
}

inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// Bits (2c) and (2c + 1) of each qh byte as the 0/16 fifth bit of chunk c's low and high nibbles.
inline __m256i fifth_bit(__m256i qh, int shift) {
  return _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, shift), _mm256_set1_epi8(1)), 4);
}

// Q4_K / Q5_K: q (u8, ≤ 31) × x (s8) pairs via maddubs (|pair| ≤ 2·31·127, no saturation), then madd with
// the sub-block scale: exact int32, the same integers as the reference.
template <bool kFifthBit, typename Block>
float dot_k_scale_min(const Block* w, const BlockQ8_K* x, int64_t nb) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  float s = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t sc[8], m[8];
    for (int j = 0; j < 8; ++j) k_scale_min(j, w[b].scales, sc[j], m[j]);
    __m256i acc = _mm256_setzero_si256();
    __m256i qh = _mm256_setzero_si256();
    if constexpr (kFifthBit) qh = load256(reinterpret_cast<const BlockQ5_K*>(&w[b])->qh);
    for (int c = 0; c < 4; ++c) {
      const __m256i raw = load256(w[b].qs + 32 * c);
      __m256i lo = _mm256_and_si256(raw, m4), hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
      if constexpr (kFifthBit) {
        lo = _mm256_or_si256(lo, fifth_bit(qh, 2 * c));
        hi = _mm256_or_si256(hi, fifth_bit(qh, 2 * c + 1));
      }
      const __m256i p0 = _mm256_maddubs_epi16(lo, load256(x[b].qs + 64 * c));
      const __m256i p1 = _mm256_maddubs_epi16(hi, load256(x[b].qs + 64 * c + 32));
      acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p0, _mm256_set1_epi16(sc[2 * c])));
      acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p1, _mm256_set1_epi16(sc[2 * c + 1])));
    }
    int32_t summ = 0;
    for (int j = 0; j < 8; ++j) summ += m[j] * (x[b].bsums[2 * j] + x[b].bsums[2 * j + 1]);
    const int32_t sumi = avx2::hsum_i32(acc);
    const float d = x[b].d * fp16_to_f32(w[b].d), dmin = x[b].d * fp16_to_f32(w[b].dmin);
    s += d * static_cast<float>(sumi) - dmin * static_cast<float>(summ);
  }
  return s;
}
float dot_q4_k(const BlockQ4_K* w, const BlockQ8_K* x, int64_t nb) { return dot_k_scale_min<false>(w, x, nb); }
float dot_q5_k(const BlockQ5_K* w, const BlockQ8_K* x, int64_t nb) { return dot_k_scale_min<true>(w, x, nb); }

// Q6_K: q (u8, 0..63) × x via maddubs, scaled per 16-element sub-block, minus 32·Σ_j sc_j·bsums_j.
float dot_q6_k(const BlockQ6_K* w, const BlockQ8_K* x, int64_t nb) {
  const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(3);
  float s = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    __m256i acc = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      const __m256i ql0 = load256(w[b].ql + 64 * h), ql1 = load256(w[b].ql + 64 * h + 32);
      const __m256i qh = load256(w[b].qh + 32 * h);
      const __m256i q[4] = {_mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_slli_epi16(_mm256_and_si256(qh, m2), 4)),
                            _mm256_or_si256(_mm256_and_si256(ql1, m4),
                                            _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m2), 4)),
                            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
                                            _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m2), 4)),
                            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                                            _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m2), 4))};
      for (int k = 0; k < 4; ++k) {
        const int j = 8 * h + 2 * k;  // sub-blocks j, j + 1 (16 elements each)
        const __m256i p = _mm256_maddubs_epi16(q[k], load256(x[b].qs + 128 * h + 32 * k));
        const __m256i scv = _mm256_set_m128i(_mm_set1_epi16(w[b].scales[j + 1]), _mm_set1_epi16(w[b].scales[j]));
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p, scv));
      }
    }
    int32_t offs = 0;
    for (int j = 0; j < 16; ++j) offs += w[b].scales[j] * x[b].bsums[j];
    const int32_t sumi = avx2::hsum_i32(acc) - 32 * offs;
    s += x[b].d * fp16_to_f32(w[b].d) * static_cast<float>(sumi);
  }
  return s;
}

float dot_f32_f16(const float* x, const uint16_t* h, int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), load_f16(h + i), a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8), load_f16(h + i + 8), a1);
  }
  for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), load_f16(h + i), a0);
  float s = avx2::hsum(_mm256_add_ps(a0, a1));
  for (; i < n; ++i) s += x[i] * fp16_to_f32(h[i]);
  return s;
}

// 32-byte loads, four per iteration into four accumulators (u64 lanes: the generic sum, mod 2⁶⁴).
uint64_t stream_sum(const uint8_t* p, int64_t bytes, StreamLoad how) {
  __m256i a[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256()};
  const auto line = [how](const uint8_t* q) {
    const auto* v = reinterpret_cast<const __m256i*>(q);
    return how == StreamLoad::kNonTemporal ? _mm256_stream_load_si256(v) : _mm256_load_si256(v);
  };
  int64_t i = 0;
  for (; i + 128 <= bytes; i += 128) {
    if (how == StreamLoad::kPrefetch)
      for (int l = 0; l < 128; l += 64)
        _mm_prefetch(reinterpret_cast<const char*>(p + i + kStreamPrefetchBytes + l), _MM_HINT_T0);
    for (int l = 0; l < 4; ++l) a[l] = _mm256_add_epi64(a[l], line(p + i + 32 * l));
  }
  for (; i < bytes; i += 32) a[0] = _mm256_add_epi64(a[0], line(p + i));
  const __m256i t = _mm256_add_epi64(_mm256_add_epi64(a[0], a[1]), _mm256_add_epi64(a[2], a[3]));
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), t);
  return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}

constexpr CpuKernels kAvx2 = {
    .isa = "avx2",
    .dot_f32 = dot_f32,
    .dot_f16 = dot_f16,
    .dot_bf16 = dot_bf16,
    .dot_q4_k = dot_q4_k,
    .dot_q5_k = dot_q5_k,
    .dot_q6_k = dot_q6_k,
    .dot4_f16 = dot4_by_rows<uint16_t, uint16_t, dot_f16>,
    .dot4_bf16 = dot4_by_rows<uint16_t, uint16_t, dot_bf16>,
    .dot4_q4_k = dot4_by_rows<BlockQ4_K, BlockQ8_K, dot_q4_k>,
    .dot4_q5_k = dot4_by_rows<BlockQ5_K, BlockQ8_K, dot_q5_k>,
    .dot4_q6_k = dot4_by_rows<BlockQ6_K, BlockQ8_K, dot_q6_k>,
    .tile_f32 = tile_by_rows<dot_f32>,
    .dot_f32_f16 = dot_f32_f16,
    .wsum_f32 = avx2::wsum_f32,
    .wsum_f16 = avx2::wsum_f16,
    .scores_f32 = avx2::scores_f32,
    .scores_f16 = avx2::scores_f16,
    .scores_multi_f32 = avx2::scores_multi_f32,
    .scores_multi_f16 = avx2::scores_multi_f16,
    .wsum_multi_f32 = avx2::wsum_multi_f32,
    .wsum_multi_f16 = avx2::wsum_multi_f16,
    .scores_q8_0 = avx2::scores_q8_0,
    .wsum_q8_0 = avx2::wsum_q8_0,
    .scores_fp8 = avx2::scores_fp8,
    .wsum_fp8 = avx2::wsum_fp8,
    .scores_multi_q8_0 = avx2::scores_multi_q8_0,
    .wsum_multi_q8_0 = avx2::wsum_multi_q8_0,
    .scores_multi_fp8 = avx2::scores_multi_fp8,
    .wsum_multi_fp8 = avx2::wsum_multi_fp8,
    .softmax = avx2::softmax,
    .silu_mul = avx2::silu_mul,
    .gemv_q8_0 = gemv_q8_0,
    .gemv_q4_0 = gemv_q4_0,
    .gemv_q4_1 = gemv_q4_1,
    .gemv_q5_0 = gemv_q5_0,
    .gemv_q5_1 = gemv_q5_1,
    .gemv_iq4_nl = gemv_iq4_nl,
    .quantize_act_q8 = quantize_act_q8,
    .quantize_q8_k = avx2::quantize_q8_k,
    .gemm_f32_x16 = avx2::gemm_f32_x16,
    .gemm_f16_x16 = avx2::gemm_f16_x16,
    .gemm_bf16_x16 = avx2::gemm_bf16_x16,
    .gemm_q8_0_x16 = avx2::gemm_q8_0_x16,
    .gemm_q4_0_x16 = avx2::gemm_q4_0_x16,
    .gemm_iq4_nl_x16 = avx2::gemm_iq4_nl_x16,
    .gemm_q5_0_x16 = avx2::gemm_q5_0_x16,
    .gemm_q4_1_x16 = avx2::gemm_q4_1_x16,
    .gemm_q5_1_x16 = avx2::gemm_q5_1_x16,
    .gemm_q4_k_x16 = avx2::gemm_q4_k_x16,
    .gemm_q5_k_x16 = avx2::gemm_q5_k_x16,
    .gemm_q6_k_x16 = avx2::gemm_q6_k_x16,
    .quantize_act_q8s = avx2::quantize_act_q8s,
    .to_f16 = to_f16,
    .to_bf16 = to_bf16,
    .round_f16 = round_f16,
    .round_bf16 = round_bf16,
    .stream_sum = stream_sum,
    .spreads_attention_prefetch = kSpreadF32 | kSpreadF16 | kSpreadQ8_0 | kSpreadFp8,
};

}  // namespace

const CpuKernels* avx2_kernels() { return &kAvx2; }

}  // namespace kvik
