#include "kernels/cpu/packed.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include <sys/mman.h>

#include "core/error.h"
#include "core/fp16.h"
#include "core/thread_pool.h"
#include "kernels/cpu/cpu_kernels.h"
#include "tensor/quantize.h"

namespace kvik {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;

// Byte of row i's element l in a run of 4-byte k-groups: k-group l / 4 is one 64-byte vector holding the 16 rows'
// 4 bytes side by side (for l < 4: the row's bytes within one vector).
constexpr int64_t lane_byte(int l, int i) { return (l / 4) * 64 + i * 4 + l % 4; }

// Row i of a group as the packed layout stores it, from one plain row (blocks of the weight's type).
void pack_row_f32(const float* src, int64_t n, int i, uint8_t* g) {
  float* w = reinterpret_cast<float*>(g);
  for (int64_t k = 0; k < n; ++k) w[k * kPackRows + i] = src[k];
}

void pack_row_f16(const uint16_t* src, int64_t n, int i, uint8_t* g) {
  uint16_t* w = reinterpret_cast<uint16_t*>(g);
  for (int64_t k = 0; k < n; ++k) w[k * kPackRows + i] = src[k];
}

void pack_row_bf16(const uint16_t* src, int64_t n, int i, uint8_t* g) {
  uint16_t* w = reinterpret_cast<uint16_t*>(g);
  for (int64_t k = 0; k < n; ++k) w[packed_bf16_index(k, i)] = src[k];
}

// Weight (k, i) of a packed F16 / BF16 group is w[Index(k, i)]; Chains fp32 sums per output, input k into sum k %
// Chains, added at the end (F16: two, the even and odd inputs; BF16: one, all inputs in order, as the bf16-pair
// instructions add them).
template <float (*Widen)(uint16_t), int64_t (*Index)(int64_t, int), int Chains>
void gemm_half_x16_ref(const uint8_t* g, int64_t n, const float* x, int64_t xs, int64_t R, float* y, int64_t ys) {
  const uint16_t* w = reinterpret_cast<const uint16_t*>(g);
  for (int64_t t = 0; t < R; ++t)
    for (int i = 0; i < kPackRows; ++i) {
      float s[2] = {0.0f, 0.0f};
      for (int64_t k = 0; k < n; ++k) s[k % Chains] = std::fma(Widen(w[Index(k, i)]), x[t * xs + k], s[k % Chains]);
      y[t * ys + i] = Chains == 2 ? s[0] + s[1] : s[0];
    }
}
constexpr int64_t f16_index(int64_t k, int i) { return k * kPackRows + i; }

void set_d(uint8_t* g, int64_t b, int64_t Q, int i, uint16_t d, int64_t S = kPairScales) {
  std::memcpy(g + packed_d_offset(b, Q, S) + 2 * i, &d, 2);
}

// A row's quants go 4 bytes at a time (lane_byte: bytes 4v..4v+3 of row i sit together in 4-byte column v), so
// packing moves words, not bytes: a 1 GB model repacks in a fraction of the time.
void move_words(const uint8_t* src, int words, int i, uint8_t* qs, uint32_t flip) {
  for (int v = 0; v < words; ++v) {
    uint32_t x;
    std::memcpy(&x, src + 4 * v, 4);
    x ^= flip;
    std::memcpy(qs + lane_byte(4 * v, i), &x, 4);
  }
}

void pack_row_q8_0(const BlockQ8_0* src, int64_t nb, int i, uint8_t* g) {
  for (int64_t b = 0; b < nb; ++b) {  // int8 q + 128 as u8 is q with its top bit flipped
    move_words(reinterpret_cast<const uint8_t*>(src[b].qs), kQK8_0 / 4, i, g + packed_qs_offset(b, kQ8_0PackedQs),
               0x80808080u);
    set_d(g, b, kQ8_0PackedQs, i, src[b].d);
  }
}

static_assert(sizeof(BlockIQ4_NL) == sizeof(BlockQ4_0) && offsetof(BlockIQ4_NL, qs) == offsetof(BlockQ4_0, qs));
void pack_row_q4_0(const BlockQ4_0* src, int64_t nb, int i, uint8_t* g) {
  for (int64_t b = 0; b < nb; ++b) {
    // src qs[l]: low nibble = element l, high = element 16 + l; packed byte (v, e): element 4v + e and 16 + 4v + e.
    move_words(src[b].qs, 4, i, g + packed_qs_offset(b, kQ4_0PackedQs), 0);
    set_d(g, b, kQ4_0PackedQs, i, src[b].d);
  }
}

// Row i's fifth bits (qh of a Q5_0 / Q5_1 block) into the fb vector at fb (bit l / 4 of byte l % 4: element l; bit
// 4 + l / 4: element 16 + l).
void pack_fifth_bits(const uint8_t* qh, int i, uint8_t* fb) {
  for (int l = 0; l < 16; ++l)
    fb[lane_byte(l % 4, i)] |=
        static_cast<uint8_t>(q5_fifth_bit(qh, l) << (l / 4) | q5_fifth_bit(qh, 16 + l) << (4 + l / 4));
}

// Q4_0's nibbles, then the fifth bits.
void pack_row_q5_0(const BlockQ5_0* src, int64_t nb, int i, uint8_t* g) {
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t* qs = g + packed_qs_offset(b, kQ5_0PackedQs);
    move_words(src[b].qs, 4, i, qs, 0);
    pack_fifth_bits(src[b].qh, i, qs + kQ4_0PackedQs);
    set_d(g, b, kQ5_0PackedQs, i, src[b].d);
  }
}

