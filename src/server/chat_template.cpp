#include "server/chat_template.h"

#include "chat/chat_template.h"

namespace kvik::server {

namespace {
std::string content_text(const nlohmann::json& m) {
  auto it = m.find("content");
  if (it == m.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  std::string text;
  for (const auto& part : *it)
    if (part.value("type", "") == "text") text += part.value("text", "");
  return text;
}

std::string fallback(const nlohmann::json& messages, bool add_generation_prompt) {
  std::string out;
  for (const auto& m : messages) {
    out += m.value("role", "user");
    out += ": ";
    out += content_text(m);
    out += "\n";
  }
  if (add_generation_prompt) out += "assistant:";
  return out;
}
}  // namespace

std::string render_chat(const Tokenizer& tok, const nlohmann::json& messages, bool add_generation_prompt) {
  if (tok.chat_template().empty()) return fallback(messages, add_generation_prompt);
  nlohmann::json extra = {{"add_generation_prompt", add_generation_prompt}};
  if (tok.bos_id() >= 0) extra["bos_token"] = tok.token_text(tok.bos_id());
  if (tok.eos_id() >= 0) extra["eos_token"] = tok.token_text(tok.eos_id());
  return render_chat_template(tok.chat_template(), messages, extra);
}

std::vector<int32_t> chat_prompt_ids(const Tokenizer& tok, const nlohmann::json& messages, bool add_generation_prompt) {
  const std::string text = render_chat(tok, messages, add_generation_prompt);
  if (tok.chat_template().empty()) return tok.encode(text, tok.add_bos(), false);
  return tok.encode(text, false, true);  // the template writes BOS and the role markers itself
}

}  // namespace kvik::server
