// The per-ISA kernel table. Every entry has a generic (scalar reference) version in generic.cpp; faster
// versions live in one translation unit per ISA level (isa_avx2.cpp, isa_avx512.cpp, isa_amx.cpp) and are chosen once
// at start-up by cpu_kernels(). Tests compare each fast entry against the generic one.
#pragma once

#include <cstdint>
#include <string_view>
#include <type_traits>

#include "kernels/cpu/packed.h"
#include "tensor/dtype.h"
#include "tensor/k_quants.h"

namespace kvik {

// Activations for the Q8_0 / Q4_0 integer kernels: each row quantized per 32-element block exactly as llama.cpp's
// quantize_row_q8_0 (same q, same fp16-rounded d), stored as
//   qs: u8 q + 128 (vpdpbusd multiplies u8 by s8, so the weight is the signed side; the +128 is taken off with
//       128·Σw per block), blocks paired: bytes of blocks 2p and 2p+1 interleaved in 4-byte groups (act_q8_offset),
//       so one 64-byte load feeds both blocks with 32-bit lanes alternating between them; an odd last block is
//       stored plainly;
//   d:  the block scales as float.
// Row r starts at qs + r·nb·32 and d + r·nb.
struct ActQ8 {
  const uint8_t* qs;
  const float* d;
  int64_t nb;                // blocks per row
  const float* s = nullptr;  // per block d·Σq rounded through fp16, as ggml's Q8_1 (for Q4_1/Q5_1); row r at s + r·nb
};
// The s of ActQ8 for one row whose q are already in qs: fp16(Σq · amax/127) per block, as quantize_row_q8_1_ref.
void act_q8_sums(const float* x, const uint8_t* qs, float* s, int64_t n);
inline constexpr int64_t kActQ8MaxRows = 8;
inline constexpr int64_t kPackMaxTokens = 8;
inline constexpr int64_t kAmxMaxTokens = 16;  // rows of an AMX tile: the tokens one AMX kernel call takes
// Token tiles smaller than this stay on the x16 kernels (KVIK_AMX_MIN_TOKENS overrides; bench/amx_crossover.sh
// measures the crossover on an AMX CPU). Results are equal either way.
inline constexpr int64_t kAmxDefaultMinTokens = 8;
// Byte offset of element j (0..31) of block b within a row of the ActQ8 layout.
inline int64_t act_q8_offset(int64_t nb, int64_t b, int j) {
  if ((b | 1) >= nb) return 32 * b + j;  // unpaired last block
  return 64 * (b / 2) + 8 * (j / 4) + 4 * (b % 2) + j % 4;
}

// How the memory probe's reader loads: plain loads; non-temporal ones (vmovntdqa: a hint to keep the lines out of
// the caches, which write-back memory may ignore); plain loads with a software prefetch kStreamPrefetchBytes ahead.
enum class StreamLoad { kPlain, kNonTemporal, kPrefetch };
inline constexpr int64_t kStreamPrefetchBytes = 1024;

// The AMX-INT8 entries' signatures (below): weights with Q8_0-style and with Q8_K activations.
using AmxGemmQ8S = void(const uint8_t* groups, int64_t G, size_t group_bytes, int64_t nb, const ActQ8S& x, int64_t R,
                        float* y, int64_t ys);
using AmxGemmQ8KS = void(const uint8_t* groups, int64_t G, size_t group_bytes, int64_t nb, const ActQ8KS& x, int64_t R,
                         float* y, int64_t ys);

struct CpuKernels {
  std::string_view isa;  // "generic", "avx2", "avx512", "avx512_vnni"
  // Dot products of one weight row with one activation row (activation already in the weight's partner type).
  float (*dot_f32)(const float* w, const float* x, int64_t n);
  float (*dot_f16)(const uint16_t* w, const uint16_t* x, int64_t n);   // both fp16, f32 accumulation
  float (*dot_bf16)(const uint16_t* w, const uint16_t* x, int64_t n);  // both bf16, f32 accumulation
  // K-quant weights against Q8_K activations. Each block's integer sums are exact in every table; the float
  // combination across blocks may be ordered differently (vector lanes), within the summation bound.
  float (*dot_q4_k)(const BlockQ4_K* w, const BlockQ8_K* x, int64_t nblocks);
  float (*dot_q5_k)(const BlockQ5_K* w, const BlockQ8_K* x, int64_t nblocks);
  float (*dot_q6_k)(const BlockQ6_K* w, const BlockQ8_K* x, int64_t nblocks);
  // Four activation rows against one weight row: out[i] = dot(w, x + i·x_stride) (x_stride in elements for
  // plain types, in blocks for quantized ones), bit for bit what the single-row entry returns. The tiled matmul
  // uses them so that the weight row is loaded and unpacked once per four tokens without changing any result.
  void (*dot4_f16)(const uint16_t* w, const uint16_t* x, int64_t x_stride, int64_t n, float* out);
  void (*dot4_bf16)(const uint16_t* w, const uint16_t* x, int64_t x_stride, int64_t n, float* out);
  void (*dot4_q4_k)(const BlockQ4_K* w, const BlockQ8_K* x, int64_t x_stride, int64_t nblocks, float* out);
  void (*dot4_q5_k)(const BlockQ5_K* w, const BlockQ8_K* x, int64_t x_stride, int64_t nblocks, float* out);
  void (*dot4_q6_k)(const BlockQ6_K* w, const BlockQ8_K* x, int64_t x_stride, int64_t nblocks, float* out);
  // F32 register tile: out[t·out_stride + m] = dot(w + m·n, x + t·x_stride) for m < M ≤ 4 weight rows (row stride
  // n) and t < R ≤ 4 activation rows. Every entry is computed by the same instructions whatever M and R are.
  void (*tile_f32)(const float* w, int64_t M, const float* x, int64_t x_stride, int64_t R, int64_t n, float* out,
                   int64_t out_stride);
  // Attention over the KV cache (f32 or f16 rows): q·k scores and the weighted sum of v rows.
  float (*dot_f32_f16)(const float* x, const uint16_t* h, int64_t n);  // Σ x·h, h in fp16
  // out[0..d) = Σ_j p[j]·v[off[j] .. off[j] + d) (the attention-weighted sum of value rows at element offsets off).
  void (*wsum_f32)(const float* p, const float* v, const int64_t* off, int64_t n, int64_t d, float* out);
  void (*wsum_f16)(const float* p, const uint16_t* v, const int64_t* off, int64_t n, int64_t d, float* out);
  // out[j] = scale · q·k_j over key rows at element offsets off[j], j < n (the attention scores of one query row).
  void (*scores_f32)(const float* q, const float* k, const int64_t* off, int64_t n, int64_t d, float scale, float* out);
  void (*scores_f16)(const float* q, const uint16_t* k, const int64_t* off, int64_t n, int64_t d, float scale,
                     float* out);
  // Scores of nq query rows q + i·q_stride against the same n keys: out[i·out_stride + j] = scale · q_i·k_j. A
  // (query, key) score is computed by the same instructions whatever nq is and wherever the key sits in the call,
  // so a row's scores do not depend on the tile it is computed in (batch invariance). AVX-512 (d % 16 == 0) and AVX2
  // (d % 8 == 0, d ≤ 256): keys in the lanes, 16 at a time, the K rows transposed once for all queries.
  void (*scores_multi_f32)(const float* q, int64_t q_stride, int64_t nq, const float* k, const int64_t* off, int64_t n,
                           int64_t d, float scale, float* out, int64_t out_stride);
  void (*scores_multi_f16)(const float* q, int64_t q_stride, int64_t nq, const uint16_t* k, const int64_t* off,
                           int64_t n, int64_t d, float scale, float* out, int64_t out_stride);
  // Value sums of nq queries over the same n value rows: out[i·out_stride + c] = Σ_j p[i·p_stride + j]·v_j[c]. A
  // query's sum is the same instructions whatever nq is (AVX-512, AVX2: each value row loaded once for up to 4).
  void (*wsum_multi_f32)(const float* p, int64_t p_stride, int64_t nq, const float* v, const int64_t* off, int64_t n,
                         int64_t d, float* out, int64_t out_stride);
  void (*wsum_multi_f16)(const float* p, int64_t p_stride, int64_t nq, const uint16_t* v, const int64_t* off, int64_t n,
                         int64_t d, float* out, int64_t out_stride);
  // The same over quantized caches (element offsets as above; Q8_0: element e is q[e % 32] of block e / 32, so a
  // row may start inside a block when d_h < 32; FP8 E4M3: one byte per element, values before the tensor scale).
  void (*scores_q8_0)(const float* q, const BlockQ8_0* k, const int64_t* off, int64_t n, int64_t d, float scale,
                      float* out);
  void (*wsum_q8_0)(const float* p, const BlockQ8_0* v, const int64_t* off, int64_t n, int64_t d, float* out);
  void (*scores_fp8)(const float* q, const uint8_t* k, const int64_t* off, int64_t n, int64_t d, float scale,
                     float* out);
  void (*wsum_fp8)(const float* p, const uint8_t* v, const int64_t* off, int64_t n, int64_t d, float* out);
  // Their multi-query forms, as scores_multi_f16 / wsum_multi_f16 (the paged attention calls only these).
  void (*scores_multi_q8_0)(const float* q, int64_t q_stride, int64_t nq, const BlockQ8_0* k, const int64_t* off,
                            int64_t n, int64_t d, float scale, float* out, int64_t out_stride);
  void (*wsum_multi_q8_0)(const float* p, int64_t p_stride, int64_t nq, const BlockQ8_0* v, const int64_t* off,
                          int64_t n, int64_t d, float* out, int64_t out_stride);
  void (*scores_multi_fp8)(const float* q, int64_t q_stride, int64_t nq, const uint8_t* k, const int64_t* off,
                           int64_t n, int64_t d, float scale, float* out, int64_t out_stride);
  void (*wsum_multi_fp8)(const float* p, int64_t p_stride, int64_t nq, const uint8_t* v, const int64_t* off, int64_t n,
                         int64_t d, float* out, int64_t out_stride);
  // In-place numerically stable softmax.
  void (*softmax)(float* x, int64_t n);
  // gate[i] = silu(gate[i])·up[i] = gate[i] / (1 + e^−gate[i]) · up[i]
  void (*silu_mul)(float* gate, const float* up, int64_t n);
  // Activation conversions (the partner type of each weight type, as llama.cpp pairs them).
  // Q8_0 / Q4_0 weights against activations in the ActQ8 layout (below): out[r] = dot(w, activation row r) for
  // r < R, 1 ≤ R ≤ kActQ8MaxRows. Each row has its own accumulators updated by the same instructions whatever R is,
  // so a row's result never depends on R (batch invariance); the integer part of each block is exact.
  void (*gemv_q8_0)(const BlockQ8_0* w, const ActQ8& x, int64_t R, float* out);
  void (*gemv_q4_0)(const BlockQ4_0* w, const ActQ8& x, int64_t R, float* out);
  // The other 32-element types, as llama.cpp pairs them: Q5_0 / IQ4_NL with Q8_0 activations (per block
  // Σq_w·q_x · (d_w·d_x)), Q4_1 / Q5_1 with Q8_1 ones (plus m_w·s_x per block, x.s required).
  void (*gemv_q4_1)(const BlockQ4_1* w, const ActQ8& x, int64_t R, float* out);
  void (*gemv_q5_0)(const BlockQ5_0* w, const ActQ8& x, int64_t R, float* out);
  void (*gemv_q5_1)(const BlockQ5_1* w, const ActQ8& x, int64_t R, float* out);
  void (*gemv_iq4_nl)(const BlockIQ4_NL* w, const ActQ8& x, int64_t R, float* out);
  // One activation row into the ActQ8 layout: the q and d of quantize_row_q8_0, bit for bit.
  void (*quantize_act_q8)(const float* x, uint8_t* qs, float* d, int64_t n);
  void (*quantize_q8_k)(const float* x, BlockQ8_K* y, int64_t n);  // bit-exact with quantize_row_q8_k
  // Weights repacked at load (kernels/cpu/packed.h): one 16-row group against R ≤ kPackMaxTokens activation rows,
  // y[t·ys + i] = dot(row i of the group, activation row t); bit for bit the *_x16_ref functions, so every row's
  // result is independent of R. Null in tables without them: weights then stay unpacked.
  void (*gemm_f32_x16)(const uint8_t* group, int64_t n, const float* x, int64_t xs, int64_t R, float* y,
                       int64_t ys) = nullptr;
  // F16 / BF16 groups against activations rounded through the weight's type (as f32, round_through_half).
  void (*gemm_f16_x16)(const uint8_t* group, int64_t n, const float* x, int64_t xs, int64_t R, float* y,
                       int64_t ys) = nullptr;
  // BF16: G ≥ 1 consecutive groups (group_bytes apart), y[t·ys + 16·j + i] for group j; each group's result is
  // gemm_bf16_x16_ref's bit for bit (several groups only give the few-token case more independent fma chains).
  void (*gemm_bf16_x16)(const uint8_t* groups, int64_t G, size_t group_bytes, int64_t n, const float* x, int64_t xs,
                        int64_t R, float* y, int64_t ys) = nullptr;
  // BF16 on vdpbf16ps (AVX512_BF16): as gemm_bf16_x16, against activation rows as bf16_pair_activations with swap
  // (packed.h), row t at x + t·xs (xs ≥ n rounded up to even); bit for bit gemm_bf16_x16 wherever no denormal occurs.
  // Null where the CPU has no AVX512_BF16: packed BF16 matmuls then use gemm_bf16_x16.
  void (*gemm_bf16_dp_x16)(const uint8_t* groups, int64_t G, size_t group_bytes, int64_t n, const uint16_t* x,
                           int64_t xs, int64_t R, float* y, int64_t ys) = nullptr;
  void (*gemm_q8_0_x16)(const uint8_t* group, int64_t nb, const ActQ8S& x, int64_t R, float* y, int64_t ys) = nullptr;
  void (*gemm_q4_0_x16)(const uint8_t* group, int64_t nb, const ActQ8S& x, int64_t R, float* y, int64_t ys) = nullptr;
  void (*gemm_iq4_nl_x16)(const uint8_t* group, int64_t nb, const ActQ8S& x, int64_t R, float* y, int64_t ys) = nullptr;
  void (*gemm_q5_0_x16)(const uint8_t* group, int64_t nb, const ActQ8S& x, int64_t R, float* y, int64_t ys) = nullptr;
  void (*gemm_q4_1_x16)(const uint8_t* group, int64_t nb, const ActQ8S& x, int64_t R, float* y, int64_t ys) = nullptr;
  void (*gemm_q5_1_x16)(const uint8_t* group, int64_t nb, const ActQ8S& x, int64_t R, float* y, int64_t ys) = nullptr;
  void (*gemm_q4_k_x16)(const uint8_t* group, int64_t nb, const ActQ8KS& x, int64_t R, float* y, int64_t ys) = nullptr;
  void (*gemm_q5_k_x16)(const uint8_t* group, int64_t nb, const ActQ8KS& x, int64_t R, float* y, int64_t ys) = nullptr;
  void (*gemm_q6_k_x16)(const uint8_t* group, int64_t nb, const ActQ8KS& x, int64_t R, float* y, int64_t ys) = nullptr;
  // One activation row into ActQ8S (quantize_act_q8s_ref bit for bit); null where the packed kernels are.
  void (*quantize_act_q8s)(const float* x, int8_t* qs, float* d, int32_t* sums, int64_t n) = nullptr;
  void (*to_f16)(const float* x, uint16_t* y, int64_t n);
  // AMX-INT8 (kernels/cpu/amx_gemm.h): G ≥ 1 consecutive full 16-row groups (group_bytes apart) of a packed weight
  // against R ≤ kAmxMaxTokens activation rows, y[t·ys + 16·j + i] = dot(row i of group j, activation row t): bit for
  // bit what the x16 kernels give (the integer sums are exact; the float epilogue is their fmas in their order), so a
  // token's result does not depend on whether its batch ran on tiles. Null where the CPU has no usable AMX.
  AmxGemmQ8S* amx_q8_0 = nullptr;
  AmxGemmQ8S* amx_q4_0 = nullptr;
  AmxGemmQ8S* amx_iq4_nl = nullptr;
  AmxGemmQ8S* amx_q5_0 = nullptr;
  AmxGemmQ8S* amx_q4_1 = nullptr;
  AmxGemmQ8S* amx_q5_1 = nullptr;
  AmxGemmQ8KS* amx_q4_k = nullptr;
  AmxGemmQ8KS* amx_q5_k = nullptr;
  AmxGemmQ8KS* amx_q6_k = nullptr;
  // AMX-BF16: G full groups of a packed BF16 weight against R ≤ kAmxMaxTokens rows of bf16_pair_activations (packed.h,
  // no swap; row t at x + t·nblk·32, nblk = bf16_blocks(n)), y as above: bit for bit gemm_bf16_x16's result (one fp32
  // sum per output, inputs in order) wherever no denormal occurs. Null where the CPU has no usable AMX-BF16.
  void (*amx_bf16)(const uint8_t* groups, int64_t G, size_t group_bytes, int64_t nblk, const uint16_t* x, int64_t R,
                   float* y, int64_t ys) = nullptr;
  void (*to_bf16)(const float* x, uint16_t* y, int64_t n);
  // y = x rounded through fp16 (bf16) and widened back, round_through_half bit for bit: the input of packed F16
  // (BF16) weights. Null in tables without packed F16 / BF16 kernels.
  void (*round_f16)(const float* x, float* y, int64_t n) = nullptr;
  void (*round_bf16)(const float* x, float* y, int64_t n) = nullptr;
  // The memory probe's reader (memory_bandwidth.h): the wrapping sum of the 64-bit words of p[0 .. bytes), p 64-byte
  // aligned and bytes a multiple of 64, read with the table's widest loads in the given way. Every table returns the
  // same sum; only the speed differs.
  uint64_t (*stream_sum)(const uint8_t* p, int64_t bytes, StreamLoad how) = nullptr;
  // The cache types (kSpreadF32 ...) whose next chunk's rows the paged attention hands to the multi-query kernels
  // (AttentionPrefetch, below) to prefetch spread over their work; it prefetches the others' all at once itself. A
  // table with any bit set has multi-query kernels that take a hand-over whatever the type. Each table sets the bits
  // of the types that decode faster spread than with the burst (bench_attention --layers 16 --keys 8192): the AVX2
  // table every type, the AVX-512 table Q8_0 and FP8 (its f16 / f32 kernels run faster with the burst).
  uint8_t spreads_attention_prefetch = 0;
};

// A tile made of single-row calls (for tables without a fused version).
template <float (*Dot)(const float*, const float*, int64_t)>
void tile_by_rows(const float* w, int64_t M, const float* x, int64_t xs, int64_t R, int64_t n, float* out, int64_t os) {
  for (int64_t t = 0; t < R; ++t)
    for (int64_t m = 0; m < M; ++m) out[t * os + m] = Dot(w + m * n, x + t * xs, n);
}

// The K or V rows of the paged attention's next chunk (element offsets into `cache`, as the kernels' own `off`), for
// a multi-query kernel to prefetch a row or two at a time while it works through the current chunk. The paged
// attention sets it on its thread just before a scores_multi_* / wsum_multi_* call where the table's
// spreads_attention_prefetch has the cache type's bit, and the call takes it (take_attention_prefetch; a path of the
// kernel that does not spread prefetches it all at once: burst_attention_prefetch); for other types and tables the
// paged attention prefetches the next chunk itself, all at the chunk's start. That burst of 128 prefetches can stall
// on the core's outstanding misses instead of overlapping the work, while some kernels run faster with it; which one
// each table uses per type is spreads_attention_prefetch, above.
inline constexpr uint8_t kSpreadF32 = 1, kSpreadF16 = 2, kSpreadQ8_0 = 4, kSpreadFp8 = 8;
struct AttentionPrefetch {
  const void* cache = nullptr;
  const int64_t* off = nullptr;
  int64_t n = 0;  // rows
};
inline thread_local AttentionPrefetch t_attention_prefetch;
inline AttentionPrefetch take_attention_prefetch() {
  const AttentionPrefetch p = t_attention_prefetch;
  t_attention_prefetch = AttentionPrefetch{};
  return p;
}
// The cache row of d elements from element e (a K or V row; Q8_0: the blocks holding it) prefetched into L2: a KV
// head's rows are a row of every slot apart in blocks anywhere in the pool, which the hardware prefetchers do not
// follow.
template <typename KV>
inline void prefetch_kv_row(const void* cache, int64_t e, int64_t d) {
  const char* p = static_cast<const char*>(cache);
  int64_t bytes;
  if constexpr (std::is_same_v<KV, BlockQ8_0>)
    p += e / 32 * int64_t{sizeof(BlockQ8_0)}, bytes = (d + 31) / 32 * int64_t{sizeof(BlockQ8_0)};
  else
    p += e * int64_t{sizeof(KV)}, bytes = d * int64_t{sizeof(KV)};
  for (int64_t x = 0; x < bytes; x += 64) __builtin_prefetch(p + x, 0, 2);
}
// The hand-over taken and all its rows prefetched at once: for a kernel's path that does not spread them (a head
// size its multi-query loops do not take), so the next chunk is still on its way.
template <typename KV>
inline void burst_attention_prefetch(int64_t d) {
  const AttentionPrefetch p = take_attention_prefetch();
  for (int64_t j = 0; j < p.n; ++j) prefetch_kv_row<KV>(p.cache, p.off[j], d);
}

// A four-row entry made of four single-row calls (for tables without a fused version).
template <typename W, typename X, float (*Dot)(const W*, const X*, int64_t)>
void dot4_by_rows(const W* w, const X* x, int64_t x_stride, int64_t n, float* out) {
  for (int i = 0; i < 4; ++i) out[i] = Dot(w, x + i * x_stride, n);
}

// Scores made of single-row dot products (for tables without a fused version).
template <typename KV, float (*Dot)(const float*, const KV*, int64_t)>
void scores_by_rows(const float* q, const KV* k, const int64_t* off, int64_t n, int64_t d, float scale, float* out) {
  for (int64_t j = 0; j < n; ++j) out[j] = Dot(q, k + off[j], d) * scale;
}

// Multi-query scores as one single-query call per query (tables without a keys-in-lanes version).
template <typename KV, void (*Scores)(const float*, const KV*, const int64_t*, int64_t, int64_t, float, float*)>
void scores_multi_by_rows(const float* q, int64_t q_stride, int64_t nq, const KV* k, const int64_t* off, int64_t n,
                          int64_t d, float scale, float* out, int64_t out_stride) {
  for (int64_t i = 0; i < nq; ++i) Scores(q + i * q_stride, k, off, n, d, scale, out + i * out_stride);
}

template <typename KV, void (*Wsum)(const float*, const KV*, const int64_t*, int64_t, int64_t, float*)>
void wsum_multi_by_rows(const float* p, int64_t p_stride, int64_t nq, const KV* v, const int64_t* off, int64_t n,
                        int64_t d, float* out, int64_t out_stride) {
  for (int64_t i = 0; i < nq; ++i) Wsum(p + i * p_stride, v, off, n, d, out + i * out_stride);
}

const CpuKernels& generic_kernels();
const CpuKernels* avx2_kernels();  // nullptr when not compiled in
// The AVX2 table with vpdpbusd (AVX-VNNI) in the packed integer kernels (the 32-element block types and K-quants).
const CpuKernels* avx_vnni_kernels();
bool cpu_has_avx_vnni();             // AVX2, FMA and AVX-VNNI (the avx_vnni table's instructions)
const CpuKernels* avx512_kernels();  // nullptr when not compiled in
// The AVX-512 table plus gemm_bf16_dp_x16, for CPUs that also have AVX512_BF16.
const CpuKernels* avx512_bf16_kernels();

// The best table this CPU supports, chosen on first use: AMX-INT8 where amx_support.h allows it, else AVX-512 with
// AVX512_BF16, AVX-512, AVX2 with AVX-VNNI, AVX2 or generic (KVIK_ISA=generic|avx2|avx_vnni|avx512|avx512_bf16|amx
// caps the level).
const CpuKernels& cpu_kernels();
// Tests only: cpu_kernels() returns *k until called again with nullptr (an emulated AMX table on CPUs without AMX).
void override_cpu_kernels_for_testing(const CpuKernels* k);

}  // namespace kvik