// Q4_1 / Q5_1: Q4_0's / Q5_0's quant record, d and m after each pair's quants.
template <typename Block, bool kFifth>
void pack_row_q_min(const Block* src, int64_t nb, int i, uint8_t* g) {
  constexpr int64_t Q = kFifth ? kQ5_0PackedQs : kQ4_0PackedQs;
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t* qs = g + packed_qs_offset(b, Q, kMinPairScales);
    move_words(src[b].qs, 4, i, qs, 0);
    if constexpr (kFifth) pack_fifth_bits(src[b].qh, i, qs + kQ4_0PackedQs);
    set_d(g, b, Q, i, src[b].d, kMinPairScales);
    std::memcpy(g + packed_m_offset(b, Q) + 2 * i, &src[b].m, 2);
  }
}

template <typename Block, int (*Quant)(const Block&, int)>
void pack_row_k_scale_min(const Block* src, int64_t nb, int i, uint8_t* g, const PackedKScaleMin& L) {
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t* rec = g + b * L.record;
    for (int j = 0; j < 8; ++j)
      for (int l = 0; l < 16; ++l) {
        const int lo = Quant(src[b], 32 * j + l), hi = Quant(src[b], 32 * j + 16 + l);
        rec[j * 256 + lane_byte(l, i)] = static_cast<uint8_t>((lo & 15) | ((hi & 15) << 4));
        if (L.fifth)
          rec[L.fifth + j * 64 + lane_byte(l % 4, i)] |=
              static_cast<uint8_t>((lo >> 4) << (l / 4) | (hi >> 4) << (4 + l / 4));
      }
    std::memcpy(rec + L.d + 2 * i, &src[b].d, 2);
    std::memcpy(rec + L.dmin + 2 * i, &src[b].dmin, 2);
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, m;
      k_scale_min(j, src[b].scales, sc, m);
      rec[L.sc + j * 16 + i] = sc;
      rec[L.m + (j / 2) * 32 + i * 2 + j % 2] = m;
    }
  }
}

