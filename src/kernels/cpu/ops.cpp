#include "kernels/cpu/ops.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "core/error.h"
#include "core/fp16.h"
#include "core/thread_pool.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/parallel.h"

namespace kvik {
namespace {

using cpu_detail::kMinParallelWork;
using cpu_detail::kRowsPerTask;
using cpu_detail::scratch;
using cpu_detail::split;
using cpu_detail::split_balanced;

// The input of one or more matmuls converted once to what each weight type multiplies with (llama.cpp's pairing):
// f16 for F16, bf16 for BF16, ActQ8 for Q8_0/Q4_0/Q5_0/IQ4_NL (with Q8_1 block sums for Q4_1/Q5_1), Q8_K for the
// K-quants; F32 reads x itself. Repacked weights
// (packed.h): ActQ8S for Q8_0/Q4_0/IQ4_NL/Q5_0/Q4_1/Q5_1, Q8_K plus its 32-element sums for Q4_K/Q5_K, Q8_K for Q6_K.
struct PreparedInput {
  const float* x = nullptr;
  int64_t T = 0, n = 0;
  int64_t t0 = 0;  // the first converted row this view reads (matmul_grouped: one group's rows of a shared input)
  std::vector<uint16_t>* f16 = nullptr;
  std::vector<uint16_t>* bf16 = nullptr;
  std::vector<uint8_t>* act_qs = nullptr;
  std::vector<float>* act_d = nullptr;
  std::vector<float>* act_s = nullptr;  // with act_qs: Q8_1's per-block d·Σq (Q4_1 / Q5_1)
  std::vector<BlockQ8_K>* q8k = nullptr;
  std::vector<int8_t>* act_s_qs = nullptr;  // ActQ8S (packed Q8_0 / Q4_0)
  std::vector<float>* act_s_d = nullptr;
  std::vector<int32_t>* act_s_sums = nullptr;
  std::vector<int16_t>* q8k_sums32 = nullptr;  // with q8k, for packed Q4_K / Q5_K
  std::vector<float>* x_f16 = nullptr;         // x rounded through fp16, as f32 (packed F16)
  std::vector<float>* x_bf16 = nullptr;        // through bf16 (packed BF16)
  // bf16_pair_activations rows (packed BF16), t·bf16_blocks(n)·32 values apart: plain (AMX-BF16 tiles) and with
  // each pair's halves swapped (gemm_bf16_dp_x16).
  std::vector<uint16_t>* x_bf16_tiles = nullptr;
  std::vector<uint16_t>* x_bf16_dp = nullptr;
};

// Tokens below which a packed matmul stays on the x16 kernels rather than AMX tiles (KVIK_AMX_MIN_TOKENS, 1..16).
int64_t amx_min_tokens() {
  static const int64_t n = [] {
    const char* e = std::getenv("KVIK_AMX_MIN_TOKENS");
    const int64_t v = e ? std::atoll(e) : kAmxDefaultMinTokens;
    return std::clamp<int64_t>(v, 1, kAmxMaxTokens);
  }();
  return n;
}

// Which conversion a weight type needs (one per kind and input).
enum class Partner { kF32, kF16, kBF16, kActQ8, kActQ8Sums, kQ8K, kActQ8S, kQ8KSums, kF16Wide, kBF16Wide, kCount };
Partner partner_of(const WeightMatrix& w) {
  if (w.packed) {
    switch (w.dtype) {
      case DType::F32: return Partner::kF32;
      case DType::F16: return Partner::kF16Wide;
      case DType::BF16: return Partner::kBF16Wide;
      case DType::Q4_K:
      case DType::Q5_K: return Partner::kQ8KSums;
      case DType::Q6_K: return Partner::kQ8K;
      default: return Partner::kActQ8S;
    }
  }
  switch (w.dtype) {
    case DType::F32: return Partner::kF32;
    case DType::F16: return Partner::kF16;
    case DType::BF16: return Partner::kBF16;
    case DType::Q8_0:
    case DType::Q4_0:
    case DType::Q5_0:
    case DType::IQ4_NL: return Partner::kActQ8;
    case DType::Q4_1:
    case DType::Q5_1: return Partner::kActQ8Sums;
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K: return Partner::kQ8K;
    default: fail("matmul: no kernel for weight type {}", dtype_name(w.dtype));
  }
}

// Packed BF16's pair rows: swapped for the vdpbf16ps kernel where the table has it, plain for AMX-BF16 tiles where
// the matmul gives them tokens (T ≥ amx_min_tokens()). Rows split across threads.
void prepare_bf16_pairs(PreparedInput& in, const CpuKernels& k) {
  const int64_t T = in.T, n = in.n, row = bf16_blocks(n) * kBF16TileK;
  const auto fill = [&](std::vector<uint16_t>& buf, bool swap) {
    uint16_t* out = scratch(buf, static_cast<size_t>(T * row));
    split(T, T * n * 4, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) bf16_pair_activations(in.x + t * n, n, swap, out + t * row, k.to_bf16);
    });
    return &buf;
  };
  thread_local std::vector<uint16_t> dp_buf, tiles_buf;
  if (k.gemm_bf16_dp_x16) in.x_bf16_dp = fill(dp_buf, true);
  if (k.amx_bf16 && T >= amx_min_tokens()) in.x_bf16_tiles = fill(tiles_buf, false);
}

