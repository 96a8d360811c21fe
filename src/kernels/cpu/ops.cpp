#include "kernels/cpu/ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "core/error.h"
#include "core/fp16.h"
#include "core/thread_pool.h"
#include "kernels/cpu/cpu_kernels.h"

namespace kvik {
namespace {

// Grows a per-thread scratch buffer; after warm-up no step allocates.
template <typename T>
T* scratch(std::vector<T>& buf, size_t n) {
  if (buf.size() < n) buf.resize(n);
  return buf.data();
}

// Rows of the weight handled per task: enough work per task to amortise scheduling, small enough for balance.
constexpr int64_t kRowsPerTask = 16;
// Multiply-adds below which an op is not worth splitting across threads.
constexpr int64_t kMinParallelWork = int64_t{1} << 20;

// Tiles of 4 tokens × kRowsPerTask weight rows: each weight row is loaded (and unpacked) once per 4 tokens by
// dot4, whose results equal the single-row dot bit for bit, so no output depends on T or on how tokens group.
template <typename Act, typename Dot, typename Dot4>
void matmul_rows(const Act* xa, int64_t act_stride, int64_t T, const WeightMatrix& w, float* y, Dot dot, Dot4 dot4) {
  const int64_t n_tasks = (w.rows + kRowsPerTask - 1) / kRowsPerTask;
  auto tasks = [&](int64_t task_begin, int64_t task_end) {
    float out[4];
    for (int64_t task = task_begin; task < task_end; ++task) {
      const int64_t r0 = task * kRowsPerTask, r1 = std::min(w.rows, r0 + kRowsPerTask);
      int64_t t = 0;
      for (; t + 4 <= T; t += 4)
        for (int64_t r = r0; r < r1; ++r) {
          dot4(w.row(r), xa + t * act_stride, act_stride, out);
          for (int i = 0; i < 4; ++i) y[(t + i) * w.rows + r] = out[i];
        }
      for (; t < T; ++t)
        for (int64_t r = r0; r < r1; ++r) y[t * w.rows + r] = dot(w.row(r), xa + t * act_stride);
    }
  };
  // Small products run on the calling thread: waking the pool costs more than the work.
  if (T * w.rows * w.cols < kMinParallelWork) tasks(0, n_tasks);
  else ThreadPool::global().parallel_for(n_tasks, tasks);
}

// Adapts a table's (dot, dot4) pair for weight blocks of type W to matmul_rows' byte-row interface.
template <typename W, typename X>
void matmul_typed(const X* xa, int64_t act_stride, int64_t T, const WeightMatrix& w, float* y, int64_t len,
                  float (*dot)(const W*, const X*, int64_t), void (*dot4)(const W*, const X*, int64_t, int64_t, float*)) {
  matmul_rows(
      xa, act_stride, T, w, y, [&](const uint8_t* wr, const X* xr) { return dot(reinterpret_cast<const W*>(wr), xr, len); },
      [&](const uint8_t* wr, const X* xr, int64_t xs, float* out) { dot4(reinterpret_cast<const W*>(wr), xr, xs, len, out); });
}

}  // namespace

void matmul(const float* x, int64_t T, const WeightMatrix& w, float* y) {
  const CpuKernels& k = cpu_kernels();
  const int64_t n = w.cols;
  switch (w.dtype) {
    case DType::F32:
      return matmul_typed<float, float>(x, n, T, w, y, n, k.dot_f32, k.dot4_f32);
    case DType::F16:
    case DType::BF16: {
      thread_local std::vector<uint16_t> buf;
      uint16_t* xa = scratch(buf, static_cast<size_t>(T * n));
      const bool f16 = w.dtype == DType::F16;
      for (int64_t t = 0; t < T; ++t) (f16 ? k.to_f16 : k.to_bf16)(x + t * n, xa + t * n, n);
      return matmul_typed<uint16_t, uint16_t>(xa, n, T, w, y, n, f16 ? k.dot_f16 : k.dot_bf16,
                                              f16 ? k.dot4_f16 : k.dot4_bf16);
    }
    case DType::Q8_0:
    case DType::Q4_0: {
      thread_local std::vector<BlockQ8_0> buf;
      const int64_t nb = n / kQK8_0;
      BlockQ8_0* xa = scratch(buf, static_cast<size_t>(T * nb));
      for (int64_t t = 0; t < T; ++t) k.quantize_q8_0(x + t * n, xa + t * nb, n);
      if (w.dtype == DType::Q8_0) return matmul_typed<BlockQ8_0, BlockQ8_0>(xa, nb, T, w, y, nb, k.dot_q8_0, k.dot4_q8_0);
      return matmul_typed<BlockQ4_0, BlockQ8_0>(xa, nb, T, w, y, nb, k.dot_q4_0, k.dot4_q4_0);
    }
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K: {
      thread_local std::vector<BlockQ8_K> buf;
      const int64_t nb = n / kQK_K;
      BlockQ8_K* xa = scratch(buf, static_cast<size_t>(T * nb));
      for (int64_t t = 0; t < T; ++t) k.quantize_q8_k(x + t * n, xa + t * nb, n);
      if (w.dtype == DType::Q4_K) return matmul_typed<BlockQ4_K, BlockQ8_K>(xa, nb, T, w, y, nb, k.dot_q4_k, k.dot4_q4_k);
      if (w.dtype == DType::Q5_K) return matmul_typed<BlockQ5_K, BlockQ8_K>(xa, nb, T, w, y, nb, k.dot_q5_k, k.dot4_q5_k);
      return matmul_typed<BlockQ6_K, BlockQ8_K>(xa, nb, T, w, y, nb, k.dot_q6_k, k.dot4_q6_k);
    }
    default:
      fail("matmul: no kernel for weight type {}", dtype_name(w.dtype));
  }
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

void rope(float* x, int64_t n_heads, int64_t head_dim, int64_t rope_dim, int32_t pos, float freq_base, RopeType type) {
  // θ_i = pos · base^(−2i/rope_dim), built by repeated multiplication in float as ggml does.
  const float theta_scale = std::pow(freq_base, -2.0f / static_cast<float>(rope_dim));
  thread_local std::vector<float> cs;
  float* c = scratch(cs, static_cast<size_t>(rope_dim));
  float theta = static_cast<float>(pos);
  for (int64_t i = 0; i < rope_dim / 2; ++i) {
    c[2 * i] = std::cos(theta);
    c[2 * i + 1] = std::sin(theta);
    theta *= theta_scale;
  }
  for (int64_t h = 0; h < n_heads; ++h) {
    float* v = x + h * head_dim;
    for (int64_t i = 0; i < rope_dim / 2; ++i) {
      const int64_t a = type == RopeType::kNorm ? 2 * i : i;
      const int64_t b = type == RopeType::kNorm ? 2 * i + 1 : i + rope_dim / 2;
      const float x0 = v[a], x1 = v[b];
      v[a] = x0 * c[2 * i] - x1 * c[2 * i + 1];
      v[b] = x0 * c[2 * i + 1] + x1 * c[2 * i];
    }
  }
}

void silu_mul(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void softmax(float* x, int64_t n) {
  float mx = -INFINITY;
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, x[i]);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void write_kv(const float* k, const float* v, const int64_t* slot_mapping, int64_t T, int64_t kv_dim, void* k_cache,
              void* v_cache, KvDType dtype) {
  for (int64_t t = 0; t < T; ++t) {
    const size_t off = static_cast<size_t>(slot_mapping[t]) * kv_dim;
    if (dtype == KvDType::kF32) {
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


// Vectorised over head_dim through the kernel table (q·k and Σ p·v per key).
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
  // One task per (query token, head): independent, so the split never changes a result.
  auto one = [&](int64_t task) {
    const int64_t t = task / a.n_heads, h = task % a.n_heads, kvh = h / group;
    int32_t r = 0;
    while (a.query_start_loc[r + 1] <= t) ++r;
    const int32_t n_keys = a.positions[t] + 1;
    const int32_t* table = a.block_tables + static_cast<int64_t>(r) * a.max_blocks_per_seq;
    thread_local std::vector<float> sbuf;
    float* scores = scratch(sbuf, static_cast<size_t>(n_keys));
    const float* q = a.q + (t * a.n_heads + h) * d;
    for (int32_t p = 0; p < n_keys; ++p) {
      const int64_t slot = static_cast<int64_t>(table[p / a.block_size]) * a.block_size + p % a.block_size;
      const KV* kr = kc + slot * kv_dim + kvh * d;
      if constexpr (std::is_same_v<KV, float>) scores[p] = k.dot_f32(q, kr, d) * a.scale;
      else scores[p] = k.dot_f32_f16(q, kr, d) * a.scale;
    }
    softmax(scores, n_keys);
    float* o = a.out + (t * a.n_heads + h) * d;
    std::fill(o, o + d, 0.0f);
    for (int32_t p = 0; p < n_keys; ++p) {
      const int64_t slot = static_cast<int64_t>(table[p / a.block_size]) * a.block_size + p % a.block_size;
      const KV* vr = vc + slot * kv_dim + kvh * d;
      if constexpr (std::is_same_v<KV, float>) k.axpy_f32(scores[p], vr, o, d);
      else k.axpy_f16(scores[p], vr, o, d);
    }
  };
  auto range = [&](int64_t b, int64_t e) {
    for (int64_t task = b; task < e; ++task) one(task);
  };
  if (work < kMinParallelWork) range(0, T * a.n_heads);
  else ThreadPool::global().parallel_for_dynamic(T * a.n_heads, 4, range);
}

}  // namespace

void paged_attention(const PagedAttentionArgs& a) {
  if (a.kv_dtype == KvDType::kF32) attention_impl<float>(a);
  else attention_impl<uint16_t>(a);
}

}  // namespace kvik
