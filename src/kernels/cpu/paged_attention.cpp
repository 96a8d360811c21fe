#include "kernels/cpu/paged_attention.h"

#include <algorithm>
#include <atomic>
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

// Keys are scored and summed in chunks of kKeyChunk positions aligned to multiples of kKeyChunk (each row's first
// chunk starts at its first key), so the K and V rows of a chunk are read from memory once and stay in L1 while every
// query row of the tile and every query head of the KV head use them. A task is one request's tile of up to kRowTile
// consecutive query rows and one KV head: a decode reads its keys once for the group's heads instead of once per head,
// a prefill tile once for its rows as well.
constexpr int32_t kKeyChunk = 64;
constexpr int32_t kRowTile = 4;

struct AttentionTask {
  int32_t r, t0, t1, kvh;  // request, query rows [t0, t1), KV head
};

// Vectorised over head_dim through the kernel table: q·k per key (16 keys at a time from each row's first key, as
// the score kernel groups them), an exact softmax per row and head, then the weighted sum of value rows chunk by
// chunk, the chunks' sums added in key order. A row's result depends only on its own keys (its first key, its
// position): never on the tile or the batch it is computed in, so batching and chunked prefill change no result.
template <typename KV>
class AttentionTile {
  // This cache type's bit in CpuKernels::spreads_attention_prefetch.
  static constexpr uint8_t kSpreadBit = std::is_same_v<KV, float>       ? kSpreadF32
                                        : std::is_same_v<KV, uint16_t>  ? kSpreadF16
                                        : std::is_same_v<KV, BlockQ8_0> ? kSpreadQ8_0
                                                                        : kSpreadFp8;

 public:
  AttentionTile(const PagedAttentionArgs& a, const AttentionTask& task) : a_(a), task_(task) {
    group_ = a_.n_heads / a_.n_kv_heads;
    lo_ = first_key(task_.t0);
    hi_ = a_.positions[task_.t1 - 1];  // rows are in position order: the last one sees the most keys
    stride_ = hi_ + 1 - lo_;
  }

  // The whole task on the calling thread.
  void run() {
    const int64_t rows = task_.t1 - task_.t0;
    use(scratch(obuf_, static_cast<size_t>(stride_)), scratch(sbuf_, static_cast<size_t>(rows * group_ * stride_)));
    offsets(0, num_chunks());
    score_chunks(0, num_chunks());
    softmax_rows(0, rows * group_);
    sum_value_chunks(0, num_chunks(), nullptr);
    scale_outputs(0, rows * group_);
  }

  // The pieces of run() for a task split across threads (flash-decoding): chunks [k0, k1) of its keys, or its
  // queries [i0, i1) (row-major by (row, head)). Split tasks have one query row, so every chunk reaches every query.
  int32_t num_keys() const { return stride_; }
  int32_t num_chunks() const { return (hi_ - chunk_start(0)) / kKeyChunk + 1; }
  int64_t num_queries() const { return (task_.t1 - task_.t0) * group_; }
  void use(int64_t* off, float* scores) { off_ = off, scores_ = scores; }
  void offsets(int32_t k0, int32_t k1) {  // element offsets of the keys of chunks [k0, k1) for this KV head
    const int64_t kv_dim = a_.n_kv_heads * a_.head_dim;
    const int32_t* table = a_.block_tables + static_cast<int64_t>(task_.r) * a_.max_blocks_per_seq;
    for (int32_t p = std::max(lo_, chunk_start(k0)), e = chunk_last(k1 - 1); p <= e; ++p)
      off_[p - lo_] = (static_cast<int64_t>(table[p / a_.block_size]) * a_.block_size + p % a_.block_size) * kv_dim +
                      task_.kvh * a_.head_dim;
  }
  void score_chunks(int32_t k0, int32_t k1) {
    const int32_t last = chunk_last(k1 - 1);
    prefetch(a_.k_cache, std::max(lo_, chunk_start(k0)), std::min(chunk_start(k0) + kKeyChunk - 1, last));
    score_tile(k0, k1);
  }
  void softmax_rows(int64_t i0, int64_t i1) {  // and zeroes the outputs the value sums add to
    for (int64_t i = i0; i < i1; ++i) {
      const int32_t t = task_.t0 + static_cast<int32_t>(i / group_);
      const int64_t h = i % group_;
      float* s = row_scores(t, h);
      const int32_t n = a_.positions[t] + 1 - first_key(t);
      if (a_.softcap > 0)  // Gemma 2: cap · tanh(s / cap) on each scaled score
        for (int32_t x = 0; x < n; ++x) s[x] = a_.softcap * std::tanh(s[x] / a_.softcap);
      cpu_kernels().softmax(s, n);
      std::fill_n(out(t, h), a_.head_dim, 0.0f);
    }
  }
  // Value sums of chunks [k0, k1): added to the outputs in key order (parts == nullptr), or chunk k's sums for every
  // query stored at parts + (k·num_queries() + i)·d_h for sum_parts() to add in that same order.
  void sum_value_chunks(int32_t k0, int32_t k1, float* parts) {
    const int32_t last = chunk_last(k1 - 1);
    prefetch(a_.v_cache, std::max(lo_, chunk_start(k0)), std::min(chunk_start(k0) + kKeyChunk - 1, last));
    sum_values_tile(k0, k1, parts);
  }
  void sum_parts(const float* parts, int64_t i0, int64_t i1) {
    const int64_t d = a_.head_dim, nq = num_queries();
    for (int64_t i = i0; i < i1; ++i) {
      float* o = out(task_.t0 + static_cast<int32_t>(i / group_), i % group_);
      for (int32_t k = 0; k < num_chunks(); ++k)
        for (int64_t x = 0; x < d; ++x) o[x] += parts[(k * nq + i) * d + x];
    }
    scale_outputs(i0, i1);
  }

