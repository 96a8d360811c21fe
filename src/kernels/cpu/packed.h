// Weights repacked once at load for kernels whose SIMD lanes run across output rows (the idea behind llama.cpp's
// repacked "q4_0 8x8" CPU tensor types). Sixteen consecutive rows form a group; inside a group every 32-element
// block is stored 4-byte k-group by k-group: elements 4g..4g+3 of row 0, of row 1, …, of row 15. One 64-byte load
// then holds the same four inputs' weights for 16 outputs, one vpdpbusd with the activation's 4 bytes broadcast
// gives 16 partial dot products, and each block's scales are applied once per (group, token, block) instead of
// once per (row, token, block).
//
// Weights are the unsigned operand (u8), activations the signed one (s8): Q8_0 stores q + 128 and the other types
// their quants as they are; the offset comes off exactly with the activation block's Σx (−128·Σx, −8·Σx). The
// Q4_K/Q5_K min term is Σ_j m_j·Σx_j over 32-element sub-blocks, as ggml computes it.
//
// Group layouts (nb blocks per row; a last partial group is padded with zero rows):
//   F32:  [cols][16 rows] floats (each input's 16 weights side by side; FMA with the input broadcast).
//   F16:  [cols][16 rows] of the 16-bit values (widened to f32 per load; the input is rounded through the same
//         16-bit type first, as llama.cpp pairs F16 weights with F16 activations, then FMA'd as F32's).
//   BF16: as F16, but inputs in pairs: [cols / 2][16 rows][2] (row i's inputs 2p and 2p + 1 side by side in one
//         32-bit word; an odd last input gets a zero partner), padded with zeros to whole 32-input blocks. One
//         64-byte load then gives the even inputs' weights (word << 16) and the odd ones' (word & 0xFFFF0000) for
//         the FMA kernels, or, each word rotated by 16 bits, a vdpbf16ps operand (AVX512_BF16); and each 1 KiB block
//         is exactly an AMX-BF16 B tile (16 pair rows × 16 outputs × 2). All of them add a row's products in one
//         fp32 sum in input order (gemm_bf16_x16_ref).
//   Q8_0: per block qs [8 k-groups][16 rows][4] u8 (q + 128) (Q = 512 bytes) and d [16] fp16;
//   Q4_0: per block qs [4 v][16 rows][4]: low nibble = element 4v + e, high nibble = element 16 + 4v + e
//         (Q = 256 bytes) and d [16] fp16;
//   IQ4_NL: Q4_0's layout (its nibbles are codebook indices); the kernels look each index up as
//         kIQ4NLValues + 128 (u8) and take 128·Σx off.
//   Q5_0: Q4_0's nibbles, then the fifth bits fb [16 rows][4] (bit v of byte e = element 4v + e, bit 4 + v =
//         element 16 + 4v + e), as one 320-byte quant record (Q = 320); the kernels or bit 4 in (u8 q + 16, 0..31)
//         and take 16·Σx off.
//         all four with blocks in pairs: [qs of block 2p][qs of 2p + 1][d of 2p][d of 2p + 1] (a multiple of 64 bytes;
//         an odd last block gets a zero partner), so quants and scales arrive in one sequential stream.
//   Q4_1 / Q5_1 (x = d·q + m, q unsigned: no offset): Q4_0's / Q5_0's quant record, and per pair the mins after
//         the scales: [qs of 2p][qs of 2p + 1][d of 2p][d of 2p + 1][m of 2p][m of 2p + 1] (m [16] fp16; 128 scale
//         bytes per pair instead of 64). The min term of a block is m_w·s_x with s_x = d_x·Σx rounded to float.
//   Q4_K: per 256-element super-block (2368 bytes, a multiple of 64):
//         qs [8 sub-blocks j][4 v][16 rows][4]: low nibble = element 32j + 4v + e, high = 32j + 16 + 4v + e;
//         d [16] fp16, dmin [16] fp16, sc [8 j][16 rows] u8, m [4 pairs p][16 rows][2] u8 (m_2p, m_2p+1).
//   Q5_K: as Q4_K with the fifth bits after the nibbles (2880 bytes): fb [8 j][16 rows][4]: bit v of byte e =
//         element 32j + 4v + e, bit 4 + v = element 32j + 16 + 4v + e.
//   Q6_K: per super-block (3392 bytes): 8 chunks c of 32 elements, 384 bytes each: 4 nibble vectors as Q4_K's
//         (low nibble = element 32c + 4v + e, sub-block 2c; high = 32c + 16 + 4v + e, sub-block 2c + 1), then two
//         vectors of high bit pairs [16 rows][4] (bits 2v..2v+1 of byte e: element 32c + 4v + e, then 32c + 16 +
//         4v + e). The chunks go in pairs p (832 bytes): the scale line of chunks 2p and 2p + 1, sc [2 c][16 rows]
//         [2] s8 (sc_2c, sc_2c+1), then the two chunks; after the 4 pairs d [16] fp16 and 32 bytes of padding. A
//         kernel reads the record in address order (with all scales at the record's end each chunk reaches far
//         ahead for its scales, and the kernels stream slower: bench_matmul_packed --types q6_k). The −32 offset
//         comes off as −32·Σ_j sc_j·bsums_j (vpdpwssd with −32·sc pairs).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "tensor/k_quants.h"
#include "tensor/tensor.h"

