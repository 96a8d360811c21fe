#include "chat/chat_template.h"

#include "core/error.h"

namespace kvik {

namespace {

// Straight from either JSON flavour into template values: no dump() and parse() round trip, whose recursion a
// deeply nested request could overflow (from_json refuses more than jinja::kMaxValueDepth levels instead).
template <typename Json>
std::string render(const std::string& tmpl, const Json& messages, const Json& extra, const jinja::Limits& limits) {
  if (!messages.is_array()) fail("chat template: messages must be a JSON array, got {}", messages.type_name());
  if (!extra.is_null() && !extra.is_object()) fail("chat template: extra variables must be a JSON object");
  jinja::Value context = jinja::Value::object();
  context.set("messages", jinja::from_json(messages));
  if (extra.is_object())
    for (auto it = extra.begin(); it != extra.end(); ++it) context.set(it.key(), jinja::from_json(it.value()));
  const jinja::Template t(tmpl, limits);
  return t.render(context);
}

template <typename Json>
std::string content_text(const Json& m) {
  auto it = m.find("content");
  if (it == m.end() || it->is_null()) return "";
  if (it->is_string()) return it->template get<std::string>();
  std::string text;
  if (it->is_array())
    for (const auto& part : *it)
      if (part.is_object() && part.value("type", "") == "text") text += part.value("text", "");
  return text;
}

template <typename Json>
std::string fallback(const Json& messages, bool add_generation_prompt) {
  if (!messages.is_array()) fail("chat: messages must be a JSON array, got {}", messages.type_name());
  std::string out;
  for (const auto& m : messages) {
    if (!m.is_object()) fail("chat: each message must be a JSON object, got {}", m.type_name());
    out += m.value("role", "user");
    out += ": ";
    out += content_text(m);
    out += "\n";
  }
  if (add_generation_prompt) out += "assistant:";
  return out;
}

template <typename Json>
ChatPrompt render_in(const ChatFormat& format, const Json& messages, bool add_generation_prompt, const Json& extra) {
  if (format.jinja.empty()) return {fallback(messages, add_generation_prompt), false};
  if (!extra.is_null() && !extra.is_object()) fail("chat template: extra variables must be a JSON object");
  Json vars = extra.is_object() ? extra : Json::object();
  vars["add_generation_prompt"] = add_generation_prompt;
  if (!format.bos_token.empty())
    vars["bos_token"] = format.bos_token;
  else
    vars.erase("bos_token");
  if (!format.eos_token.empty())
    vars["eos_token"] = format.eos_token;
  else
    vars.erase("eos_token");
  return {render(format.jinja, messages, vars, jinja::Limits{}), true};
}

}  // namespace

ChatPrompt render_chat(const ChatFormat& format, const nlohmann::json& messages, bool add_generation_prompt,
                       const nlohmann::json& extra) {
  return render_in(format, messages, add_generation_prompt, extra);
}

ChatPrompt render_chat(const ChatFormat& format, const nlohmann::ordered_json& messages, bool add_generation_prompt,
                       const nlohmann::ordered_json& extra) {
  return render_in(format, messages, add_generation_prompt, extra);
}

std::string render_chat_template(const std::string& tmpl, const nlohmann::json& messages, const nlohmann::json& extra) {
  return render(tmpl, messages, extra, jinja::Limits{});
}

std::string render_chat_template(const std::string& tmpl, const nlohmann::ordered_json& messages,
                                 const nlohmann::ordered_json& extra, const jinja::Limits& limits) {
  return render(tmpl, messages, extra, limits);
}

}  // namespace kvik