 private:
  void scale_outputs(int64_t i0, int64_t i1) {
    if constexpr (std::is_same_v<KV, uint8_t>)
      if (a_.v_scale != 1.0f)
        for (int64_t i = i0; i < i1; ++i) {
          float* o = out(task_.t0 + static_cast<int32_t>(i / group_), i % group_);
          for (int64_t c = 0; c < a_.head_dim; ++c) o[c] *= a_.v_scale;
        }
  }
  // Chunk k's first and last key: chunks are kKeyChunk positions aligned to multiples of kKeyChunk.
  int32_t chunk_start(int32_t k) const { return lo_ - lo_ % kKeyChunk + k * kKeyChunk; }
  int32_t chunk_last(int32_t k) const { return std::min(chunk_start(k) + kKeyChunk - 1, hi_); }
  // Keys first..p of row t: all of them, or the last W (the blocks before `first` need not be in the table).
  int32_t first_key(int32_t t) const {
    return a_.sliding_window > 0 ? std::max(0, a_.positions[t] - a_.sliding_window + 1) : 0;
  }
  float* row_scores(int32_t t, int64_t h) {
    return scores_ + ((static_cast<int64_t>(t - task_.t0) * group_ + h) * stride_);
  }
  float* out(int32_t t, int64_t h) {
    return a_.out + (static_cast<int64_t>(t) * a_.n_heads + task_.kvh * group_ + h) * a_.head_dim;
  }

  // The rows of `cache` for keys b..e prefetched (prefetch_kv_row), all at once.
  void prefetch(const void* cache, int32_t b, int32_t e) const {
    for (int32_t p = b; p <= e; ++p) prefetch_kv_row<KV>(cache, off_[p - lo_], a_.head_dim);
  }

  // The rows of the chunk after the one from key c (keys up to hi): prefetched now, all of them, or handed to the
  // next kernel call to prefetch as it goes (AttentionPrefetch, where the table spreads it).
  void prefetch_next_chunk(const CpuKernels& k, const void* cache, int32_t c, int32_t hi) const {
    const int32_t b = std::max(c + kKeyChunk, lo_), e = std::min(c + 2 * kKeyChunk - 1, hi);
    if (b > e) return;
    if (k.spreads_attention_prefetch & kSpreadBit)
      t_attention_prefetch = AttentionPrefetch{cache, off_ + (b - lo_), e + 1 - b};
    else
      prefetch(cache, b, e);
  }

