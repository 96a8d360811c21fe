// Chat messages → prompt text. The model's own chat template (a Jinja engine in chat/) will slot in behind
// this function; until then, and for models without a template, a plain fallback renders
// "<role>: <content>\n" per message and "assistant:" when a generation prompt is asked for.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace kvik::server {

// `messages` has been validated by the schema (objects with a string role; content string, parts or null).
std::string render_chat(const nlohmann::json& messages, bool add_generation_prompt);

}  // namespace kvik::server
