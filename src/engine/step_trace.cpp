#include "engine/step_trace.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <span>

#include "core/error.h"
#include "engine/single_sequence.h"

namespace kvik {

namespace {

// The table of shapes for T new tokens on a cache of ctx tokens (after the step).
std::vector<StepTraceRow> shape_rows(const ModelConfig& c, int64_t T, int64_t ctx, const std::vector<double>& rms) {
  const int64_t nh = c.n_heads, nkv = c.n_kv_heads, dh = c.head_dim, d = c.dim;
  std::vector<StepTraceRow> rows = {
      {"ids", "[T]", {T}, "token ids of this step"},
      {"x = E[ids]", "[T, d]", {T, d}, fmt::format("|x| rms {:.4f}", rms[0])},
      {"h = rmsnorm(x, g1[l])", "[T, d]", {T, d}, "", true},
      {"q = h @ W_q[l] -> heads", "[n_h, T, d_h]", {nh, T, dh}, "", true},
      {"k = h @ W_k[l] -> heads", "[n_kv, T, d_h]", {nkv, T, dh}, "", true},
      {"v = h @ W_v[l] -> heads", "[n_kv, T, d_h]", {nkv, T, dh}, "", true},
      {"q, k = rope(q, pos), rope(k, pos)", "", {}, fmt::format("rope dims {} of {}", c.rope_dim, dh), true},
      {"K, V = cache[l].append(k, v)",
       "[n_kv, ctx, d_h]",
       {nkv, ctx, dh},
       fmt::format("ctx = {} old + {} new", ctx - T, T),
       true},
      {"S = q @ K^T / sqrt(d_h) + mask",
       "[n_h, T, ctx]",
       {nh, T, ctx},
       fmt::format("each KV head serves {} query heads", nh / nkv),
       true},
      {"P = softmax(S)", "[n_h, T, ctx]", {nh, T, ctx}, "", true},
      {"o = (P @ V) -> [T, n_h*d_h]", "[T, n_h*d_h]", {T, nh * dh}, "", true},
      {"x = x + o @ W_o[l]", "[T, d]", {T, d}, "", true},
      {"h = rmsnorm(x, g2[l])", "[T, d]", {T, d}, "", true},
      {"gate, up = h @ W_gate[l], W_up[l]", "[T, d_ff] x 2", {T, c.ff_dim}, "", true},
      {"x = x + (silu(gate)*up) @ W_down[l]", "[T, d]", {T, d}, "", true},
      {"h = rmsnorm(x[-1], g_final)", "[d]", {d}, "only the last position samples"},
      {"logits = h @ W_U", "[V]", {c.vocab_size}, c.tied_embeddings ? "W_U = E (tied)" : ""},
      {"slot_mapping", "[T]", {T}, "cache slot of each new token's K/V"},
  };
  return rows;
}

}  // namespace

StepTrace trace_step(LlamaModel& model, const std::vector<int32_t>& ids, bool decode) {
  const ModelConfig& cfg = model.config();
  if (ids.empty() || (decode && ids.size() < 2)) fail("the prompt needs {} token(s)", decode ? 2 : 1);
  if (static_cast<int64_t>(ids.size()) > cfg.context_length)
    fail("the prompt is {} tokens, longer than the model's context ({})", ids.size(), cfg.context_length);
  StepTrace t;
  t.decode = decode;
  t.ctx = static_cast<int64_t>(ids.size());
  SingleSequence seq(model, t.ctx);
  const std::span<const int32_t> all(ids);
  if (decode) seq.append(all.first(ids.size() - 1));
  const std::span<const int32_t> step = decode ? all.last(1) : all;
  t.T = static_cast<int64_t>(step.size());
  t.token_ids.assign(step.begin(), step.end());
  t.stream_rms.assign(static_cast<size_t>(cfg.n_layers + 1), 0.0);
  seq.set_observer([&](int32_t layer, const float* x, int64_t n) {
    double ss = 0;
    for (int64_t i = (n - 1) * cfg.dim; i < n * cfg.dim; ++i) ss += static_cast<double>(x[i]) * x[i];
    t.stream_rms[static_cast<size_t>(layer)] = std::sqrt(ss / cfg.dim);
  });
  const std::vector<float> logits = seq.append(step);
  for (int64_t p = t.ctx - t.T; p < t.ctx; ++p) t.slot_mapping.push_back(p);
  t.rows = shape_rows(cfg, t.T, t.ctx, t.stream_rms);
  // Softmax of the row, max-subtracted, float exponentials summed in double (interp::softmax's arithmetic).
  const int64_t V = cfg.vocab_size;
  const auto best = std::max_element(logits.begin(), logits.begin() + V);
  double sum = 0;
  for (int64_t i = 0; i < V; ++i) sum += std::exp(logits[i] - *best);
  t.next_token = static_cast<int32_t>(best - logits.begin());
  t.next_prob = static_cast<float>(1.0 / sum);
  return t;
}

}  // namespace kvik