  // Each chunk's keys scored for every query of the tile (its rows × the group's heads) in one
  // multi-query call over the chunk's keys any row sees, then each row's own keys copied out. A score is the same
  // whatever else is in the call (scores_multi_*), so a row's scores do not depend on the tile.
  void score_tile(int32_t k0, int32_t k1) {
    const int32_t hi = chunk_last(k1 - 1);
    const int64_t d = a_.head_dim, rows = task_.t1 - task_.t0, nq = rows * group_;
    float* q = scratch(qbuf_, static_cast<size_t>(nq * d));  // the tile's queries, row-major by (row, head)
    for (int64_t i = 0; i < rows; ++i)
      std::copy_n(a_.q + ((task_.t0 + i) * a_.n_heads + task_.kvh * group_) * d, group_ * d, q + i * group_ * d);
    float* tmp = scratch(tbuf_, static_cast<size_t>(nq * kKeyChunk));
    const CpuKernels& k = cpu_kernels();
    for (int32_t c = chunk_start(k0); c <= hi; c += kKeyChunk) {
      const int32_t cb = std::max(c, lo_), ce = std::min(c + kKeyChunk - 1, hi), n = ce + 1 - cb;
      prefetch_next_chunk(k, a_.k_cache, c, hi);
      scores_multi(k, q, nq, off_ + (cb - lo_), n, tmp);
      t_attention_prefetch = AttentionPrefetch{};  // taken, or left by a kernel's fallback
      for (int32_t t = task_.t0; t < task_.t1; ++t) {
        const int32_t first = first_key(t), b = std::max(cb, first), e = std::min(ce, a_.positions[t]);
        if (b > e) continue;
        for (int64_t h = 0; h < group_; ++h)
          std::copy_n(tmp + ((t - task_.t0) * group_ + h) * n + (b - cb), e + 1 - b, row_scores(t, h) + (b - first));
      }
    }
  }

  // Per chunk, the rows of the tile that see the same keys of it (all but the diagonal chunk's, in
  // a prefill) sum their value rows in one multi-query call for all their heads; each chunk's sums are added to
  // the outputs in key order, as the one-query kernel would.
  void sum_values_tile(int32_t k0, int32_t k1, float* parts) {
    const int64_t d = a_.head_dim, rows = task_.t1 - task_.t0;
    const int32_t hi = chunk_last(k1 - 1);
    float* part = scratch(pbuf_, static_cast<size_t>(rows * group_ * d));
    const CpuKernels& k = cpu_kernels();
    for (int32_t c = chunk_start(k0); c <= hi; c += kKeyChunk) {
      if (parts) part = parts + (c - chunk_start(0)) / kKeyChunk * num_queries() * d;  // one query row: t = t0
      bool prefetched = false;  // the next chunk's rows go with the chunk's first call
      for (int32_t t = task_.t0; t < task_.t1;) {
        const int32_t first = first_key(t), b = std::max(c, first), e = std::min(c + kKeyChunk - 1, a_.positions[t]);
        int32_t t1 = t + 1;  // rows t..t1 − 1 see keys b..e and start at the same first key
        while (t1 < task_.t1 && first_key(t1) == first && std::min(c + kKeyChunk - 1, a_.positions[t1]) == e) ++t1;
        if (b <= e) {
          if (!prefetched) prefetch_next_chunk(k, a_.v_cache, c, hi), prefetched = true;
          const int64_t nq = (t1 - t) * group_;
          wsum_multi(k, row_scores(t, 0) + (b - first), nq, off_ + (b - lo_), e + 1 - b, part);
          t_attention_prefetch = AttentionPrefetch{};
          for (int64_t i = 0; i < nq && !parts; ++i) {
            float* o = out(t + static_cast<int32_t>(i / group_), i % group_);
            for (int64_t x = 0; x < d; ++x) o[x] += part[i * d + x];
          }
        }
        t = t1;
      }
    }
  }

  // The table's multi-query kernels for this cache type, nq queries against n keys at element offsets `off` (FP8:
  // the K tensor scale folded into the score scale; its V scale is applied to the outputs by scale_outputs).
  void scores_multi(const CpuKernels& k, const float* q, int64_t nq, const int64_t* off, int32_t n, float* out) const {
    const int64_t d = a_.head_dim;
    const KV* c = static_cast<const KV*>(a_.k_cache);
    if constexpr (std::is_same_v<KV, float>)
      k.scores_multi_f32(q, d, nq, c, off, n, d, a_.scale, out, n);
    else if constexpr (std::is_same_v<KV, uint16_t>)
      k.scores_multi_f16(q, d, nq, c, off, n, d, a_.scale, out, n);
    else if constexpr (std::is_same_v<KV, BlockQ8_0>)
      k.scores_multi_q8_0(q, d, nq, c, off, n, d, a_.scale, out, n);
    else
      k.scores_multi_fp8(q, d, nq, c, off, n, d, a_.scale * a_.k_scale, out, n);
  }
  // Probabilities of nq queries at p + i·stride_ over n value rows, sums to out + i·d_h.
  void wsum_multi(const CpuKernels& k, const float* p, int64_t nq, const int64_t* off, int32_t n, float* out) const {
    const int64_t d = a_.head_dim;
    const KV* c = static_cast<const KV*>(a_.v_cache);
    if constexpr (std::is_same_v<KV, float>)
      k.wsum_multi_f32(p, stride_, nq, c, off, n, d, out, d);
    else if constexpr (std::is_same_v<KV, uint16_t>)
      k.wsum_multi_f16(p, stride_, nq, c, off, n, d, out, d);
    else if constexpr (std::is_same_v<KV, BlockQ8_0>)
      k.wsum_multi_q8_0(p, stride_, nq, c, off, n, d, out, d);
    else
      k.wsum_multi_fp8(p, stride_, nq, c, off, n, d, out, d);
  }

