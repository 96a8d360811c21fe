// The LoRA adapters a server serves by name (vLLM's --lora-modules and its /v1/load_lora_adapter,
// /v1/unload_lora_adapter): a request's "model" picks one. Loading checks the adapter against the base model
// (model/lora.h); a bad file is a 400 naming what is wrong and the server goes on. Unloading only forgets the
// name: requests already running hold the adapter (shared_ptr) and finish under it.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "model/lora.h"
#include "model/model_config.h"
#include "server/api_error.h"

namespace kvik::server {

class LoraRegistry {
 public:
  // base: the served model's config; max_rank: --max-lora-rank; base_name: the served model's name (no adapter may
  // take it).
  LoraRegistry(const ModelConfig& base, int64_t max_rank, std::string base_name)
      : base_(base), max_rank_(max_rank), base_name_(std::move(base_name)) {}

  // 400 when the name is taken or empty, or the adapter does not load (the loader's message).
  std::optional<ApiError> load(const std::string& name, const std::string& path);
  // 404 when no adapter has that name.
  std::optional<ApiError> unload(const std::string& name);
  std::shared_ptr<const LoraAdapter> find(const std::string& name) const;
  std::vector<std::shared_ptr<const LoraAdapter>> list() const;  // by name

 private:
  ModelConfig base_;
  int64_t max_rank_;
  std::string base_name_;
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<const LoraAdapter>> by_name_;
};

// "name=path" (--lora-modules); throws kvik::Error naming the flag on a bad entry.
std::pair<std::string, std::string> parse_lora_module(const std::string& spec);

}  // namespace kvik::server
