#include "kernels/cpu/paged_attention.h"

#include <cstring>
#include <type_traits>
#include <vector>

#include "core/error.h"
#include "core/fp16.h"
#include "core/thread_pool.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/parallel.h"

namespace kvik {

using cpu_detail::kMinParallelWork;
using cpu_detail::scratch;

bool is_kv_cache_dtype(DType t) { return t == DType::F32 || t == DType::F16; }

int64_t kv_elem_bytes(DType t) {
  if (!is_kv_cache_dtype(t)) fail("the KV cache cannot be stored as {}", dtype_name(t));
  return t == DType::F32 ? 4 : 2;
}

void write_kv(const float* k, const float* v, const int64_t* slot_mapping, int64_t T, int64_t kv_dim, void* k_cache,
              void* v_cache, DType dtype) {
  for (int64_t t = 0; t < T; ++t) {
    const size_t off = static_cast<size_t>(slot_mapping[t]) * kv_dim;
    if (dtype == DType::F32) {
      std::memcpy(static_cast<float*>(k_cache) + off, k + t * kv_dim, kv_dim * sizeof(float));
      std::memcpy(static_cast<float*>(v_cache) + off, v + t * kv_dim, kv_dim * sizeof(float));
    } else {
      for (int64_t i = 0; i < kv_dim; ++i) {
        static_cast<uint16_t*>(k_cache)[off + i] = f32_to_fp16(k[t * kv_dim + i]);
        static_cast<uint16_t*>(v_cache)[off + i] = f32_to_fp16(v[t * kv_dim + i]);
      }
    }
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
    work += static_cast<int64_t>(a.query_start_loc[r + 1] - a.query_start_loc[r]) * a.seq_lens[r];
  work *= 2 * a.n_heads * d;
  auto one = [&](int64_t task) {
    const int64_t t = task / a.n_kv_heads, kvh = task % a.n_kv_heads;
    int32_t r = 0;
    while (a.query_start_loc[r + 1] <= t) ++r;
    const int32_t n_keys = a.positions[t] + 1;
    const int32_t* table = a.block_tables + static_cast<int64_t>(r) * a.max_blocks_per_seq;
    thread_local std::vector<float> sbuf;
    thread_local std::vector<int64_t> obuf;
    float* scores = scratch(sbuf, static_cast<size_t>(n_keys));
    int64_t* off = scratch(obuf, static_cast<size_t>(n_keys));  // element offset of key p's row for this KV head
    for (int32_t p = 0; p < n_keys; ++p)
      off[p] = (static_cast<int64_t>(table[p / a.block_size]) * a.block_size + p % a.block_size) * kv_dim + kvh * d;
    for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
      const float* q = a.q + (t * a.n_heads + h) * d;
      if constexpr (std::is_same_v<KV, float>) k.scores_f32(q, kc, off, n_keys, d, a.scale, scores);
      else k.scores_f16(q, kc, off, n_keys, d, a.scale, scores);
      k.softmax(scores, n_keys);
      float* o = a.out + (t * a.n_heads + h) * d;
      if constexpr (std::is_same_v<KV, float>) k.wsum_f32(scores, vc, off, n_keys, d, o);
      else k.wsum_f16(scores, vc, off, n_keys, d, o);
    }
  };
  auto range = [&](int64_t b, int64_t e) {
    for (int64_t task = b; task < e; ++task) one(task);
  };
  if (work < kMinParallelWork) range(0, T * a.n_kv_heads);
  else ThreadPool::global().parallel_for_dynamic(T * a.n_kv_heads, 2, range);
}

}  // namespace

void paged_attention(const PagedAttentionArgs& a) {
  if (a.kv_dtype == DType::F32) attention_impl<float>(a);
  else attention_impl<uint16_t>(a);
}

}  // namespace kvik