void pack_row_q6_k(const BlockQ6_K* src, int64_t nb, int i, uint8_t* g) {
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t* rec = g + b * kQ6KRecord;
    for (int c = 0; c < 8; ++c) {
      uint8_t* ch = rec + q6_k_chunk_offset(c);
      for (int l = 0; l < 16; ++l) {
        const int lo = q6_k_quant(src[b], 32 * c + l), hi = q6_k_quant(src[b], 32 * c + 16 + l);
        const int v = l / 4, e = l % 4;
        ch[lane_byte(l, i)] = static_cast<uint8_t>((lo & 15) | ((hi & 15) << 4));
        ch[256 + lane_byte(e, i)] |= static_cast<uint8_t>((lo >> 4) << (2 * v));
        ch[320 + lane_byte(e, i)] |= static_cast<uint8_t>((hi >> 4) << (2 * v));
      }
      rec[q6_k_sc_offset(c) + i * 2] = static_cast<uint8_t>(src[b].scales[2 * c]);
      rec[q6_k_sc_offset(c) + i * 2 + 1] = static_cast<uint8_t>(src[b].scales[2 * c + 1]);
    }
    std::memcpy(rec + kQ6KD + 2 * i, &src[b].d, 2);
  }
}

float f16(const uint8_t* p, int64_t k) {
  uint16_t h;
  std::memcpy(&h, p + 2 * k, 2);
  return fp16_to_f32(h);
}

}  // namespace

void AlignedFree::operator()(uint8_t* p) const { std::free(p); }

size_t packed_group_bytes(DType t, int64_t cols) {
  switch (t) {
    case DType::F32: return static_cast<size_t>(cols) * kPackRows * sizeof(float);
    case DType::F16: return static_cast<size_t>(cols) * kPackRows * sizeof(uint16_t);
    case DType::BF16: return static_cast<size_t>(bf16_blocks(cols)) * kBF16PackedBlock;
    case DType::Q8_0: return static_cast<size_t>((cols / kQK8_0 + 1) / 2 * (2 * kQ8_0PackedQs + 64));
    case DType::Q4_0:
    case DType::IQ4_NL: return static_cast<size_t>((cols / kQK4_0 + 1) / 2 * (2 * kQ4_0PackedQs + 64));
    case DType::Q5_0: return static_cast<size_t>((cols / kQK8_0 + 1) / 2 * (2 * kQ5_0PackedQs + 64));
    case DType::Q4_1: return static_cast<size_t>((cols / kQK8_0 + 1) / 2 * (2 * kQ4_0PackedQs + kMinPairScales));
    case DType::Q5_1: return static_cast<size_t>((cols / kQK8_0 + 1) / 2 * (2 * kQ5_0PackedQs + kMinPairScales));
    case DType::Q4_K: return static_cast<size_t>(cols / kQK_K * kPackedQ4K.record);
    case DType::Q5_K: return static_cast<size_t>(cols / kQK_K * kPackedQ5K.record);
    case DType::Q6_K: return static_cast<size_t>(cols / kQK_K * kQ6KRecord);
    default: return 0;
  }
}

bool packable(DType t) {
  const CpuKernels& k = cpu_kernels();
  switch (t) {
    case DType::F32: return k.gemm_f32_x16 != nullptr;
    case DType::F16: return k.gemm_f16_x16 != nullptr;
    case DType::BF16: return k.gemm_bf16_x16 != nullptr;
    case DType::Q8_0: return k.gemm_q8_0_x16 != nullptr;
    case DType::Q4_0: return k.gemm_q4_0_x16 != nullptr;
    case DType::IQ4_NL: return k.gemm_iq4_nl_x16 != nullptr;
    case DType::Q5_0: return k.gemm_q5_0_x16 != nullptr;
    case DType::Q4_1: return k.gemm_q4_1_x16 != nullptr;
    case DType::Q5_1: return k.gemm_q5_1_x16 != nullptr;
    case DType::Q4_K: return k.gemm_q4_k_x16 != nullptr;
    case DType::Q5_K: return k.gemm_q5_k_x16 != nullptr;
    case DType::Q6_K: return k.gemm_q6_k_x16 != nullptr;
    default: return false;
  }
}

size_t packed_bytes(const WeightMatrix& w) {
  return packed_group_bytes(w.dtype, w.cols) * static_cast<size_t>((w.rows + kPackRows - 1) / kPackRows);
}