// Converts x into the partner type's thread-local buffers, rows split across threads for large inputs.
void prepare(PreparedInput& in, Partner p) {
  const CpuKernels& k = cpu_kernels();
  const int64_t T = in.T, n = in.n;
  const float* x = in.x;
  switch (p) {
    case Partner::kF32: return;
    case Partner::kF16:
    case Partner::kBF16: {
      thread_local std::vector<uint16_t> f16_buf, bf16_buf;
      std::vector<uint16_t>& buf = p == Partner::kF16 ? f16_buf : bf16_buf;
      uint16_t* h = scratch(buf, static_cast<size_t>(T * n));
      auto conv = p == Partner::kF16 ? k.to_f16 : k.to_bf16;
      split(T, T * n * 16, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) conv(x + t * n, h + t * n, n);
      });
      (p == Partner::kF16 ? in.f16 : in.bf16) = &buf;
      return;
    }
    case Partner::kF16Wide:
    case Partner::kBF16Wide: {
      const bool f16 = p == Partner::kF16Wide;
      if (!f16) prepare_bf16_pairs(in, k);
      if (!f16 && k.gemm_bf16_dp_x16) return;  // no x16 kernel reads the f32 rows
      thread_local std::vector<float> f16_buf, bf16_buf;
      float* h = scratch(f16 ? f16_buf : bf16_buf, static_cast<size_t>(T * n));
      auto round = f16 ? k.round_f16 : k.round_bf16;  // present wherever packed F16 / BF16 kernels are
      split(T, T * n * 4, [&](int64_t t0, int64_t t1) { round(x + t0 * n, h + t0 * n, (t1 - t0) * n); });
      (f16 ? in.x_f16 : in.x_bf16) = f16 ? &f16_buf : &bf16_buf;
      return;
    }
    case Partner::kActQ8Sums: {
      if (!in.act_qs) prepare(in, Partner::kActQ8);
      thread_local std::vector<float> sums;
      const int64_t nb = n / kQK8_0;
      float* ss = scratch(sums, static_cast<size_t>(T * nb));
      const uint8_t* q = in.act_qs->data();
      split(T, T * n * 4, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) act_q8_sums(x + t * n, q + t * n, ss + t * nb, n);
      });
      in.act_s = &sums;
      return;
    }
    case Partner::kActQ8: {
      if (in.act_qs) return;  // already converted (kActQ8Sums converts through here too)
      thread_local std::vector<uint8_t> qs;
      thread_local std::vector<float> d;
      const int64_t nb = n / kQK8_0;
      uint8_t* q = scratch(qs, static_cast<size_t>(T * n));
      float* dd = scratch(d, static_cast<size_t>(T * nb));
      split(T, T * n * 16, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) k.quantize_act_q8(x + t * n, q + t * n, dd + t * nb, n);
      });
      in.act_qs = &qs, in.act_d = &d;
      return;
    }
    case Partner::kActQ8S: {
      thread_local std::vector<int8_t> qs;
      thread_local std::vector<float> d;
      thread_local std::vector<int32_t> sums;
      const int64_t nb = n / kQK8_0;
      int8_t* q = scratch(qs, static_cast<size_t>(T * n));
      float* dd = scratch(d, static_cast<size_t>(T * nb));
      int32_t* ss = scratch(sums, static_cast<size_t>(T * nb));
      split(T, T * n * 16, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) k.quantize_act_q8s(x + t * n, q + t * n, dd + t * nb, ss + t * nb, n);
      });
      in.act_s_qs = &qs, in.act_s_d = &d, in.act_s_sums = &sums;
      return;
    }
    case Partner::kQ8KSums: {
      prepare(in, Partner::kQ8K);
      thread_local std::vector<int16_t> sums;
      const int64_t nb = n / kQK_K;
      q8_k_sums32(in.q8k->data(), scratch(sums, static_cast<size_t>(T * nb * 8)), T * nb);
      in.q8k_sums32 = &sums;
      return;
    }
    case Partner::kCount: return;
    case Partner::kQ8K: {
      if (in.q8k) return;  // already converted (kQ8KSums converts through here too)
      thread_local std::vector<BlockQ8_K> buf;
      const int64_t nb = n / kQK_K;
      BlockQ8_K* q = scratch(buf, static_cast<size_t>(T * nb));
      split(T, T * n * 16, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) k.quantize_q8_k(x + t * n, q + t * nb, n);
      });
      in.q8k = &buf;
      return;
    }
  }
}

