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

// Dispatch: groups the (token, expert) pairs whose expert is held here (all T·k of them in one process) by expert:
// local expert e's rows are xs[offsets[e] .. + counts[e]), in token order; pos[t·k + s] is the row of token t's
// s-th expert, or −1 when another rank holds that expert. Returns the rows: the pairs run here.
int64_t dispatch(const MoeWeights& w, const float* xn, int64_t T, int64_t d, int64_t k, MoeWorkspace& ws) {
  const int64_t e0 = w.first_expert, held = static_cast<int64_t>(w.gate.size()), N = T * k;
  std::fill(ws.counts.begin(), ws.counts.begin() + held, 0);
  for (int64_t i = 0; i < N; ++i)
    if (const int64_t e = ws.ids[i] - e0; e >= 0 && e < held) ++ws.counts[e];
  int64_t rows = 0;
  for (int64_t e = 0; e < held; ++e) ws.offsets[e] = static_cast<int32_t>(rows), rows += ws.counts[e];
  std::fill(ws.counts.begin(), ws.counts.begin() + held, 0);
  for (int64_t i = 0; i < N; ++i) {
    const int64_t e = ws.ids[i] - e0;
    if (e < 0 || e >= held) {
      ws.pos[i] = -1;
      continue;
    }
    const int64_t row = ws.pos[i] = ws.offsets[e] + ws.counts[e]++;
    std::copy_n(xn + (i / k) * d, d, &ws.xs[row * d]);  // xs [rows, d]
  }
  return rows;
}

// Combine: out[t] = Σ_s weight[t, s] · ys[pos[t, s]] over the pairs run here, s in routing order (llama.cpp adds the
// k views in that order); 0 for a token none of whose experts is held here.
void combine(const MoeWorkspace& ws, int64_t T, int64_t d, int64_t k, float* out) {
  for (int64_t t = 0; t < T; ++t) {
    float* o = out + t * d;
    bool first = true;
    for (int64_t s = 0; s < k; ++s) {
      if (ws.pos[t * k + s] < 0) continue;
      const float wt = ws.weights[t * k + s];
      const float* y = &ws.ys[ws.pos[t * k + s] * d];
      if (first)
        for (int64_t i = 0; i < d; ++i) o[i] = wt * y[i];
      else
        for (int64_t i = 0; i < d; ++i) o[i] += wt * y[i];
      first = false;
    }
    if (first) std::fill(o, o + d, 0.0f);
  }
}

// One chunk of at most ws.capacity tokens.
void moe_chunk(const MoeWeights& w, const ModelConfig& c, const float* xn, int64_t T, MoeWorkspace& ws, float* out) {
  const int64_t d = c.dim, k = c.n_experts_used, ff = c.expert_ff_dim;
  matmul(xn, T, w.router, ws.logits.data());  // logits [T, E]
  route_experts(ws.logits.data(), T, c.n_experts, k, c.norm_topk_prob, ws.ids.data(), ws.weights.data());
  const int64_t rows = dispatch(w, xn, T, d, k, ws);  // xs [rows, d]

  std::vector<MatmulGroup>& groups = ws.groups;  // at most 2·E entries
  groups.clear();
  for (size_t e = 0; e < w.gate.size(); ++e) {
    if (ws.counts[e] == 0) continue;
    const int64_t o = ws.offsets[e], n = ws.counts[e];
    groups.push_back({&w.gate[e], o, n, &ws.gate[o * ff]});
    groups.push_back({&w.up[e], o, n, &ws.up[o * ff]});
  }
  matmul_grouped(ws.xs.data(), rows, groups);         // gate, up [rows, d_ff_exp]
  silu_mul(ws.gate.data(), ws.up.data(), rows * ff);  // silu(gate) · up
  groups.clear();
  for (size_t e = 0; e < w.down.size(); ++e)
    if (ws.counts[e] > 0) groups.push_back({&w.down[e], ws.offsets[e], ws.counts[e], &ws.ys[ws.offsets[e] * d]});
  matmul_grouped(ws.gate.data(), rows, groups);  // ys [rows, d]
  combine(ws, T, d, k, out);
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
