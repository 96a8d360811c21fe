#include "server/chat_template.h"

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
}  // namespace

std::string render_chat(const nlohmann::json& messages, bool add_generation_prompt) {
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

}  // namespace kvik::server
