#include "engine/sample/logits_ops.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>
#include <unordered_map>
#include "core/error.h"

namespace kvik {

int32_t argmax(std::span<const float> logits) {
  int32_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[best]) best = static_cast<int32_t>(i);
  return best;
}

std::vector<float> softmax_probs(std::span<const float> logits) {
  std::vector<float> p(logits.begin(), logits.end());
  float mx = -std::numeric_limits<float>::infinity();
  for (float v : p) mx = std::max(mx, v);
  double sum = 0.0;
  for (float& v : p) {
    v = std::exp(v - mx);
    sum += v;
  }
  for (float& v : p) v = static_cast<float>(v / sum);
  return p;
}

std::vector<std::pair<int32_t, float>> sampling_distribution(std::span<const float> logits, const SamplingParams& p) {
  std::vector<std::pair<int32_t, float>> d;
  if (p.temperature == 0.0f) {
    d.emplace_back(argmax(logits), 1.0f);
    return d;
  }
  d.reserve(logits.size());
  for (size_t i = 0; i < logits.size(); ++i)
    if (logits[i] != -std::numeric_limits<float>::infinity()) d.emplace_back(static_cast<int32_t>(i), logits[i]);
  if (d.empty()) fail("sampling: every token is masked");
  auto by_logit = [](const auto& a, const auto& b) {
    return a.second > b.second || (a.second == b.second && a.first < b.first);
  };
  const size_t k = (p.top_k > 0 && static_cast<size_t>(p.top_k) < d.size()) ? static_cast<size_t>(p.top_k) : d.size();
  std::partial_sort(d.begin(), d.begin() + static_cast<std::ptrdiff_t>(k), d.end(), by_logit);
  d.resize(k);
  // Softmax with temperature over the survivors (d[0] holds the max).
  const double mx = d[0].second;
  double sum = 0.0;
  std::vector<double> e(d.size());
  for (size_t i = 0; i < d.size(); ++i) sum += e[i] = std::exp((d[i].second - mx) / p.temperature);
  for (size_t i = 0; i < d.size(); ++i) d[i].second = static_cast<float>(e[i] / sum);
  // top-p: keep the smallest prefix whose mass reaches top_p.
  if (p.top_p < 1.0f) {
    double cum = 0.0;
    size_t keep = d.size();
    for (size_t i = 0; i < d.size(); ++i) {
      cum += e[i] / sum;
      if (cum >= p.top_p) {
        keep = i + 1;
        break;
      }
    }
    d.resize(keep);
  }
  // min-p: drop tokens below min_p × the top probability.
  if (p.min_p > 0.0f) {
    const float cut = p.min_p * d[0].second;
    size_t keep = 1;
    while (keep < d.size() && d[keep].second >= cut) ++keep;
    d.resize(keep);
  }
  double mass = 0.0;
  for (const auto& x : d) mass += x.second;
  for (auto& x : d) x.second = static_cast<float>(x.second / mass);
  return d;
}

int32_t sample_token(std::span<const float> logits, const SamplingParams& p, RequestRng& rng) {
  if (p.temperature == 0.0f) return argmax(logits);
  const auto d = sampling_distribution(logits, p);
  const double u = rng.uniform();
  double cum = 0.0;
  for (const auto& x : d) {
    cum += x.second;
    if (u < cum) return x.first;
  }
  return d.back().first;
}

void apply_penalties(std::span<float> logits, std::span<const int32_t> prompt_ids, std::span<const int32_t> output_ids,
                     const SamplingParams& p) {
  const auto V = static_cast<int64_t>(logits.size());
  if (p.repetition_penalty != 1.0f) {
    // Each seen token once: a token repeated k times is still penalised once (vLLM, CTRL paper).
    std::unordered_map<int32_t, bool> seen;
    auto penalise = [&](int32_t t) {
      if (t < 0 || t >= V || !seen.emplace(t, true).second) return;
      float& l = logits[t];
      l = l > 0 ? l / p.repetition_penalty : l * p.repetition_penalty;
    };
    for (int32_t t : prompt_ids) penalise(t);
    for (int32_t t : output_ids) penalise(t);
  }
  if (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) {
    std::unordered_map<int32_t, int32_t> counts;
    for (int32_t t : output_ids)
      if (t >= 0 && t < V) ++counts[t];
    // logit -= frequency_penalty · count + presence_penalty · [count > 0]
    for (const auto& [t, n] : counts) logits[t] -= p.frequency_penalty * static_cast<float>(n) + p.presence_penalty;
  }
}

TokenLogprobs compute_logprobs(std::span<const float> logits, int32_t token, int32_t num_top) {
  // log_softmax(l)_i = l_i − max − log Σ exp(l_j − max), summed in double.
  float mx = -std::numeric_limits<float>::infinity();
  for (float v : logits) mx = std::max(mx, v);
  double sum = 0.0;
  for (float v : logits) sum += std::exp(static_cast<double>(v) - mx);
  const double log_z = mx + std::log(sum);
  TokenLogprobs r;
  r.token = token;
  r.logprob = static_cast<float>(logits[token] - log_z);
  if (num_top > 0) {
    const size_t k = std::min(static_cast<size_t>(num_top), logits.size());
    std::vector<int32_t> idx(logits.size());
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<int32_t>(i);
    std::partial_sort(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(k), idx.end(),
                      [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
    for (size_t i = 0; i < k; ++i) r.top.emplace_back(idx[i], static_cast<float>(logits[idx[i]] - log_z));
  }
  return r;
}

}  // namespace kvik