PackedBuffer allocate_packed(size_t bytes) {
  // Buffers of a huge page or more are 2 MiB-aligned and advised for transparent huge pages (fewer TLB misses
  // while decode streams them); smaller ones are only cache-line aligned.
  const size_t align = bytes >= kHugePage ? kHugePage : 64;
  const size_t rounded = (std::max<size_t>(bytes, 1) + align - 1) / align * align;
  PackedBuffer buf(static_cast<uint8_t*>(std::aligned_alloc(align, rounded)));
  if (buf && align == kHugePage) madvise(buf.get(), rounded, MADV_HUGEPAGE);  // advice only
  return buf;
}

void pack_group(const WeightMatrix& w, int64_t gi, uint8_t* g) {
  const size_t gb = packed_group_bytes(w.dtype, w.cols);
  if (gb == 0) fail("pack_group: weight type {} has no packed layout", dtype_name(w.dtype));
  const int64_t nb = w.cols / traits(w.dtype).block_size;
  std::memset(g, 0, gb);  // padding rows: zero scales, so they contribute nothing
  for (int i = 0; i < kPackRows && gi * kPackRows + i < w.rows; ++i) {
    const uint8_t* row = w.row(gi * kPackRows + i);
    switch (w.dtype) {
      case DType::F32: pack_row_f32(reinterpret_cast<const float*>(row), w.cols, i, g); break;
      case DType::F16: pack_row_f16(reinterpret_cast<const uint16_t*>(row), w.cols, i, g); break;
      case DType::BF16: pack_row_bf16(reinterpret_cast<const uint16_t*>(row), w.cols, i, g); break;
      case DType::Q8_0: pack_row_q8_0(reinterpret_cast<const BlockQ8_0*>(row), nb, i, g); break;
      case DType::Q4_0:
      case DType::IQ4_NL: pack_row_q4_0(reinterpret_cast<const BlockQ4_0*>(row), nb, i, g); break;  // same layout
      case DType::Q5_0: pack_row_q5_0(reinterpret_cast<const BlockQ5_0*>(row), nb, i, g); break;
      case DType::Q4_1: pack_row_q_min<BlockQ4_1, false>(reinterpret_cast<const BlockQ4_1*>(row), nb, i, g); break;
      case DType::Q5_1: pack_row_q_min<BlockQ5_1, true>(reinterpret_cast<const BlockQ5_1*>(row), nb, i, g); break;
      case DType::Q4_K:
        pack_row_k_scale_min<BlockQ4_K, q4_k_quant>(reinterpret_cast<const BlockQ4_K*>(row), nb, i, g, kPackedQ4K);
        break;
      case DType::Q5_K:
        pack_row_k_scale_min<BlockQ5_K, q5_k_quant>(reinterpret_cast<const BlockQ5_K*>(row), nb, i, g, kPackedQ5K);
        break;
      default: pack_row_q6_k(reinterpret_cast<const BlockQ6_K*>(row), nb, i, g); break;
    }
  }
}

void pack_into(WeightMatrix& w, uint8_t* dst) {
  const size_t gb = packed_group_bytes(w.dtype, w.cols);
  if (gb == 0) fail("pack_into: weight type {} has no packed layout", dtype_name(w.dtype));
  const int64_t groups = (w.rows + kPackRows - 1) / kPackRows;
  ThreadPool::global().parallel_for(groups, [&](int64_t g0, int64_t g1) {
    for (int64_t gi = g0; gi < g1; ++gi) pack_group(w, gi, dst + gb * static_cast<size_t>(gi));
  });
  w.packed = dst;
  w.packed_group_bytes = gb;
}

PackedBuffer pack_rows(const WeightMatrix& w) {
  if (packed_group_bytes(w.dtype, w.cols) == 0) return {};
  PackedBuffer buf = allocate_packed(packed_bytes(w));
  if (!buf) return {};
  WeightMatrix copy = w;
  pack_into(copy, buf.get());
  return buf;
}

PackedBuffer pack_weight(WeightMatrix& w) {
  if (!packable(w.dtype)) return {};
  PackedBuffer buf = allocate_packed(packed_bytes(w));
  if (buf) pack_into(w, buf.get());
  return buf;
}