  const PagedAttentionArgs& a_;
  const AttentionTask& task_;
  int64_t group_ = 1, stride_ = 0;
  int32_t lo_ = 0, hi_ = 0;
  int64_t* off_ = nullptr;
  float* scores_ = nullptr;
  static thread_local std::vector<int64_t> obuf_;
  static thread_local std::vector<float> sbuf_, pbuf_, qbuf_, tbuf_;
};
template <typename KV>
thread_local std::vector<int64_t> AttentionTile<KV>::obuf_;
template <typename KV>
thread_local std::vector<float> AttentionTile<KV>::sbuf_;
template <typename KV>
thread_local std::vector<float> AttentionTile<KV>::pbuf_;
template <typename KV>
thread_local std::vector<float> AttentionTile<KV>::qbuf_;
template <typename KV>
thread_local std::vector<float> AttentionTile<KV>::tbuf_;

// Flash-decoding: when the tasks are fewer than the threads (a batch-1 decode of a model with fewer KV heads than
// cores), a one-row task over at least kSplitMinKeys keys is cut into partitions of whole key chunks that run on
// different threads: scores per partition, the softmax per query over the whole row, value sums per partition
// (kept per chunk), then per query the chunks' sums added in key order. Every floating-point operation is the one
// the unsplit task does, in the same order, so splitting changes no result (tested bit for bit).
constexpr int32_t kSplitMinKeys = 1024;
std::atomic<bool> g_split_attention{true};
std::atomic<int64_t> g_split_tasks{0};
bool split_attention_enabled() { return g_split_attention.load(std::memory_order_relaxed); }
constexpr int32_t kSplitMinChunks = 8;  // chunks per partition at least (512 keys)

struct SplitTask {
  AttentionTask task;
  int32_t chunks = 0, parts = 0;         // key chunks, partitions
  size_t off = 0, scores = 0, sums = 0;  // offsets into the shared buffers
};

