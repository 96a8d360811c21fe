// kvik's extension field "interventions" on /v1/completions and /v1/chat/completions:
//   "interventions": [{"direction": "name", "op": "steer" | "ablate", "alpha": 4.0, "layers": [8, 9, 10]}]
// Directions are registered at start-up (`kvik serve --direction name=FILE`). A steer without "layers" applies
// at the direction's own layer, an ablation at every layer; "alpha" is required for steer and not allowed for
// ablate.
#pragma once

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/intervention.h"
#include "server/api_error.h"

namespace kvik::server {

struct InterventionSpec {
  std::string direction;
  Intervention::Op op = Intervention::Op::kSteer;
  float alpha = 0;
  std::vector<int32_t> layers;  // empty = the op's default
};

// The field's shape and types (throws ApiError naming e.g. "interventions[1].alpha").
std::vector<InterventionSpec> parse_interventions(const nlohmann::json& v);

// The directions the server knows, by name, and the model's shape they are checked against.
struct DirectionRegistry {
  std::map<std::string, Direction> by_name;
  int64_t n_layers = 0, dim = 0;
};

// Resolves names and layers into the engine's list; nullptr for an empty list. Throws ApiError (400) naming
// the field at fault (an unknown direction lists the registered names).
std::shared_ptr<const InterventionList> resolve_interventions(const std::vector<InterventionSpec>& specs,
                                                              const DirectionRegistry* registry);

}  // namespace kvik::server
