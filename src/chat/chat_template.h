// Chat templates: turning a list of messages into the exact prompt text a chat model was trained on, with
// the Jinja template from the model's tokenizer_config.json (or GGUF tokenizer.chat_template).
//
// render_chat() is the one place messages become a prompt: the server, `kvik chat` and `kvik render-chat` all
// call it, and it alone sets bos_token / eos_token / add_generation_prompt as transformers sets them.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "chat/jinja_template.h"

namespace kvik {

// What a model supplies for rendering: its template and the texts of its BOS and EOS tokens.
struct ChatFormat {
  std::string jinja;      // the chat template; empty: the plain fallback below
  std::string bos_token;  // empty when the vocabulary has no BOS (then bos_token is undefined in the template)
  std::string eos_token;  // likewise
};

// A rendered conversation and how it is tokenized.
struct ChatPrompt {
  std::string text;
  // True when the model's template wrote the text: it holds BOS and the role markers as text, so it is
  // encoded without adding BOS and with special-token texts parsed into their ids. False for the fallback
  // ("<role>: <content>\n" per message, "assistant:" for the generation prompt): encoded as plain text with
  // the tokenizer's own add_bos.
  bool from_template = false;
};

// Renders `messages` (a JSON array of {"role", "content", ...}; content a string, text parts or null) in the
// model's format. `extra` (an object or null) holds further template variables (tools, enable_thinking, ...);
// bos_token, eos_token and add_generation_prompt are set here and override same-named keys of `extra`.
// Throws jinja::TemplateError (line, column) on a template error or its raise_exception(), kvik::Error on bad
// input. The ordered_json overload keeps the caller's key order, which `tojson` of tools shows.
ChatPrompt render_chat(const ChatFormat& format, const nlohmann::json& messages, bool add_generation_prompt,
                       const nlohmann::json& extra = nullptr);
ChatPrompt render_chat(const ChatFormat& format, const nlohmann::ordered_json& messages, bool add_generation_prompt,
                       const nlohmann::ordered_json& extra = nullptr);

// The template engine under render_chat(): renders `tmpl` with `messages` and the top-level variables in
// `extra` exactly as given (absent ones stay undefined). Throws jinja::TemplateError with line and column.
std::string render_chat_template(const std::string& tmpl, const nlohmann::json& messages, const nlohmann::json& extra);
std::string render_chat_template(const std::string& tmpl, const nlohmann::ordered_json& messages,
                                 const nlohmann::ordered_json& extra, const jinja::Limits& limits = {});

}  // namespace kvik
