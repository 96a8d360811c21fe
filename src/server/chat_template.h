// Chat messages → prompt token ids. A model with a chat template (tokenizer_config.json chat_template or GGUF
// tokenizer.chat_template) is rendered by the Jinja engine in chat/, with bos_token / eos_token /
// add_generation_prompt set as transformers sets them; special-token texts in the rendering become their ids
// and BOS is not added a second time. Models without a template get a plain fallback:
// "<role>: <content>\n" per message and "assistant:" when a generation prompt is asked for.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace kvik::server {

// `messages` has been validated by the schema (objects with a string role; content string, parts or null).
// Throws kvik::Error when the model's template fails (the message carries line and column).
std::string render_chat(const Tokenizer& tok, const nlohmann::json& messages, bool add_generation_prompt);
std::vector<int32_t> chat_prompt_ids(const Tokenizer& tok, const nlohmann::json& messages, bool add_generation_prompt);

}  // namespace kvik::server