template <typename KV>
void run_split(const PagedAttentionArgs& a, std::vector<AttentionTask>& tasks, int threads) {
  thread_local std::vector<SplitTask> split_tl;
  thread_local std::vector<int64_t> offs;
  thread_local std::vector<float> buf;
  std::vector<SplitTask>& split = split_tl;  // the caller's (the pool's threads have their own thread_locals)
  split.clear();
  size_t n_off = 0, n_buf = 0;
  int64_t units = 0;                 // unsplit tasks + partitions
  const int64_t want = 2 * threads;  // partitions a lone task is cut into
  for (auto it = tasks.begin(); it != tasks.end();) {
    AttentionTile<KV> tile(a, *it);
    const int32_t chunks = tile.num_chunks();
    if (it->t1 - it->t0 != 1 || tile.num_keys() < kSplitMinKeys) {
      ++it, ++units;
      continue;
    }
    const int64_t per_task = (want + static_cast<int64_t>(tasks.size()) - 1) / static_cast<int64_t>(tasks.size());
    SplitTask st{*it, chunks,
                 static_cast<int32_t>(std::max<int64_t>(1, std::min<int64_t>(per_task, chunks / kSplitMinChunks)))};
    st.off = n_off, n_off += static_cast<size_t>(tile.num_keys());
    st.scores = n_buf, n_buf += static_cast<size_t>(tile.num_queries() * tile.num_keys());
    st.sums = n_buf, n_buf += static_cast<size_t>(chunks * tile.num_queries() * a.head_dim);
    units += st.parts;
    split.push_back(st);
    it = tasks.erase(it);
  }
  g_split_tasks.fetch_add(static_cast<int64_t>(split.size()), std::memory_order_relaxed);
  int64_t* off = scratch(offs, n_off);
  float* fb = scratch(buf, n_buf);
  auto tile_of = [&](const SplitTask& st) {
    AttentionTile<KV> t(a, st.task);
    t.use(off + st.off, fb + st.scores);
    return t;
  };
  auto partition = [](const SplitTask& st, int32_t p) {  // chunks [k0, k1) of partition p
    return std::pair<int32_t, int32_t>{static_cast<int32_t>(int64_t{st.chunks} * p / st.parts),
                                       static_cast<int32_t>(int64_t{st.chunks} * (p + 1) / st.parts)};
  };
  // unit u: an unsplit task (run whole), or one partition of a split task.
  auto for_unit = [&](int64_t u, auto&& whole, auto&& part) {
    if (u < static_cast<int64_t>(tasks.size())) return whole(tasks[static_cast<size_t>(u)]);
    u -= static_cast<int64_t>(tasks.size());
    for (const SplitTask& st : split) {
      if (u < st.parts) return part(st, static_cast<int32_t>(u));
      u -= st.parts;
    }
  };
  ThreadPool& pool = ThreadPool::global();
  pool.parallel_for_dynamic(units, 1, [&](int64_t b, int64_t e) {  // scores (unsplit tasks: everything)
    for (int64_t u = b; u < e; ++u)
      for_unit(
          u, [&](const AttentionTask& t) { AttentionTile<KV>(a, t).run(); },
          [&](const SplitTask& st, int32_t p) {
            auto [k0, k1] = partition(st, p);
            AttentionTile<KV> t = tile_of(st);
            t.offsets(k0, k1);
            t.score_chunks(k0, k1);
          });
  });
  const int64_t group = a.n_heads / a.n_kv_heads, nq = static_cast<int64_t>(split.size()) * group;
  pool.parallel_for_dynamic(nq, 1, [&](int64_t b, int64_t e) {  // the softmax of each split query
    for (int64_t i = b; i < e; ++i)
      tile_of(split[static_cast<size_t>(i / group)]).softmax_rows(i % group, i % group + 1);
  });
  pool.parallel_for_dynamic(units - static_cast<int64_t>(tasks.size()), 1, [&](int64_t b, int64_t e) {  // value sums
    for (int64_t u = b; u < e; ++u)
      for_unit(
          u + static_cast<int64_t>(tasks.size()), [](const AttentionTask&) {},
          [&](const SplitTask& st, int32_t p) {
            auto [k0, k1] = partition(st, p);
            tile_of(st).sum_value_chunks(k0, k1, fb + st.sums);
          });
  });
  pool.parallel_for_dynamic(nq, 1, [&](int64_t b, int64_t e) {  // each split query's chunk sums, in key order
    for (int64_t i = b; i < e; ++i) {
      const SplitTask& st = split[static_cast<size_t>(i / group)];
      tile_of(st).sum_parts(fb + st.sums, i % group, i % group + 1);
    }
  });
}

template <typename KV>
void attention_impl(const PagedAttentionArgs& a) {
  thread_local std::vector<AttentionTask> per_thread;
  std::vector<AttentionTask>& tasks = per_thread;  // the caller's list (a worker's own thread_local would be empty)
  tasks.clear();
  int64_t work = 0;  // multiply-adds: each query row reads its keys twice
  for (int32_t r = 0; r < a.num_reqs; ++r) {
    const int32_t qs = a.query_start_loc[r], qe = a.query_start_loc[r + 1];
    work += static_cast<int64_t>(qe - qs) *
            (a.sliding_window > 0 ? std::min(a.seq_lens[r], a.sliding_window) : a.seq_lens[r]);
    for (int32_t t0 = qs; t0 < qe; t0 += kRowTile)
      for (int32_t kvh = 0; kvh < a.n_kv_heads; ++kvh) tasks.push_back({r, t0, std::min(qe, t0 + kRowTile), kvh});
  }
  work *= 2 * a.n_heads * a.head_dim;
  const auto n = static_cast<int64_t>(tasks.size());
  const int threads = ThreadPool::global().num_threads();
  if (work >= kMinParallelWork && threads > 1 && split_attention_enabled() && n < threads)
    return run_split<KV>(a, tasks, threads);
  auto range = [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) AttentionTile<KV>(a, tasks[static_cast<size_t>(i)]).run();
  };
  if (work < kMinParallelWork)
    range(0, n);
  else
    ThreadPool::global().parallel_for_dynamic(n, 1, range);
}

}  // namespace

void set_split_attention(bool on) { g_split_attention.store(on, std::memory_order_relaxed); }
int64_t split_attention_tasks() { return g_split_tasks.load(std::memory_order_relaxed); }

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
