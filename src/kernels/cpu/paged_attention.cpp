#include "kernels/cpu/paged_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/error.h"
#include "core/fp16.h"
#include "core/fp8.h"
#include "core/thread_pool.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/parallel.h"

namespace kvik {

using cpu_detail::kMinParallelWork;
using cpu_detail::scratch;

bool is_kv_cache_dtype(DType t) {
  return t == DType::F32 || t == DType::F16 || t == DType::Q8_0 || t == DType::F8_E4M3;
}

int64_t kv_row_bytes(DType t, int64_t n) {
  if (!is_kv_cache_dtype(t)) fail("the KV cache cannot be stored as {}", dtype_name(t));
  return static_cast<int64_t>(*row_bytes(t, n - n % traits(t).block_size));
}

namespace {

// One token's K or V row of one layer into its cache slot.
void store_kv_row(const float* x, int64_t n, void* row, DType dtype, float scale) {
  switch (dtype) {
    case DType::F32: std::memcpy(row, x, n * sizeof(float)); break;
    case DType::F16: cpu_kernels().to_f16(x, static_cast<uint16_t*>(row), n); break;  // f32_to_fp16's rounding
    case DType::Q8_0: quantize_row(DType::Q8_0, x, row, n); break;
    default: {  // F8_E4M3
      const float inv = 1.0f / scale;
      for (int64_t i = 0; i < n; ++i) static_cast<uint8_t*>(row)[i] = f32_to_fp8_e4m3(x[i] * inv);
    }
  }
}

}  // namespace

void write_kv(const float* k, const float* v, const int64_t* slot_mapping, int64_t T, int64_t kv_dim, void* k_cache,
              void* v_cache, DType dtype, float k_scale, float v_scale) {
  const int64_t row = kv_row_bytes(dtype, kv_dim);
  for (int64_t t = 0; t < T; ++t) {
    const int64_t off = slot_mapping[t] * row;
    store_kv_row(k + t * kv_dim, kv_dim, static_cast<char*>(k_cache) + off, dtype, k_scale);
    store_kv_row(v + t * kv_dim, kv_dim, static_cast<char*>(v_cache) + off, dtype, v_scale);
  }
}

namespace {

// Vectorised over head_dim through the kernel table: q·k per key, softmax, then the weighted sum of value rows
// with the output in registers. One task per (query token, KV head) serves the query heads that share the KV head,
// so their keys and values come from cache after the first head. Every (token, head) is computed by the same
// instructions whatever the batch holds, so the split never changes a result.
template <typename KV>
void attention_impl(const PagedAttentionArgs& a) {
  const CpuKernels& k = cpu_kernels();
  const KV* kc = static_cast<const KV*>(a.k_cache);
  const KV* vc = static_cast<const KV*>(a.v_cache);
  const int64_t d = a.head_dim, kv_dim = a.n_kv_heads * d, group = a.n_heads / a.n_kv_heads;
  const int64_t T = a.query_start_loc[a.num_reqs];
  int64_t work = 0;  // multiply-adds: each query row reads its keys twice
  for (int32_t r = 0; r < a.num_reqs; ++r)
    work += static_cast<int64_t>(a.query_start_loc[r + 1] - a.query_start_loc[r]) *
            (a.sliding_window > 0 ? std::min(a.seq_lens[r], a.sliding_window) : a.seq_lens[r]);
  work *= 2 * a.n_heads * d;
  auto one = [&](int64_t task) {
    const int64_t t = task / a.n_kv_heads, kvh = task % a.n_kv_heads;
    int32_t r = 0;
    while (a.query_start_loc[r + 1] <= t) ++r;
    // Keys first..p: all of them, or the last W (the blocks before `first` need not be in the table).
    const int32_t first = a.sliding_window > 0 ? std::max(0, a.positions[t] - a.sliding_window + 1) : 0;
    const int32_t n_keys = a.positions[t] + 1 - first;
    const int32_t* table = a.block_tables + static_cast<int64_t>(r) * a.max_blocks_per_seq;
    thread_local std::vector<float> sbuf;
    thread_local std::vector<int64_t> obuf;
    float* scores = scratch(sbuf, static_cast<size_t>(n_keys));
    int64_t* off = scratch(obuf, static_cast<size_t>(n_keys));  // element offset of key p's row for this KV head
    for (int32_t i = 0; i < n_keys; ++i) {
      const int32_t p = first + i;
      off[i] = (static_cast<int64_t>(table[p / a.block_size]) * a.block_size + p % a.block_size) * kv_dim + kvh * d;
    }
    for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
      const float* q = a.q + (t * a.n_heads + h) * d;
      if constexpr (std::is_same_v<KV, float>)
        k.scores_f32(q, kc, off, n_keys, d, a.scale, scores);
      else if constexpr (std::is_same_v<KV, uint16_t>)
        k.scores_f16(q, kc, off, n_keys, d, a.scale, scores);
      else if constexpr (std::is_same_v<KV, BlockQ8_0>)
        k.scores_q8_0(q, kc, off, n_keys, d, a.scale, scores);
      else
        k.scores_fp8(q, kc, off, n_keys, d, a.scale * a.k_scale, scores);
      if (a.softcap > 0)
        for (int32_t i = 0; i < n_keys; ++i) scores[i] = a.softcap * std::tanh(scores[i] / a.softcap);
      k.softmax(scores, n_keys);
      float* o = a.out + (t * a.n_heads + h) * d;
      if constexpr (std::is_same_v<KV, float>)
        k.wsum_f32(scores, vc, off, n_keys, d, o);
      else if constexpr (std::is_same_v<KV, uint16_t>)
        k.wsum_f16(scores, vc, off, n_keys, d, o);
      else if constexpr (std::is_same_v<KV, BlockQ8_0>)
        k.wsum_q8_0(scores, vc, off, n_keys, d, o);
      else {
        k.wsum_fp8(scores, vc, off, n_keys, d, o);
        if (a.v_scale != 1.0f)
          for (int64_t i = 0; i < d; ++i) o[i] *= a.v_scale;
      }
    }
  };
  auto range = [&](int64_t b, int64_t e) {
    for (int64_t task = b; task < e; ++task) one(task);
  };
  if (work < kMinParallelWork)
    range(0, T * a.n_kv_heads);
  else
    ThreadPool::global().parallel_for_dynamic(T * a.n_kv_heads, 2, range);
}

}  // namespace

void paged_attention(const PagedAttentionArgs& a) {
  switch (a.kv_dtype) {
    case DType::F32: attention_impl<float>(a); break;
    case DType::F16: attention_impl<uint16_t>(a); break;
    case DType::Q8_0: attention_impl<BlockQ8_0>(a); break;
    case DType::F8_E4M3: attention_impl<uint8_t>(a); break;
    default: fail("the KV cache cannot be stored as {}", dtype_name(a.kv_dtype));
  }
}

}  // namespace kvik
