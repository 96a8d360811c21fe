// How a chat template expects a message's `content`: as one string, or as OpenAI's list of parts
// ([{"type": "text", "text": ...}]). vLLM's --chat-template-content-format auto|string|openai: `auto` reads the
// template's syntax tree (vllm/entrypoints/chat_utils.py, _detect_content_format) and chooses "openai" when the
// template loops over a message's content (`{% for part in message['content'] %}`), "string" otherwise.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace kvik {

enum class ContentFormat { kString, kOpenAI };

// The format a template expects. A template that does not parse is "string" (vLLM's default); an empty template
// (the plain `role: content` fallback) is "string" too.
ContentFormat detect_content_format(const std::string& chat_template);

// "string" / "openai" ↔ the enum; nullopt for any other name ("auto" is resolved by the caller).
std::optional<ContentFormat> content_format_from_name(std::string_view name);
const char* content_format_name(ContentFormat f);

}  // namespace kvik