void gemm_f32_x16_ref(const uint8_t* g, int64_t n, const float* x, int64_t xs, int64_t R, float* y, int64_t ys) {
  const float* w = reinterpret_cast<const float*>(g);
  for (int64_t t = 0; t < R; ++t)
    for (int i = 0; i < kPackRows; ++i) {
      float s[2] = {0.0f, 0.0f};
      for (int64_t k = 0; k < n; ++k) s[k % 2] = std::fma(w[k * kPackRows + i], x[t * xs + k], s[k % 2]);
      y[t * ys + i] = s[0] + s[1];
    }
}

void gemm_f16_x16_ref(const uint8_t* g, int64_t n, const float* x, int64_t xs, int64_t R, float* y, int64_t ys) {
  gemm_half_x16_ref<fp16_to_f32, f16_index, 2>(g, n, x, xs, R, y, ys);
}
void gemm_bf16_x16_ref(const uint8_t* g, int64_t n, const float* x, int64_t xs, int64_t R, float* y, int64_t ys) {
  gemm_half_x16_ref<bf16_to_f32, packed_bf16_index, 1>(g, n, x, xs, R, y, ys);
}

void bf16_pair_activations(const float* x, int64_t n, bool swap, uint16_t* out, ToBF16 to_bf16) {
  const int64_t padded = bf16_blocks(n) * kBF16TileK;
  if (to_bf16)
    to_bf16(x, out, n);
  else
    for (int64_t k = 0; k < n; ++k) out[k] = f32_to_bf16(x[k]);
  std::fill(out + n, out + padded, uint16_t{0});
  if (swap)
    for (int64_t k = 0; k < padded; k += 2) std::swap(out[k], out[k + 1]);
}

void round_through_half(const float* x, float* y, int64_t n, bool f16) {
  if (f16)
    for (int64_t i = 0; i < n; ++i) y[i] = fp16_to_f32(f32_to_fp16(x[i]));
  else
    for (int64_t i = 0; i < n; ++i) y[i] = bf16_to_f32(f32_to_bf16(x[i]));
}

namespace {
// Σ q·x of row i's block (quants at qs) with the activation block xq, q as stored (u8).
int32_t block_sum_q8_0(const uint8_t* qs, int i, const int8_t* xq) {
  int32_t s = 0;
  for (int j = 0; j < kQK8_0; ++j) s += qs[lane_byte(j, i)] * xq[j];
  return s;
}
int32_t block_sum_q4_0(const uint8_t* qs, int i, const int8_t* xq) {
  int32_t s = 0;
  for (int l = 0; l < 16; ++l) {
    const uint8_t v = qs[lane_byte(l, i)];
    s += (v & 0x0F) * xq[l] + (v >> 4) * xq[16 + l];
  }
  return s;
}
int32_t block_sum_iq4_nl(const uint8_t* qs, int i, const int8_t* xq) {
  int32_t s = 0;
  for (int l = 0; l < 16; ++l) {
    const uint8_t v = qs[lane_byte(l, i)];
    s += (kIQ4NLValues[v & 0x0F] + 128) * xq[l] + (kIQ4NLValues[v >> 4] + 128) * xq[16 + l];
  }
  return s;
}
int32_t block_sum_q5_0(const uint8_t* qs, int i, const int8_t* xq) {
  int32_t s = 0;
  for (int l = 0; l < 16; ++l) {
    const uint8_t v = qs[lane_byte(l, i)], f = qs[kQ4_0PackedQs + lane_byte(l % 4, i)];
    s += ((v & 0x0F) | ((f >> (l / 4)) & 1) << 4) * xq[l] + ((v >> 4) | ((f >> (4 + l / 4)) & 1) << 4) * xq[16 + l];
  }
  return s;
}

// Q8_0 / Q4_0 / IQ4_NL / Q5_0: per block the stored-quant sum less Offset·Σx, times d_w·d_x into the row's sum by
// one fma. Q4_1 / Q5_1 (kMin: quants unsigned, Offset 0, the scale pairs followed by the min pairs): then the min
// term m_w·(d_x·Σx) by a second fma; every kernel (x16 and AMX) applies these two fmas in this order. The products
// inside are exact in float (d_w, m_w and d_x are fp16 values, 11-bit significands; |Σx| ≤ 32·127 < 2^12), so only
// the two accumulations round and their order is what the kernels must share: the tests catch swapping them, not
// regrouping m_w·d_x·Σx.
template <int64_t Q, int32_t Offset, int32_t (*BlockSum)(const uint8_t*, int, const int8_t*), bool kMin = false>
void gemm_q_x16_ref(const uint8_t* g, int64_t nb, const ActQ8S& x, int64_t R, float* y, int64_t ys) {
  constexpr int64_t S = kMin ? kMinPairScales : kPairScales;
  for (int64_t t = 0; t < R; ++t)
    for (int i = 0; i < kPackRows; ++i) {
      float s = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        const int8_t* xq = x.qs + (t * nb + b) * kQK8_0;
        const float dx = x.d[t * nb + b];
        const int32_t sumi = BlockSum(g + packed_qs_offset(b, Q, S), i, xq) - Offset * x.sums[t * nb + b];
        s = std::fma(static_cast<float>(sumi), f16(g + packed_d_offset(b, Q, S), i) * dx, s);
        if constexpr (kMin)
          s = std::fma(f16(g + packed_m_offset(b, Q), i), dx * static_cast<float>(x.sums[t * nb + b]), s);
      }
      y[t * ys + i] = s;
    }
}
}  // namespace