namespace kvik {

inline constexpr int64_t kPackRows = 16;

// Activations for packed Q8_0 / Q4_0: quantize_row_q8_0's q (plain s8) and d (as float) per 32-element block, and
// Σq per block. Row r starts at qs + r·nb·32, d + r·nb, sums + r·nb.
struct ActQ8S {
  const int8_t* qs;
  const float* d;
  const int32_t* sums;
  int64_t nb;
};

// Activations for packed Q4_K / Q5_K / Q6_K: Q8_K blocks (row r at x + r·nb) and their 32-element sums, 8 per
// block (sums32[(r·nb + b)·8 + j] = bsums[2j] + bsums[2j + 1]; Q6_K does not read them).
struct ActQ8KS {
  const BlockQ8_K* x;
  const int16_t* sums32;
  int64_t nb;
};

// Packed BF16: inputs per block (one AMX tile's depth), bytes per block of a group, blocks per row, and the index
// of weight (k, row i) among a group's 16-bit values.
inline constexpr int64_t kBF16TileK = 32, kBF16PackedBlock = kBF16TileK * kPackRows * 2;
inline constexpr int64_t bf16_blocks(int64_t cols) { return (cols + kBF16TileK - 1) / kBF16TileK; }
inline constexpr int64_t packed_bf16_index(int64_t k, int i) { return (k / 2) * 2 * kPackRows + 2 * i + k % 2; }

// The packed kernels' software prefetch of a streamed weight group: the `bytes` starting kAhead bytes past p, line by
// line into L1 (prefetcht0; past the end of an allocation it is harmless, no fault). Each kernel family keeps its own
// distance with the measurement behind it (isa_avx512_common.h, avx2_int8.h).
template <int64_t kAhead>
inline void prefetch_span_ahead(const uint8_t* p, int64_t bytes) {
  for (int64_t o = 0; o < bytes; o += 64) __builtin_prefetch(p + kAhead + o, 0, 3);
}

// Offsets of block b's quants, scales and (Q4_1 / Q5_1) mins in a Q8_0 / Q4_0 group with Q quant bytes per block
// and S scale bytes per pair of blocks (64: d only; kMinPairScales: d and m).
inline constexpr int64_t kPairScales = 64, kMinPairScales = 128;
inline constexpr int64_t packed_qs_offset(int64_t b, int64_t Q, int64_t S = kPairScales) {
  return (b / 2) * (2 * Q + S) + (b % 2) * Q;
}
inline constexpr int64_t packed_d_offset(int64_t b, int64_t Q, int64_t S = kPairScales) {
  return (b / 2) * (2 * Q + S) + 2 * Q + (b % 2) * 32;
}
inline constexpr int64_t packed_m_offset(int64_t b, int64_t Q) { return packed_d_offset(b, Q, kMinPairScales) + 64; }
inline constexpr int64_t kQ8_0PackedQs = 512, kQ4_0PackedQs = 256, kQ5_0PackedQs = 320;

// Byte offsets inside a packed K-quant super-block record.
struct PackedKScaleMin {
  int64_t fifth, d, dmin, sc, m, record;
};
inline constexpr PackedKScaleMin kPackedQ4K{0, 2048, 2080, 2112, 2240, 2368};
inline constexpr PackedKScaleMin kPackedQ5K{2048, 2560, 2592, 2624, 2752, 2880};
inline constexpr int64_t kQ6KChunk = 384, kQ6KPair = 64 + 2 * kQ6KChunk, kQ6KD = 4 * kQ6KPair,
                         kQ6KRecord = kQ6KD + 64;  // d, then 32 bytes of padding: 53 whole lines
inline constexpr int64_t q6_k_sc_offset(int c) { return c / 2 * kQ6KPair + c % 2 * 32; }  // chunk c's 32 scale bytes
inline constexpr int64_t q6_k_chunk_offset(int c) { return c / 2 * kQ6KPair + 64 + c % 2 * kQ6KChunk; }

// Bytes of one 16-row group of a weight with `cols` inputs, or 0 when the type has no packed layout.
size_t packed_group_bytes(DType t, int64_t cols);

struct AlignedFree {
  void operator()(uint8_t* p) const;
};
using PackedBuffer = std::unique_ptr<uint8_t[], AlignedFree>;

// Bytes of w in the packed layout (a multiple of 64; 0 when its type has none).
size_t packed_bytes(const WeightMatrix& w);
// A buffer for packed weights: 64-byte aligned; from 2 MiB up, 2 MiB-aligned and advised for huge pages.
PackedBuffer allocate_packed(size_t bytes);
// Packs rows [16·gi, 16·gi + 16) of w (those that exist; the rest are zero padding) into the group at g
// (packed_group_bytes bytes), on the calling thread. Throws kvik::Error for a type without a packed layout.
void pack_group(const WeightMatrix& w, int64_t gi, uint8_t* g);
// Packs w's rows into dst (packed_bytes(w) bytes, 64-byte aligned; groups in parallel on the thread pool) and
// points w.packed at it. Throws kvik::Error for a type without a packed layout.
void pack_into(WeightMatrix& w, uint8_t* dst);
// w's rows in the packed layout in a new buffer, whatever the CPU (w itself is left alone); empty when w's type
// has no packed layout.
PackedBuffer pack_rows(const WeightMatrix& w);
// Repacks w into a new buffer and points w.packed at it (the caller keeps the buffer alive as long as w is used).
// Returns an empty buffer and leaves w alone when w's type has no packed layout or the running CPU's kernel table
// has no kernel for it.
PackedBuffer pack_weight(WeightMatrix& w);
// Whether pack_weight would pack a weight of this type on this CPU.
bool packable(DType t);

// Scalar references of the packed kernels (the AVX-512 ones must equal them bit for bit: the integer sums are
// exact and the float operations are the same fmas in the same order). y[t·ys + i] for token t < R, row i < 16.
// F32: two partial sums per (row, token), over even and odd inputs, added at the end.
void gemm_f32_x16_ref(const uint8_t* group, int64_t n, const float* x, int64_t xs, int64_t R, float* y, int64_t ys);
// F16: F32's two sums over the widened weights; x holds the activations already rounded through fp16
// (round_through_half), as f32.
// BF16: one fp32 sum per (row, token) over all inputs in order, acc = fma(x[k], w[k], acc) for k = 0, 1, ..: the order
// in which AMX-BF16 (tdpbf16ps: a pair's even input, then its odd one) and the vdpbf16ps kernel (weights and inputs
// with each pair's halves swapped, bf16_pair_activations) add a row's products. The products of bf16 values are
// exact in fp32, so each fma rounds as the instructions' add does; the instructions also read denormal inputs and
// write denormal sums as zero, which this reference does not (the only place they can differ). x: activations
// rounded through bf16, as f32.
void gemm_f16_x16_ref(const uint8_t* group, int64_t n, const float* x, int64_t xs, int64_t R, float* y, int64_t ys);
void gemm_bf16_x16_ref(const uint8_t* group, int64_t n, const float* x, int64_t xs, int64_t R, float* y, int64_t ys);
// One activation row for the bf16-pair kernels: bf16_blocks(n) · 32 bf16 values, x rounded as f32_to_bf16 (by to_bf16
// when given: a table's to_bf16, the same bits), zeros after n. As is (swap false) it is a row of AMX-BF16 A tiles:
// word p holds inputs 2p (low half) and 2p + 1 (high half). With swap, each word's halves are exchanged, input 2p in
// the high half, which vdpbf16ps adds first (gemm_bf16_dp_x16).
using ToBF16 = void (*)(const float* x, uint16_t* y, int64_t n);
void bf16_pair_activations(const float* x, int64_t n, bool swap, uint16_t* out, ToBF16 to_bf16 = nullptr);
// y[i] = x[i] rounded to fp16 (bf16 when !f16, nearest even as f32_to_fp16 / f32_to_bf16) and widened back.
void round_through_half(const float* x, float* y, int64_t n, bool f16);
void gemm_q8_0_x16_ref(const uint8_t* group, int64_t nb, const ActQ8S& x, int64_t R, float* y, int64_t ys);
void gemm_q4_0_x16_ref(const uint8_t* group, int64_t nb, const ActQ8S& x, int64_t R, float* y, int64_t ys);
void gemm_iq4_nl_x16_ref(const uint8_t* group, int64_t nb, const ActQ8S& x, int64_t R, float* y, int64_t ys);
void gemm_q5_0_x16_ref(const uint8_t* group, int64_t nb, const ActQ8S& x, int64_t R, float* y, int64_t ys);
// Q4_1 / Q5_1: per block s = fma(float(Σq_w·q_x), d_w·d_x, s), then s = fma(m_w, d_x·float(Σx), s).
void gemm_q4_1_x16_ref(const uint8_t* group, int64_t nb, const ActQ8S& x, int64_t R, float* y, int64_t ys);
void gemm_q5_1_x16_ref(const uint8_t* group, int64_t nb, const ActQ8S& x, int64_t R, float* y, int64_t ys);
void gemm_q4_k_x16_ref(const uint8_t* group, int64_t nb, const ActQ8KS& x, int64_t R, float* y, int64_t ys);
void gemm_q5_k_x16_ref(const uint8_t* group, int64_t nb, const ActQ8KS& x, int64_t R, float* y, int64_t ys);
void gemm_q6_k_x16_ref(const uint8_t* group, int64_t nb, const ActQ8KS& x, int64_t R, float* y, int64_t ys);
// One activation row into ActQ8S: the q and d of quantize_row_q8_0, bit for bit, and the block sums.
void quantize_act_q8s_ref(const float* x, int8_t* qs, float* d, int32_t* sums, int64_t n);
// The 32-element sums of nb Q8_K blocks.
void q8_k_sums32(const BlockQ8_K* x, int16_t* sums32, int64_t nb);

}  // namespace kvik