// Weight rows [r0, r1) of one matmul for all T tokens. Tiles of up to 4 (dot4) or kActQ8MaxRows (gemv) tokens ×
// one weight row: each weight row is loaded and unpacked once per tile, and every tile entry computes a token's
// result with exactly the instructions of the single-token entry, so no output depends on T or on how tokens group.
template <typename W, typename X>
void rows_dot4(const X* xa, int64_t xs, int64_t T, const WeightMatrix& w, float* y, int64_t r0, int64_t r1, int64_t len,
               float (*dot)(const W*, const X*, int64_t), void (*dot4)(const W*, const X*, int64_t, int64_t, float*)) {
  float out[4];
  int64_t t = 0;
  for (; t + 4 <= T; t += 4)
    for (int64_t r = r0; r < r1; ++r) {
      dot4(reinterpret_cast<const W*>(w.row(r)), xa + t * xs, xs, len, out);
      for (int i = 0; i < 4; ++i) y[(t + i) * w.rows + r] = out[i];
    }
  for (; t < T; ++t)
    for (int64_t r = r0; r < r1; ++r) y[t * w.rows + r] = dot(reinterpret_cast<const W*>(w.row(r)), xa + t * xs, len);
}

// The packed kernels' activations from token t on.
ActQ8S act_q8s(const PreparedInput& in, int64_t t) {
  const int64_t n = in.n, nb = n / kQK8_0;
  return {in.act_s_qs->data() + (in.t0 + t) * n, in.act_s_d->data() + (in.t0 + t) * nb,
          in.act_s_sums->data() + (in.t0 + t) * nb, nb};
}
ActQ8KS act_q8ks(const PreparedInput& in, int64_t t) {
  const int64_t nb = in.n / kQK_K;
  const int16_t* sums32 = in.q8k_sums32 ? in.q8k_sums32->data() + (in.t0 + t) * nb * 8 : nullptr;
  return {in.q8k->data() + (in.t0 + t) * nb, sums32, nb};
}

