#include "interp/interp.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "engine/single_sequence.h"

namespace kvik::interp {

StreamCapture capture_stream(LlamaModel& model, const std::vector<int32_t>& tokens,
                             std::shared_ptr<const InterventionList> interventions, std::vector<float>* logits) {
  const ModelConfig& c = model.config();
  const int64_t T = static_cast<int64_t>(tokens.size());
  if (T == 0) fail("the prompt has no tokens");
  StreamCapture s;
  s.T = T;
  s.dim = c.dim;
  s.x.resize(static_cast<size_t>(c.n_layers + 1));
  SingleSequence seq(model, T);
  seq.set_interventions(std::move(interventions));
  seq.set_observer([&s](int32_t layer, const float* x, int64_t n) { s.x[layer].assign(x, x + n * s.dim); });
  std::vector<float> out = seq.append(tokens, logits ? T : 1);
  if (logits) *logits = std::move(out);
  return s;
}

std::vector<float> softmax(const float* logits, int64_t n) {
  const float mx = *std::max_element(logits, logits + n);
  std::vector<float> p(static_cast<size_t>(n));
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += p[i] = std::exp(logits[i] - mx);
  for (float& v : p) v = static_cast<float>(v / sum);
  return p;
}

std::vector<TokenProb> top_k(const std::vector<float>& probs, int32_t k) {
  std::vector<int32_t> ids(probs.size());
  std::iota(ids.begin(), ids.end(), 0);
  k = std::min<int32_t>(k, static_cast<int32_t>(ids.size()));
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(),
                    [&](int32_t a, int32_t b) { return probs[a] > probs[b] || (probs[a] == probs[b] && a < b); });
  std::vector<TokenProb> r;
  for (int32_t i = 0; i < k; ++i) r.push_back({ids[i], probs[ids[i]]});
  return r;
}

Lens logit_lens(LlamaModel& model, const StreamCapture& s, const std::vector<int32_t>& tokens, int32_t top) {
  const int64_t V = model.config().vocab_size;
  Lens lens;
  lens.T = s.T;
  std::vector<float> logits(static_cast<size_t>(s.T * V));
  // The target at each position: the prompt's next token, and at the last one the model's own prediction.
  std::vector<int32_t> target(tokens.begin() + 1, tokens.end());
  model.lm_head(s.row(static_cast<int32_t>(s.x.size() - 1), s.T - 1), 1, logits.data());
  target.push_back(static_cast<int32_t>(std::max_element(logits.begin(), logits.begin() + V) - logits.begin()));
  for (const auto& x : s.x) {
    model.lm_head(x.data(), s.T, logits.data());
    std::vector<LensCell> row(static_cast<size_t>(s.T));
    for (int64_t t = 0; t < s.T; ++t) {
      const std::vector<float> p = softmax(&logits[t * V], V);
      row[t].top = top_k(p, top);
      row[t].target = target[t];
      row[t].target_prob = p[target[t]];
      row[t].target_rank =
          static_cast<int32_t>(std::count_if(p.begin(), p.end(), [&](float v) { return v > p[target[t]]; }));
    }
    lens.cells.push_back(std::move(row));
  }
  return lens;
}

namespace {

// The prompt's representative row at one layer: its last position or the mean over positions, in double.
std::vector<double> pooled(const StreamCapture& s, int32_t layer, Pooling pool) {
  std::vector<double> v(static_cast<size_t>(s.dim), 0.0);
  const int64_t first = pool == Pooling::kLast ? s.T - 1 : 0;
  for (int64_t t = first; t < s.T; ++t)
    for (int64_t i = 0; i < s.dim; ++i) v[i] += s.row(layer, t)[i];
  for (double& x : v) x /= static_cast<double>(s.T - first);
  return v;
}

void mean_std(const std::vector<double>& v, double* mean, double* sd) {
  *mean = std::accumulate(v.begin(), v.end(), 0.0) / v.size();
  double ss = 0;
  for (double x : v) ss += (x - *mean) * (x - *mean);
  *sd = v.size() > 1 ? std::sqrt(ss / (v.size() - 1)) : 0.0;
}

}  // namespace

