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

}  // namespace

std::string render_chat_template(const std::string& tmpl, const nlohmann::json& messages, const nlohmann::json& extra) {
  return render(tmpl, messages, extra, jinja::Limits{});
}

std::string render_chat_template(const std::string& tmpl, const nlohmann::ordered_json& messages,
                                 const nlohmann::ordered_json& extra, const jinja::Limits& limits) {
  return render(tmpl, messages, extra, limits);
}

}  // namespace kvik