// G 16-row groups at g (first row r; G > 1 only for full groups of a BF16 weight) for tokens [t, t + R),
// R ≤ kPackMaxTokens, through the x16 kernels.
void packed_group(const CpuKernels& k, const PreparedInput& in, const WeightMatrix& w, const uint8_t* g, int64_t r,
                  int64_t G, int64_t t, int64_t R, float* y) {
  const int64_t n = in.n;
  const bool full = r + G * kPackRows <= w.rows;
  float tmp[kPackMaxTokens * kPackRows];
  float* out = full ? y + t * w.rows + r : tmp;
  const int64_t os = full ? w.rows : kPackRows;
  if (w.dtype == DType::F32) {
    k.gemm_f32_x16(g, n, in.x + (in.t0 + t) * n, n, R, out, os);
  } else if (w.dtype == DType::F16) {
    k.gemm_f16_x16(g, n, in.x_f16->data() + (in.t0 + t) * n, n, R, out, os);
  } else if (w.dtype == DType::BF16 && in.x_bf16_dp) {
    const int64_t row = bf16_blocks(n) * kBF16TileK;
    k.gemm_bf16_dp_x16(g, G, w.packed_group_bytes, n, in.x_bf16_dp->data() + (in.t0 + t) * row, row, R, out, os);
  } else if (w.dtype == DType::BF16) {
    k.gemm_bf16_x16(g, G, w.packed_group_bytes, n, in.x_bf16->data() + (in.t0 + t) * n, n, R, out, os);
  } else if (w.dtype == DType::Q4_K || w.dtype == DType::Q5_K || w.dtype == DType::Q6_K) {
    const ActQ8KS x = act_q8ks(in, t);
    (w.dtype == DType::Q4_K   ? k.gemm_q4_k_x16
     : w.dtype == DType::Q5_K ? k.gemm_q5_k_x16
                              : k.gemm_q6_k_x16)(g, x.nb, x, R, out, os);
  } else {
    const ActQ8S x = act_q8s(in, t);
    (w.dtype == DType::Q8_0   ? k.gemm_q8_0_x16
     : w.dtype == DType::Q4_0 ? k.gemm_q4_0_x16
     : w.dtype == DType::Q5_0 ? k.gemm_q5_0_x16
     : w.dtype == DType::Q4_1 ? k.gemm_q4_1_x16
     : w.dtype == DType::Q5_1 ? k.gemm_q5_1_x16
                              : k.gemm_iq4_nl_x16)(g, x.nb, x, R, out, os);
  }
  if (!full)
    for (int64_t i = 0; i < R; ++i)
      std::copy(tmp + i * kPackRows, tmp + i * kPackRows + (w.rows - r), y + (t + i) * w.rows + r);
}

// The AMX kernel of a packed weight type in table k, or null.
AmxGemmQ8S* amx_q8s_kernel(const CpuKernels& k, DType t) {
  switch (t) {
    case DType::Q8_0: return k.amx_q8_0;
    case DType::Q4_0: return k.amx_q4_0;
    case DType::IQ4_NL: return k.amx_iq4_nl;
    case DType::Q5_0: return k.amx_q5_0;
    case DType::Q4_1: return k.amx_q4_1;
    case DType::Q5_1: return k.amx_q5_1;
    default: return nullptr;
  }
}
AmxGemmQ8KS* amx_q8ks_kernel(const CpuKernels& k, DType t) {
  return t == DType::Q4_K ? k.amx_q4_k : t == DType::Q5_K ? k.amx_q5_k : t == DType::Q6_K ? k.amx_q6_k : nullptr;
}