DirectionResult find_direction(LlamaModel& model, const std::vector<std::vector<int32_t>>& positive,
                               const std::vector<std::vector<int32_t>>& negative, int32_t layer, Pooling pool) {
  const ModelConfig& c = model.config();
  if (positive.empty() || negative.empty()) fail("each prompt group needs at least one prompt");
  if (layer < 0 || layer > c.n_layers)
    fail("--layer {} is outside 0..{} (0 = after the embedding, {} = the model's output)", layer, c.n_layers,
         c.n_layers);
  const int32_t L1 = static_cast<int32_t>(c.n_layers + 1);
  // Every prompt's pooled row at every layer: [group][prompt][layer][d].
  std::vector<std::vector<std::vector<std::vector<double>>>> rows(2);
  for (int g = 0; g < 2; ++g)
    for (const auto& toks : g == 0 ? positive : negative) {
      const StreamCapture s = capture_stream(model, toks);
      std::vector<std::vector<double>> per_layer;
      for (int32_t l = 0; l < L1; ++l) per_layer.push_back(pooled(s, l, pool));
      rows[g].push_back(std::move(per_layer));
    }
  std::vector<double> diff(static_cast<size_t>(c.dim), 0.0);
  for (int g = 0; g < 2; ++g)
    for (const auto& p : rows[g])
      for (int64_t i = 0; i < c.dim; ++i) diff[i] += (g == 0 ? 1.0 : -1.0) * p[layer][i] / rows[g].size();
  double n2 = 0;
  for (double v : diff) n2 += v * v;
  if (!(n2 > 0)) fail("the two prompt groups have identical mean activations at layer {}: no direction", layer);
  DirectionResult r;
  r.direction.model = model_id(model);
  r.direction.layer = layer;
  r.direction.norm = static_cast<float>(std::sqrt(n2));
  for (double v : diff) r.direction.vector.push_back(static_cast<float>(v / std::sqrt(n2)));
  for (int32_t l = 0; l < L1; ++l) {
    LayerSeparation sep;
    for (int g = 0; g < 2; ++g) {
      std::vector<double> proj;
      for (const auto& p : rows[g]) {
        double d = 0;
        for (int64_t i = 0; i < c.dim; ++i) d += p[l][i] * r.direction.vector[i];
        proj.push_back(d);
      }
      mean_std(proj, g == 0 ? &sep.pos_mean : &sep.neg_mean, g == 0 ? &sep.pos_std : &sep.neg_std);
    }
    r.separation.push_back(sep);
  }
  return r;
}

void save_direction(const DirectionResult& r, int64_t dim, const std::string& path) {
  nlohmann::json sep = nlohmann::json::array();
  for (size_t l = 0; l < r.separation.size(); ++l) {
    const LayerSeparation& s = r.separation[l];
    sep.push_back({{"layer", l},
                   {"positive_mean", s.pos_mean},
                   {"positive_std", s.pos_std},
                   {"negative_mean", s.neg_mean},
                   {"negative_std", s.neg_std}});
  }
  const nlohmann::json j = {{"model", r.direction.model}, {"layer", r.direction.layer}, {"d", dim},
                            {"norm", r.direction.norm},   {"separation", sep},          {"vector", r.direction.vector}};
  std::ofstream out(path);
  if (!out) fail("{}: cannot write", path);
  out << j.dump(1) << "\n";
  if (!out) fail("{}: write failed", path);
}

std::string model_id(const LlamaModel& model) {
  if (!model.config().name.empty()) return model.config().name;
  return std::filesystem::path(model.path()).filename().string();
}

double repeated_4gram_rate(const std::vector<int32_t>& tokens) {
  if (tokens.size() < 4) return 0;
  std::set<std::vector<int32_t>> seen;
  int64_t repeated = 0, total = 0;
  for (size_t i = 0; i + 4 <= tokens.size(); ++i, ++total)
    if (!seen.insert({tokens.begin() + i, tokens.begin() + i + 4}).second) ++repeated;
  return static_cast<double>(repeated) / static_cast<double>(total);
}

}  // namespace kvik::interp
