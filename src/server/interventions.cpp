#include "server/interventions.h"

#include <cmath>

#include "core/error.h"

namespace kvik::server {

using json = nlohmann::json;

std::vector<InterventionSpec> parse_interventions(const json& v) {
  if (!v.is_array()) throw ApiError::bad_request("'interventions' must be a list of objects", "interventions");
  if (v.size() > 16) throw ApiError::bad_request("'interventions' holds more than 16 entries", "interventions");
  std::vector<InterventionSpec> out;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string at = fmt::format("interventions[{}]", i);
    const json& e = v[i];
    if (!e.is_object()) throw ApiError::bad_request(fmt::format("'{}' must be an object", at), at);
    for (auto it = e.begin(); it != e.end(); ++it)
      if (it.key() != "direction" && it.key() != "op" && it.key() != "alpha" && it.key() != "layers")
        throw ApiError::bad_request(
            fmt::format("'{}' has an unknown field '{}' (direction, op, alpha, layers)", at, it.key()),
            at + "." + it.key());
    InterventionSpec s;
    if (!e.contains("direction") || !e["direction"].is_string())
      throw ApiError::bad_request(fmt::format("'{}.direction' (a registered direction's name) is required", at),
                                  at + ".direction");
    s.direction = e["direction"].get<std::string>();
    if (!e.contains("op") || !e["op"].is_string() || (e["op"] != "steer" && e["op"] != "ablate"))
      throw ApiError::bad_request(fmt::format("'{}.op' must be \"steer\" or \"ablate\"", at), at + ".op");
    s.op = e["op"] == "steer" ? Intervention::Op::kSteer : Intervention::Op::kAblate;
    const bool has_alpha = e.contains("alpha") && !e["alpha"].is_null();
    if (s.op == Intervention::Op::kSteer) {
      if (!has_alpha || !e["alpha"].is_number() || !std::isfinite(e["alpha"].get<double>()) ||
          std::abs(e["alpha"].get<double>()) > 1e6)
        throw ApiError::bad_request(fmt::format("'{}.alpha' (a finite number) is required for steer", at),
                                    at + ".alpha");
      s.alpha = e["alpha"].get<float>();
    } else if (has_alpha) {
      throw ApiError::bad_request(fmt::format("'{}.alpha' is not used by ablate", at), at + ".alpha");
    }
    if (e.contains("layers") && !e["layers"].is_null()) {
      const json& l = e["layers"];
      if (!l.is_array() || l.empty() || l.size() > 4096)
        throw ApiError::bad_request(fmt::format("'{}.layers' must be a non-empty list of layer numbers", at),
                                    at + ".layers");
      for (const json& x : l) {
        if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() > 100000)
          throw ApiError::bad_request(fmt::format("'{}.layers' holds {}, not a layer number", at, x.dump()),
                                      at + ".layers");
        s.layers.push_back(x.get<int32_t>());
      }
    }
    out.push_back(std::move(s));
  }
  return out;
}

std::shared_ptr<const InterventionList> resolve_interventions(const std::vector<InterventionSpec>& specs,
                                                              const DirectionRegistry* registry) {
  if (specs.empty()) return nullptr;
  if (!registry || registry->by_name.empty())
    throw ApiError::bad_request(
        "'interventions': this server has no directions (start it with --direction "
        "name=FILE)",
        "interventions");
  std::vector<Intervention> items;
  for (size_t i = 0; i < specs.size(); ++i) {
    const InterventionSpec& s = specs[i];
    const auto it = registry->by_name.find(s.direction);
    if (it == registry->by_name.end()) {
      std::string names;
      for (const auto& [name, d] : registry->by_name) names += (names.empty() ? "" : ", ") + name;
      throw ApiError::bad_request(
          fmt::format("'interventions[{}].direction': no direction '{}' (registered: {})", i, s.direction, names),
          fmt::format("interventions[{}].direction", i));
    }
    Intervention iv;
    iv.op = s.op;
    iv.alpha = s.alpha;
    iv.direction = std::make_shared<const std::vector<float>>(it->second.vector);
    iv.layers = s.layers;
    if (iv.layers.empty() && s.op == Intervention::Op::kSteer) iv.layers = {it->second.layer};
    if (iv.layers.empty())
      for (int32_t l = 0; l <= registry->n_layers; ++l) iv.layers.push_back(l);
    for (int32_t l : iv.layers)
      if (l > registry->n_layers)
        throw ApiError::bad_request(fmt::format("'interventions[{}].layers': {} is outside 0..{} (0 = after the "
                                                "embedding, {} = the model's output)",
                                                i, l, registry->n_layers, registry->n_layers),
                                    fmt::format("interventions[{}].layers", i));
    items.push_back(std::move(iv));
  }
  try {
    return make_interventions(std::move(items), registry->n_layers, registry->dim);
  } catch (const Error& e) {
    throw ApiError::bad_request(fmt::format("'interventions': {}", e.what()), "interventions");
  }
}

}  // namespace kvik::server
