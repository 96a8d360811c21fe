// Chat messages → prompt token ids for a model: its tokenizer supplies the chat format (template, BOS and EOS
// texts) and encodes what chat/render_chat() makes of the messages. The server and `kvik chat` share it.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "chat/chat_template.h"
#include "server/chat_request.h"
#include "tokenizer/tokenizer.h"

namespace kvik::server {

// The model's chat format: tokenizer_config.json chat_template or GGUF tokenizer.chat_template, and the texts of
// the vocabulary's BOS and EOS tokens.
ChatFormat chat_format(const Tokenizer& tok);

// Token ids of a rendered prompt: a template's text with special-token texts as their ids and no BOS added
// (the template writes it), the fallback's as plain text with the tokenizer's add_bos.
std::vector<int32_t> encode_chat_prompt(const Tokenizer& tok, const ChatPrompt& prompt);

// render_chat() in the model's format, then encode_chat_prompt(). `messages` has been validated by the schema
// (objects with a string role; content string, parts or null). Throws kvik::Error when the model's template
// fails (the message carries line and column).
std::vector<int32_t> chat_prompt_ids(const Tokenizer& tok, const nlohmann::json& messages, bool add_generation_prompt);
// A typed chat request's prompt: its messages as `style` says the template takes them, and its further template
// variables (tools, chat_template_kwargs, reasoning effort), in the client's key order, with the generation prompt.
std::vector<int32_t> chat_prompt_ids(const Tokenizer& tok, const ChatRequest& request, const ChatTemplateStyle& style);

}  // namespace kvik::server
