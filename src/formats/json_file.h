// Reading a JSON file (config.json, tokenizer.json, tokenizer_config.json, ...) with errors that name it.
#pragma once

#include <filesystem>

#include <nlohmann/json.hpp>

namespace kvik {

// Parses the file; throws kvik::Error "<path>: cannot open" or "<path>: invalid JSON: ...".
nlohmann::json read_json_file(const std::filesystem::path& path);

}  // namespace kvik