// Rows [r0, r1) of a packed weight: r0 starts a 16-row group. Where the table has an AMX kernel for the type, the
// first Ta tokens (whole tiles of 16, and a last tile of at least amx_min_tokens()) run on tiles over pairs of full
// groups, each pair against every token tile while its weights are in L2; the other tokens and a partial last group
// run through the x16 kernels, kPackMaxTokens tokens at a time. Both give the same results bit for bit.
void matmul_packed(const PreparedInput& in, const WeightMatrix& w, float* y, int64_t r0, int64_t r1) {
  static_assert(kRowsPerTask % kPackRows == 0);
  const CpuKernels& k = cpu_kernels();
  const int64_t T = in.T;
  AmxGemmQ8S* const q = amx_q8s_kernel(k, w.dtype);
  AmxGemmQ8KS* const kq = amx_q8ks_kernel(k, w.dtype);
  const bool bf16 = w.dtype == DType::BF16 && k.amx_bf16 && in.x_bf16_tiles;
  const int64_t full_end = std::max(r0, std::min(r1, w.rows / kPackRows * kPackRows));
  const int64_t rem = T % kAmxMaxTokens;
  const int64_t Ta = (q || kq || bf16) && full_end > r0 ? T - (rem < amx_min_tokens() ? rem : 0) : 0;
  const auto group = [&](int64_t r) { return w.packed + static_cast<size_t>(r / kPackRows) * w.packed_group_bytes; };
  for (int64_t r = r0; r < full_end && Ta > 0; r += 2 * kPackRows) {
    const int64_t G = std::min<int64_t>(2, (full_end - r) / kPackRows);
    for (int64_t t = 0; t < Ta; t += kAmxMaxTokens) {
      const int64_t R = std::min(kAmxMaxTokens, Ta - t);
      if (q) {
        const ActQ8S x = act_q8s(in, t);
        q(group(r), G, w.packed_group_bytes, x.nb, x, R, y + t * w.rows + r, w.rows);
      } else if (kq) {
        const ActQ8KS x = act_q8ks(in, t);
        kq(group(r), G, w.packed_group_bytes, x.nb, x, R, y + t * w.rows + r, w.rows);
      } else {
        const int64_t nblk = bf16_blocks(in.n);
        const uint16_t* x = in.x_bf16_tiles->data() + (in.t0 + t) * nblk * kBF16TileK;
        k.amx_bf16(group(r), G, w.packed_group_bytes, nblk, x, R, y + t * w.rows + r, w.rows);
      }
    }
  }
  // The BF16 kernels take up to four full groups a call: more independent chains when the tokens are few.
  const int64_t max_g = w.dtype == DType::BF16 ? 4 : 1;
  for (int64_t r = r0; r < r1;) {
    const int64_t G = r < full_end ? std::min(max_g, (full_end - r) / kPackRows) : 1;
    const int64_t t_first = r < full_end ? Ta : 0;  // the AMX tiles covered the full groups' first Ta tokens
    for (int64_t t = t_first; t < T; t += kPackMaxTokens)
      packed_group(k, in, w, group(r), r, G, t, std::min(kPackMaxTokens, T - t), y);
    r += G * kPackRows;
  }
}

// One weight row of a 32-element block type against R ActQ8 rows.
void gemv_row(const CpuKernels& k, DType t, const uint8_t* row, const ActQ8& x, int64_t R, float* out) {
  switch (t) {
    case DType::Q8_0: return k.gemv_q8_0(reinterpret_cast<const BlockQ8_0*>(row), x, R, out);
    case DType::Q4_0: return k.gemv_q4_0(reinterpret_cast<const BlockQ4_0*>(row), x, R, out);
    case DType::Q4_1: return k.gemv_q4_1(reinterpret_cast<const BlockQ4_1*>(row), x, R, out);
    case DType::Q5_0: return k.gemv_q5_0(reinterpret_cast<const BlockQ5_0*>(row), x, R, out);
    case DType::Q5_1: return k.gemv_q5_1(reinterpret_cast<const BlockQ5_1*>(row), x, R, out);
    case DType::IQ4_NL: return k.gemv_iq4_nl(reinterpret_cast<const BlockIQ4_NL*>(row), x, R, out);
    default: fail("matmul: no ActQ8 kernel for weight type {}", dtype_name(t));
  }
}

void matmul_rows_q(const PreparedInput& in, const WeightMatrix& w, float* y, int64_t r0, int64_t r1) {
  const CpuKernels& k = cpu_kernels();
  const int64_t n = in.n, nb = n / kQK8_0;
  float out[kActQ8MaxRows];
  for (int64_t t = 0; t < in.T; t += kActQ8MaxRows) {
    const int64_t R = std::min(kActQ8MaxRows, in.T - t);
    const int64_t xt = in.t0 + t;
    const ActQ8 x{in.act_qs->data() + xt * n, in.act_d->data() + xt * nb, nb,
                  in.act_s ? in.act_s->data() + xt * nb : nullptr};
    for (int64_t r = r0; r < r1; ++r) {
      gemv_row(k, w.dtype, w.row(r), x, R, out);
      for (int64_t i = 0; i < R; ++i) y[(t + i) * w.rows + r] = out[i];
    }
  }
}

