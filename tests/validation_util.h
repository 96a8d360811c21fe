// Tests read a validation result as its message ("" when the request was accepted).
#pragma once

#include <optional>
#include <string>

#include "engine/sampling_params.h"

namespace kvik {
inline std::string msg(const std::optional<ValidationError>& e) { return e ? e->message : std::string(); }
inline std::string param(const std::optional<ValidationError>& e) { return e ? e->param : std::string("<none>"); }
}  // namespace kvik