void gemm_q8_0_x16_ref(const uint8_t* g, int64_t nb, const ActQ8S& x, int64_t R, float* y, int64_t ys) {
  gemm_q_x16_ref<kQ8_0PackedQs, 128, block_sum_q8_0>(g, nb, x, R, y, ys);
}
void gemm_q4_0_x16_ref(const uint8_t* g, int64_t nb, const ActQ8S& x, int64_t R, float* y, int64_t ys) {
  gemm_q_x16_ref<kQ4_0PackedQs, 8, block_sum_q4_0>(g, nb, x, R, y, ys);
}
void gemm_iq4_nl_x16_ref(const uint8_t* g, int64_t nb, const ActQ8S& x, int64_t R, float* y, int64_t ys) {
  gemm_q_x16_ref<kQ4_0PackedQs, 128, block_sum_iq4_nl>(g, nb, x, R, y, ys);
}
void gemm_q5_0_x16_ref(const uint8_t* g, int64_t nb, const ActQ8S& x, int64_t R, float* y, int64_t ys) {
  gemm_q_x16_ref<kQ5_0PackedQs, 16, block_sum_q5_0>(g, nb, x, R, y, ys);
}
void gemm_q4_1_x16_ref(const uint8_t* g, int64_t nb, const ActQ8S& x, int64_t R, float* y, int64_t ys) {
  gemm_q_x16_ref<kQ4_0PackedQs, 0, block_sum_q4_0, true>(g, nb, x, R, y, ys);
}
void gemm_q5_1_x16_ref(const uint8_t* g, int64_t nb, const ActQ8S& x, int64_t R, float* y, int64_t ys) {
  gemm_q_x16_ref<kQ5_0PackedQs, 0, block_sum_q5_0, true>(g, nb, x, R, y, ys);
}

