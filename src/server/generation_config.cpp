#include "server/generation_config.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace kvik::server {

namespace fs = std::filesystem;

nlohmann::json load_generation_defaults(const std::string& setting, const std::string& model_path) {
  nlohmann::json defaults = nlohmann::json::object();
  if (setting == "vllm") return defaults;
  fs::path file;
  std::error_code ec;
  if (setting == "auto") {
    if (!fs::is_directory(model_path, ec)) return defaults;  // GGUF files carry no generation config
    file = fs::path(model_path) / "generation_config.json";
    if (!fs::exists(file, ec)) return defaults;
  } else {
    file = fs::is_directory(setting, ec) ? fs::path(setting) / "generation_config.json" : fs::path(setting);
    if (!fs::exists(file, ec)) fail("--generation-config: {} does not exist", file.string());
  }
  std::ifstream in(file);
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json cfg = nlohmann::json::parse(text.str(), nullptr, false);
  if (cfg.is_discarded() || !cfg.is_object()) fail("{}: not a JSON object", file.string());
  for (const char* key : {"temperature", "top_p", "top_k", "min_p", "repetition_penalty"})
    if (cfg.contains(key) && cfg[key].is_number()) defaults[key] = cfg[key];
  if (cfg.contains("max_new_tokens") && cfg["max_new_tokens"].is_number_integer())
    defaults["max_tokens"] = cfg["max_new_tokens"];
  return defaults;
}

std::string describe_defaults(const nlohmann::json& defaults) {
  std::string s;
  for (const auto& [key, value] : defaults.items()) s += (s.empty() ? "" : " ") + key + "=" + value.dump();
  return s;
}

void apply_generation_defaults(nlohmann::ordered_json& body, const nlohmann::json& defaults,
                               std::initializer_list<const char*> length_fields) {
  for (const auto& [key, value] : defaults.items()) {
    if (key == "max_tokens") {
      bool given = false;
      for (const char* f : length_fields) given |= body.contains(f);
      if (!given && length_fields.size() > 0) body[*length_fields.begin()] = nlohmann::ordered_json(value);
      continue;
    }
    if (!body.contains(key)) body[key] = nlohmann::ordered_json(value);
  }
}

}  // namespace kvik::server
