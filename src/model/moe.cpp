#include "model/moe.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/cpu/ops.h"

namespace kvik {

void route_experts(const float* logits, int64_t T, int64_t E, int64_t k, bool norm, int32_t* ids, float* weights) {
  thread_local std::vector<float> p;  // grown once: no allocation per step
  thread_local std::vector<int32_t> order;
  p.resize(static_cast<size_t>(E));
  order.resize(static_cast<size_t>(E));
  for (int64_t t = 0; t < T; ++t) {
    const float* l = logits + t * E;
    const float mx = *std::max_element(l, l + E);
    double sum = 0;  // ggml's soft_max sums in double
    for (int64_t e = 0; e < E; ++e) sum += p[e] = std::exp(l[e] - mx);
    const float inv = static_cast<float>(1.0 / sum);
    for (int64_t e = 0; e < E; ++e) p[e] *= inv;
    // The k largest, descending; equal probabilities keep the lower expert id first (a stable order).
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    float wsum = 0;
    for (int64_t s = 0; s < k; ++s) {
      ids[t * k + s] = order[s];
      weights[t * k + s] = p[order[s]];
      wsum += p[order[s]];
    }
    if (norm)
      for (int64_t s = 0; s < k; ++s) weights[t * k + s] /= wsum;
  }
}

void MoeWorkspace::reserve(const ModelConfig& c, int64_t T) {
  T = std::min(T, kMoeChunkTokens);
  if (T <= capacity) return;
  capacity = T;
  const int64_t k = c.n_experts_used, rows = T * k;
  logits.resize(T * c.n_experts);
  weights.resize(rows);
  ids.resize(rows);
  pos.resize(rows);
  xs.resize(rows * c.dim);
  gate.resize(rows * c.expert_ff_dim);
  up.resize(rows * c.expert_ff_dim);
  ys.resize(rows * c.dim);
  counts.resize(c.n_experts);
  offsets.resize(c.n_experts);
  groups.reserve(2 * c.n_experts);
}

namespace {

// One chunk of at most ws.capacity tokens.
void moe_chunk(const MoeWeights& w, const ModelConfig& c, const float* xn, int64_t T, MoeWorkspace& ws, float* out) {
  const int64_t d = c.dim, E = c.n_experts, k = c.n_experts_used, ff = c.expert_ff_dim, N = T * k;
  matmul(xn, T, w.router, ws.logits.data());  // logits [T, E]
  route_experts(ws.logits.data(), T, E, k, c.norm_topk_prob, ws.ids.data(), ws.weights.data());

  // Group the T·k (token, expert) pairs by expert: expert e's rows are xs[offsets[e] .. + counts[e]), in token
  // order; pos[t·k + s] is the row of token t's s-th expert.
  std::fill(ws.counts.begin(), ws.counts.end(), 0);
  for (int64_t i = 0; i < N; ++i) ++ws.counts[ws.ids[i]];
  for (int64_t e = 0, o = 0; e < E; ++e) ws.offsets[e] = static_cast<int32_t>(o), o += ws.counts[e];
  std::fill(ws.counts.begin(), ws.counts.end(), 0);
  for (int64_t i = 0; i < N; ++i) {
    const int32_t e = ws.ids[i];
    const int64_t row = ws.pos[i] = ws.offsets[e] + ws.counts[e]++;
    std::copy_n(xn + (i / k) * d, d, &ws.xs[row * d]);  // xs [N, d]
  }

  std::vector<MatmulGroup>& groups = ws.groups;  // at most 2·E entries
  groups.clear();
  for (int64_t e = 0; e < E; ++e) {
    if (ws.counts[e] == 0) continue;
    const int64_t o = ws.offsets[e], n = ws.counts[e];
    groups.push_back({&w.gate[e], o, n, &ws.gate[o * ff]});
    groups.push_back({&w.up[e], o, n, &ws.up[o * ff]});
  }
  matmul_grouped(ws.xs.data(), N, groups);         // gate, up [N, d_ff_exp]
  silu_mul(ws.gate.data(), ws.up.data(), N * ff);  // silu(gate) · up
  groups.clear();
  for (int64_t e = 0; e < E; ++e)
    if (ws.counts[e] > 0) groups.push_back({&w.down[e], ws.offsets[e], ws.counts[e], &ws.ys[ws.offsets[e] * d]});
  matmul_grouped(ws.gate.data(), N, groups);  // ys [N, d]

  // out[t] = Σ_s weight[t, s] · ys[pos[t, s]], s in routing order (llama.cpp adds the k views in that order).
  for (int64_t t = 0; t < T; ++t) {
    float* o = out + t * d;
    for (int64_t s = 0; s < k; ++s) {
      const float wt = ws.weights[t * k + s];
      const float* y = &ws.ys[ws.pos[t * k + s] * d];
      if (s == 0)
        for (int64_t i = 0; i < d; ++i) o[i] = wt * y[i];
      else
        for (int64_t i = 0; i < d; ++i) o[i] += wt * y[i];
    }
  }
}

}  // namespace

void moe_mlp(const MoeWeights& w, const ModelConfig& c, const float* xn, int64_t T, MoeWorkspace& ws, float* out) {
  ws.reserve(c, T);
  for (int64_t t0 = 0; t0 < T; t0 += ws.capacity) {
    const int64_t n = std::min(ws.capacity, T - t0);
    moe_chunk(w, c, xn + t0 * c.dim, n, ws, out + t0 * c.dim);
  }
}

}  // namespace kvik
