#include "server/lora_registry.h"

#include <fmt/format.h>

#include "core/error.h"

namespace kvik::server {

std::optional<ApiError> LoraRegistry::load(const std::string& name, const std::string& path) {
  if (name.empty()) return ApiError::bad_request("lora_name is empty", "lora_name");
  if (path.empty()) return ApiError::bad_request("lora_path is empty", "lora_path");
  if (name == base_name_) return ApiError::bad_request(fmt::format("'{}' is the base model's name", name), "lora_name");
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (by_name_.count(name))
      return ApiError::bad_request(fmt::format("The lora adapter '{}' has already been loaded.", name), "lora_name");
  }
  std::shared_ptr<const LoraAdapter> adapter;
  try {
    LoraLoadOptions o;
    o.name = name;
    o.max_rank = max_rank_;
    adapter = load_lora_adapter(path, base_, o);  // outside the lock: requests keep resolving names meanwhile
  } catch (const Error& e) {
    return ApiError::bad_request(fmt::format("cannot load LoRA adapter '{}': {}", name, e.what()), "lora_path");
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!by_name_.emplace(name, std::move(adapter)).second)
    return ApiError::bad_request(fmt::format("The lora adapter '{}' has already been loaded.", name), "lora_name");
  return std::nullopt;
}

std::optional<ApiError> LoraRegistry::unload(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  if (by_name_.erase(name) == 0)
    return ApiError{404, fmt::format("The lora adapter '{}' cannot be found.", name), "lora_name", "NotFoundError"};
  return std::nullopt;
}

std::shared_ptr<const LoraAdapter> LoraRegistry::find(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

std::vector<std::shared_ptr<const LoraAdapter>> LoraRegistry::list() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::shared_ptr<const LoraAdapter>> v;
  for (const auto& [name, a] : by_name_) v.push_back(a);
  return v;
}

std::pair<std::string, std::string> parse_lora_module(const std::string& spec) {
  const size_t eq = spec.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size()) fail("--lora-modules: '{}' is not name=path", spec);
  return {spec.substr(0, eq), spec.substr(eq + 1)};
}

}  // namespace kvik::server
