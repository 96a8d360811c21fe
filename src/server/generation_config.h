// Default sampling parameters from a model's generation_config.json, applied as vLLM's
// `--generation-config auto` applies them: temperature, top_p, top_k, min_p and repetition_penalty fill the
// request fields a client leaves out, and max_new_tokens becomes the default max_tokens.
#pragma once

#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>

namespace kvik::server {

// `setting`: "auto" (generation_config.json in the model's folder, or beside the model file when the
// model is a Hugging Face directory), "vllm" (none: the server's own defaults), or a folder or a file path.
// Returns request fields ({} when there is no file under "auto"). Throws kvik::Error for a file that is
// missing (when named) or not valid JSON, naming the file.
nlohmann::json load_generation_defaults(const std::string& setting, const std::string& model_path);

// Fills the fields a request body leaves out with `defaults`. `length_fields` are the body's spellings of the length
// (max_tokens first, e.g. {"max_tokens", "max_completion_tokens"}): the default max_tokens is written under the
// first and skipped when the body gives any of them.
void apply_generation_defaults(nlohmann::ordered_json& body, const nlohmann::json& defaults,
                               std::initializer_list<const char*> length_fields);

// "temperature=0.6 top_p=0.9" for the log; "" when empty.
std::string describe_defaults(const nlohmann::json& defaults);

}  // namespace kvik::server