namespace {
void gemm_k_scale_min_ref(const uint8_t* g, int64_t nb, const ActQ8KS& x, int64_t R, float* y, int64_t ys,
                          const PackedKScaleMin& L) {
  for (int64_t t = 0; t < R; ++t)
    for (int i = 0; i < kPackRows; ++i) {
      float s = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* rec = g + b * L.record;
        const BlockQ8_K& xb = x.x[t * nb + b];
        const int16_t* s32 = x.sums32 + (t * nb + b) * 8;
        int32_t isum = 0, msum = 0;
        for (int j = 0; j < 8; ++j) {
          int32_t p = 0;
          for (int l = 0; l < 16; ++l) {
            const uint8_t v = rec[j * 256 + lane_byte(l, i)];
            int lo = v & 0x0F, hi = v >> 4;
            if (L.fifth) {
              const uint8_t f = rec[L.fifth + j * 64 + lane_byte(l % 4, i)];
              lo |= ((f >> (l / 4)) & 1) << 4, hi |= ((f >> (4 + l / 4)) & 1) << 4;
            }
            p += lo * xb.qs[32 * j + l] + hi * xb.qs[32 * j + 16 + l];
          }
          isum += rec[L.sc + j * 16 + i] * p;
          msum += rec[L.m + (j / 2) * 32 + i * 2 + j % 2] * s32[j];
        }
        s = std::fma(static_cast<float>(isum), f16(rec + L.d, i) * xb.d, s);
        s = std::fma(-static_cast<float>(msum), f16(rec + L.dmin, i) * xb.d, s);
      }
      y[t * ys + i] = s;
    }
}
}  // namespace

void gemm_q4_k_x16_ref(const uint8_t* g, int64_t nb, const ActQ8KS& x, int64_t R, float* y, int64_t ys) {
  gemm_k_scale_min_ref(g, nb, x, R, y, ys, kPackedQ4K);
}
void gemm_q5_k_x16_ref(const uint8_t* g, int64_t nb, const ActQ8KS& x, int64_t R, float* y, int64_t ys) {
  gemm_k_scale_min_ref(g, nb, x, R, y, ys, kPackedQ5K);
}

void gemm_q6_k_x16_ref(const uint8_t* g, int64_t nb, const ActQ8KS& x, int64_t R, float* y, int64_t ys) {
  for (int64_t t = 0; t < R; ++t)
    for (int i = 0; i < kPackRows; ++i) {
      float s = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* rec = g + b * kQ6KRecord;
        const BlockQ8_K& xb = x.x[t * nb + b];
        int32_t isum = 0;
        for (int c = 0; c < 8; ++c) {
          const uint8_t* ch = rec + q6_k_chunk_offset(c);
          int32_t p_lo = 0, p_hi = 0;
          for (int l = 0; l < 16; ++l) {
            const int v = l / 4, e = l % 4;
            const uint8_t q = ch[lane_byte(l, i)];
            const int lo = (q & 15) | (((ch[256 + lane_byte(e, i)] >> (2 * v)) & 3) << 4);
            const int hi = (q >> 4) | (((ch[320 + lane_byte(e, i)] >> (2 * v)) & 3) << 4);
            p_lo += lo * xb.qs[32 * c + l], p_hi += hi * xb.qs[32 * c + 16 + l];
          }
          const int sc_lo = static_cast<int8_t>(rec[q6_k_sc_offset(c) + i * 2]);
          const int sc_hi = static_cast<int8_t>(rec[q6_k_sc_offset(c) + i * 2 + 1]);
          isum += sc_lo * p_lo + sc_hi * p_hi - 32 * (sc_lo * xb.bsums[2 * c] + sc_hi * xb.bsums[2 * c + 1]);
        }
        s = std::fma(static_cast<float>(isum), f16(rec + kQ6KD, i) * xb.d, s);
      }
      y[t * ys + i] = s;
    }
}

void quantize_act_q8s_ref(const float* x, int8_t* qs, float* d, int32_t* sums, int64_t n) {
  BlockQ8_0 blk;
  for (int64_t b = 0; b < n / kQK8_0; ++b) {
    quantize_row(DType::Q8_0, x + b * kQK8_0, &blk, kQK8_0);
    d[b] = fp16_to_f32(blk.d);
    int32_t s = 0;
    for (int j = 0; j < kQK8_0; ++j) s += qs[b * kQK8_0 + j] = blk.qs[j];
    sums[b] = s;
  }
}

void q8_k_sums32(const BlockQ8_K* x, int16_t* sums32, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b)
    for (int j = 0; j < 8; ++j) sums32[b * 8 + j] = static_cast<int16_t>(x[b].bsums[2 * j] + x[b].bsums[2 * j + 1]);
}

}  // namespace kvik