void matmul_rows(const PreparedInput& in, const WeightMatrix& w, float* y, int64_t r0, int64_t r1) {
  const CpuKernels& k = cpu_kernels();
  const int64_t T = in.T, n = in.n;
  if (w.packed) return matmul_packed(in, w, y, r0, r1);
  switch (w.dtype) {
    case DType::F32: {
      constexpr int64_t kTileRows = 4, kTileTokens = 4;
      for (int64_t t = 0; t < T; t += kTileTokens)
        for (int64_t r = r0; r < r1; r += kTileRows)
          k.tile_f32(reinterpret_cast<const float*>(w.row(r)), std::min(kTileRows, r1 - r), in.x + (in.t0 + t) * n, n,
                     std::min(kTileTokens, T - t), n, y + t * w.rows + r, w.rows);
      return;
    }
    case DType::F16:
      return rows_dot4<uint16_t, uint16_t>(in.f16->data() + in.t0 * n, n, T, w, y, r0, r1, n, k.dot_f16, k.dot4_f16);
    case DType::BF16:
      return rows_dot4<uint16_t, uint16_t>(in.bf16->data() + in.t0 * n, n, T, w, y, r0, r1, n, k.dot_bf16, k.dot4_bf16);
    case DType::Q8_0:
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::IQ4_NL: return matmul_rows_q(in, w, y, r0, r1);
    case DType::Q4_K:
      return rows_dot4<BlockQ4_K, BlockQ8_K>(in.q8k->data() + in.t0 * (n / kQK_K), n / kQK_K, T, w, y, r0, r1,
                                             n / kQK_K, k.dot_q4_k, k.dot4_q4_k);
    case DType::Q5_K:
      return rows_dot4<BlockQ5_K, BlockQ8_K>(in.q8k->data() + in.t0 * (n / kQK_K), n / kQK_K, T, w, y, r0, r1,
                                             n / kQK_K, k.dot_q5_k, k.dot4_q5_k);
    case DType::Q6_K:
      return rows_dot4<BlockQ6_K, BlockQ8_K>(in.q8k->data() + in.t0 * (n / kQK_K), n / kQK_K, T, w, y, r0, r1,
                                             n / kQK_K, k.dot_q6_k, k.dot4_q6_k);
    default: fail("matmul: no kernel for weight type {}", dtype_name(w.dtype));
  }
}

}  // namespace

void matmul(const float* x, int64_t T, const WeightMatrix& w, float* y) { matmul(x, T, {MatmulOut{&w, y}}); }

void matmul(const float* x, int64_t T, std::initializer_list<MatmulOut> outs) {
  if (T == 0 || outs.size() == 0) return;
  PreparedInput in;
  in.x = x, in.T = T, in.n = outs.begin()->w->cols;
  bool prepared[static_cast<int>(Partner::kCount)] = {};
  int64_t n_tasks = 0, work = 0;
  for (const MatmulOut& o : outs) {
    if (o.w->cols != in.n) fail("matmul: inputs of {} and {} columns share one input", o.w->cols, in.n);
    const Partner p = partner_of(*o.w);
    if (!prepared[static_cast<int>(p)]) prepare(in, p), prepared[static_cast<int>(p)] = true;
    n_tasks += (o.w->rows + kRowsPerTask - 1) / kRowsPerTask;
    work += T * o.w->rows * o.w->cols;
  }
  // One task list over every output's row blocks, so q/k/v (or gate/up) share one wake-up of the pool.
  split_balanced(n_tasks, work, [&](int64_t task_begin, int64_t task_end) {
    int64_t base = 0;
    for (const MatmulOut& o : outs) {
      const int64_t nt = (o.w->rows + kRowsPerTask - 1) / kRowsPerTask;
      const int64_t b = std::max(task_begin, base), e = std::min(task_end, base + nt);
      if (o.w->packed && b < e)  // a thread's tasks of one packed weight as one range (AMX pairs its groups)
        matmul_rows(in, *o.w, o.y, (b - base) * kRowsPerTask, std::min(o.w->rows, (e - base) * kRowsPerTask));
      else
        for (int64_t task = b; task < e; ++task) {
          const int64_t r0 = (task - base) * kRowsPerTask;
          matmul_rows(in, *o.w, o.y, r0, std::min(o.w->rows, r0 + kRowsPerTask));
        }
      base += nt;
    }
  });
}

