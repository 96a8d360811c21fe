#include "server/chat_prompt.h"

namespace kvik::server {

ChatFormat chat_format(const Tokenizer& tok) { return {tok.chat_template(), tok.bos_token(), tok.eos_token()}; }

std::vector<int32_t> encode_chat_prompt(const Tokenizer& tok, const ChatPrompt& prompt) {
  if (prompt.from_template) return tok.encode(prompt.text, false, true);
  return tok.encode(prompt.text, tok.add_bos(), false);
}

std::vector<int32_t> chat_prompt_ids(const Tokenizer& tok, const nlohmann::json& messages, bool add_generation_prompt) {
  return encode_chat_prompt(tok, render_chat(chat_format(tok), messages, add_generation_prompt));
}

std::vector<int32_t> chat_prompt_ids(const Tokenizer& tok, const ChatRequest& request, const ChatTemplateStyle& style) {
  return encode_chat_prompt(
      tok, render_chat(chat_format(tok), template_messages(request, style), true, template_variables(request, style)));
}

}  // namespace kvik::server
