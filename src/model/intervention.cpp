#include "model/intervention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <memory>

#include <xxhash.h>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace kvik {

Direction load_direction(const std::string& path, int64_t dim) {
  std::ifstream in(path);
  if (!in) fail("{}: cannot open direction file", path);
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.is_object()) fail("{}: not a JSON object (expected kvik direction's output)", path);
  if (!j.contains("vector") || !j["vector"].is_array() || j["vector"].empty())
    fail("{}: 'vector' (a non-empty array of numbers) is required", path);
  Direction d;
  for (const auto& v : j["vector"]) {
    if (!v.is_number()) fail("{}: 'vector' holds a non-number", path);
    d.vector.push_back(v.get<float>());
  }
  if (j.contains("layer") && j["layer"].is_number_integer()) d.layer = j["layer"].get<int32_t>();
  if (j.contains("model") && j["model"].is_string()) d.model = j["model"].get<std::string>();
  if (j.contains("norm") && j["norm"].is_number()) d.norm = j["norm"].get<float>();
  if (j.contains("d") &&
      (!j["d"].is_number_integer() || j["d"].get<int64_t>() != static_cast<int64_t>(d.vector.size())))
    fail("{}: 'd' is {} but 'vector' has {} entries", path, j["d"].dump(), d.vector.size());
  if (dim > 0 && static_cast<int64_t>(d.vector.size()) != dim)
    fail("{}: direction has d = {}, but the model's residual stream has d = {} (found in model '{}')", path,
         d.vector.size(), dim, d.model);
  return d;
}

bool Intervention::at(int32_t layer) const { return std::binary_search(layers.begin(), layers.end(), layer); }

std::shared_ptr<const InterventionList> make_interventions(std::vector<Intervention> items, int64_t n_layers,
                                                           int64_t dim) {
  auto list = std::make_shared<InterventionList>();
  // Owned so that a validation error below (it throws) does not leak the state.
  const std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> state(XXH3_createState(), XXH3_freeState);
  XXH3_state_t* st = state.get();
  XXH3_64bits_reset(st);
  for (size_t i = 0; i < items.size(); ++i) {
    Intervention& iv = items[i];
    if (!iv.direction || static_cast<int64_t>(iv.direction->size()) != dim)
      fail("intervention {}: the direction has {} entries, the model's d is {}", i,
           iv.direction ? iv.direction->size() : 0, dim);
    double n2 = 0;
    for (float v : *iv.direction) n2 += static_cast<double>(v) * v;
    if (!(n2 > 0) || !std::isfinite(n2)) fail("intervention {}: the direction is zero or not finite", i);
    if (!std::isfinite(iv.alpha)) fail("intervention {}: alpha is not finite", i);
    if (std::abs(n2 - 1.0) > 1e-6) {
      auto unit = std::make_shared<std::vector<float>>(*iv.direction);
      for (float& v : *unit) v = static_cast<float>(v / std::sqrt(n2));
      iv.direction = unit;
    }
    std::sort(iv.layers.begin(), iv.layers.end());
    iv.layers.erase(std::unique(iv.layers.begin(), iv.layers.end()), iv.layers.end());
    if (iv.layers.empty()) fail("intervention {}: no layers", i);
    if (iv.layers.front() < 0 || iv.layers.back() > n_layers)
      fail("intervention {}: layer {} is outside 0..{} (0 = after the embedding, {} = the model's output)", i,
           iv.layers.front() < 0 ? iv.layers.front() : iv.layers.back(), n_layers, n_layers);
    const int32_t op = static_cast<int32_t>(iv.op);
    XXH3_64bits_update(st, &op, sizeof op);
    XXH3_64bits_update(st, &iv.alpha, sizeof iv.alpha);
    const uint64_t nl = iv.layers.size();
    XXH3_64bits_update(st, &nl, sizeof nl);
    XXH3_64bits_update(st, iv.layers.data(), iv.layers.size() * sizeof(int32_t));
    XXH3_64bits_update(st, iv.direction->data(), iv.direction->size() * sizeof(float));
  }
  list->cache_key = XXH3_64bits_digest(st);
  list->items = std::move(items);
  return list;
}

void apply_interventions(const InterventionList& list, int32_t layer, bool block_end, float* x, int64_t dim) {
  for (const Intervention& iv : list.items) {
    if (!iv.at(layer)) continue;
    const float* r = iv.direction->data();
    if (iv.op == Intervention::Op::kAblate) {
      double dot = 0;
      for (int64_t i = 0; i < dim; ++i) dot += static_cast<double>(x[i]) * r[i];
      const float c = static_cast<float>(dot);
      for (int64_t i = 0; i < dim; ++i) x[i] -= c * r[i];
    } else if (block_end) {
      for (int64_t i = 0; i < dim; ++i) x[i] += iv.alpha * r[i];
    }
  }
}

std::vector<int32_t> parse_layer_list(const std::string& s, const std::string& what) {
  std::vector<int32_t> out;
  size_t p = 0;
  while (p <= s.size()) {
    const size_t e = std::min(s.find(',', p), s.size());
    const std::string item = s.substr(p, e - p);
    int32_t a = 0, b = 0;
    char dash = 0, extra = 0;
    const int n = std::sscanf(item.c_str(), "%d%c%d%c", &a, &dash, &b, &extra);
    if (n == 1 && item.find_first_not_of("0123456789") == std::string::npos) {
      out.push_back(a);
    } else if (n == 3 && dash == '-' && item.find_first_not_of("0123456789-") == std::string::npos && a <= b &&
               b - a < 100000) {
      for (int32_t l = a; l <= b; ++l) out.push_back(l);
    } else {
      fail("{}: '{}' is not a layer list (e.g. 3,4,8-10)", what, s);
    }
    p = e + 1;
  }
  return out;
}

}  // namespace kvik
