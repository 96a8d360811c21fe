// Chat templates: turning a list of messages into the exact prompt text a chat model was trained on, with
// the Jinja template from the model's tokenizer_config.json (or GGUF tokenizer.chat_template).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "chat/jinja_template.h"

namespace kvik {

// Renders `tmpl` with `messages` (a JSON array of {"role", "content", ...}) and the top-level variables in
// `extra` (bos_token, eos_token, tools, add_generation_prompt, enable_thinking, ...; absent ones stay
// undefined in the template). Throws jinja::TemplateError with line and column on a template error or a
// raise_exception() from the template. The ordered_json overload keeps the caller's key order, which
// `tojson` of tools and arguments shows; nlohmann::json sorts keys.
std::string render_chat_template(const std::string& tmpl, const nlohmann::json& messages,
                                 const nlohmann::json& extra);
std::string render_chat_template(const std::string& tmpl, const nlohmann::ordered_json& messages,
                                 const nlohmann::ordered_json& extra, const jinja::Limits& limits = {});

}  // namespace kvik