void matmul_grouped(const float* x, int64_t N, std::span<const MatmulGroup> groups) {
  if (N == 0 || groups.empty()) return;
  PreparedInput in;
  in.x = x, in.T = N, in.n = groups.front().w->cols;
  bool prepared[static_cast<int>(Partner::kCount)] = {};
  int64_t n_tasks = 0, work = 0;
  for (const MatmulGroup& g : groups) {
    if (g.w->cols != in.n) fail("matmul_grouped: weights of {} and {} columns share one input", g.w->cols, in.n);
    if (g.row_begin < 0 || g.n_rows < 0 || g.row_begin + g.n_rows > N)
      fail("matmul_grouped: rows [{}, {}) outside the input's {}", g.row_begin, g.row_begin + g.n_rows, N);
    if (g.n_rows == 0) continue;
    const Partner p = partner_of(*g.w);
    if (!prepared[static_cast<int>(p)]) prepare(in, p), prepared[static_cast<int>(p)] = true;
    n_tasks += (g.w->rows + kRowsPerTask - 1) / kRowsPerTask;
    work += g.n_rows * g.w->rows * g.w->cols;
  }
  if (n_tasks == 0) return;
  // Tasks of 16 weight rows × the group's tokens, all groups in one list (their costs differ with n_rows; the
  // balanced split lets an idle thread steal).
  split_balanced(n_tasks, work, [&](int64_t task_begin, int64_t task_end) {
    int64_t base = 0;
    for (const MatmulGroup& g : groups) {
      if (g.n_rows == 0) continue;
      const int64_t nt = (g.w->rows + kRowsPerTask - 1) / kRowsPerTask;
      const int64_t b = std::max(task_begin, base), e = std::min(task_end, base + nt);
      if (b < e) {
        PreparedInput view = in;
        view.t0 = g.row_begin, view.T = g.n_rows;
        for (int64_t task = b; task < e; ++task) {
          const int64_t r0 = (task - base) * kRowsPerTask;
          matmul_rows(view, *g.w, g.y, r0, std::min(g.w->rows, r0 + kRowsPerTask));
        }
      }
      base += nt;
    }
  });
}

void rmsnorm(const float* x, const float* g, float* y, int64_t T, int64_t n, float eps) {
  for (int64_t t = 0; t < T; ++t) {
    const float* xr = x + t * n;
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(xr[i]) * xr[i];
    const float scale = 1.0f / std::sqrt(static_cast<float>(sum / static_cast<double>(n)) + eps);
    float* yr = y + t * n;
    for (int64_t i = 0; i < n; ++i) yr[i] = xr[i] * scale * g[i];
  }
}

void silu_mul(float* gate, const float* up, int64_t n) {
  constexpr int64_t kChunk = 4096;
  const CpuKernels& k = cpu_kernels();
  split((n + kChunk - 1) / kChunk, n * 16, [&](int64_t c0, int64_t c1) {
    const int64_t begin = c0 * kChunk, end = std::min(n, c1 * kChunk);
    k.silu_mul(gate + begin, up + begin, end - begin);
  });
}

void gelu_tanh_mul(float* gate, const float* up, int64_t n) {
  constexpr int64_t kChunk = 4096;
  constexpr float kSqrt2OverPi = 0.79788456080286535588f;
  split((n + kChunk - 1) / kChunk, n * 32, [&](int64_t c0, int64_t c1) {
    for (int64_t i = c0 * kChunk; i < std::min(n, c1 * kChunk); ++i) {
      const float x = gate[i];
      gate[i] = 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * x * (1.0f + 0.044715f * x * x))) * up[i];
    }
  });
}

}  // namespace kvik
