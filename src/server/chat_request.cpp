#include "server/chat_request.h"

#include <fmt/format.h>

#include "server/api_error.h"

namespace kvik::server {

using nlohmann::ordered_json;

namespace {

// What a media part is, for the 400 that says the model cannot take it; nullptr for a type that is not media.
const char* media_kind(const std::string& type) {
  if (type == "image_url" || type == "input_image" || type == "image") return "image";
  if (type == "input_audio" || type == "audio_url" || type == "audio") return "audio";
  if (type == "video_url" || type == "video") return "video";
  if (type == "file" || type == "input_file") return "file";
  return nullptr;
}

std::string string_field(const ordered_json& object, const char* key, const std::string& where) {
  auto it = object.find(key);
  if (it == object.end() || !it->is_string())
    throw ApiError::bad_request(fmt::format("{}.{} must be a string", where, key), where + "." + key);
  return it->get<std::string>();
}

// An assistant turn's tool_calls: [{"id"?, "type": "function", "function": {"name": str, "arguments": str|object}}].
std::vector<ChatToolCall> parse_tool_calls(const ordered_json& v, const std::string& where) {
  if (!v.is_array()) throw ApiError::bad_request(where + " must be a list", where);
  std::vector<ChatToolCall> calls;
  for (size_t i = 0; i < v.size(); ++i) {
    const ordered_json& c = v[i];
    const std::string at = fmt::format("{}[{}]", where, i);
    if (!c.is_object() || !c.contains("function") || !c["function"].is_object())
      throw ApiError::bad_request(at + " must be an object with a 'function'", at);
    const ordered_json& f = c["function"];
    ChatToolCall call;
    call.name = string_field(f, "name", at + ".function");
    if (auto a = f.find("arguments"); a != f.end() && !a->is_null()) {
      if (!a->is_string() && !a->is_object())
        throw ApiError::bad_request(at + ".function.arguments must be a JSON string", at + ".function.arguments");
      call.arguments = template_arguments(*a);
    }
    if (auto id = c.find("id"); id != c.end() && !id->is_null()) {
      if (!id->is_string()) throw ApiError::bad_request(at + ".id must be a string", at + ".id");
      call.id = id->get<std::string>();
    }
    calls.push_back(std::move(call));
  }
  return calls;
}

ChatMessage parse_message(const ordered_json& m, const std::string& where) {
  if (!m.is_object()) throw ApiError::bad_request(where + " must be an object", where);
  ChatMessage out;
  out.role = string_field(m, "role", where);
  out.fields = m;
  if (auto c = m.find("content"); c != m.end() && !c->is_null()) {
    if (c->is_string())
      out.content.parts.push_back(c->get<std::string>());
    else if (c->is_array())
      out.content.parts = parse_text_parts(*c, where + ".content");
    else
      throw ApiError::bad_request(where + ".content must be a string or a list of parts", where + ".content");
    out.content.null = false;
  }
  if (auto tc = m.find("tool_calls"); tc != m.end() && !tc->is_null())
    out.tool_calls = parse_tool_calls(*tc, where + ".tool_calls");
  if (auto id = m.find("tool_call_id"); id != m.end() && !id->is_null()) {
    if (!id->is_string())
      throw ApiError::bad_request(where + ".tool_call_id must be a string", where + ".tool_call_id");
    out.tool_call_id = id->get<std::string>();
  }
  for (const char* key : {"reasoning_content", "reasoning"}) {
    auto r = m.find(key);
    if (r == m.end() || r->is_null()) continue;
    if (!r->is_string())
      throw ApiError::bad_request(fmt::format("{}.{} must be a string", where, key), where + "." + key);
    if (!out.reasoning) out.reasoning = r->get<std::string>();
  }
  return out;
}

std::string joined(const std::vector<std::string>& parts) {
  std::string s;
  for (size_t i = 0; i < parts.size(); ++i) s += (i ? "\n" : "") + parts[i];
  return s;
}

ordered_json template_message(const ChatMessage& m, const ChatTemplateStyle& style) {
  ordered_json out = m.fields.is_object() ? m.fields : ordered_json::object();
  out["role"] = m.role == "developer" && !style.developer_role ? "system" : m.role;
  if (m.role == "tool" || style.content_format == ContentFormat::kString) {
    out["content"] = joined(m.content.parts);  // null content is "": templates concatenate it
  } else {
    ordered_json parts = ordered_json::array();
    for (const std::string& p : m.content.parts) parts.push_back({{"type", "text"}, {"text", p}});
    out["content"] = std::move(parts);
  }
  if (m.tool_calls.empty()) {
    out.erase("tool_calls");  // an empty list keeps templates on the plain assistant path (as vLLM drops it)
  } else {
    ordered_json calls = ordered_json::array();
    for (const ChatToolCall& c : m.tool_calls) {
      ordered_json call = ordered_json::object();
      if (!c.id.empty()) call["id"] = c.id;
      call["type"] = "function";
      call["function"] = {{"name", c.name}, {"arguments", c.arguments}};
      calls.push_back(std::move(call));
    }
    out["tool_calls"] = std::move(calls);
  }
  if (!m.tool_call_id.empty()) out["tool_call_id"] = m.tool_call_id;
  if (m.reasoning) {  // both spellings, as vLLM passes them: Qwen3 reads reasoning_content
    out["reasoning"] = *m.reasoning;
    out["reasoning_content"] = *m.reasoning;
  }
  return out;
}

}  // namespace

ChatTemplateStyle ChatTemplateStyle::of(const std::string& chat_template, std::optional<ContentFormat> forced) {
  ChatTemplateStyle s;
  s.content_format = forced ? *forced : detect_content_format(chat_template);
  s.developer_role = chat_template.find("developer") != std::string::npos;
  s.enable_thinking = chat_template.find("enable_thinking") != std::string::npos;
  return s;
}

std::vector<std::string> parse_text_parts(const ordered_json& parts, const std::string& field) {
  std::vector<std::string> texts;
  for (size_t i = 0; i < parts.size(); ++i) {
    const ordered_json& part = parts[i];
    const std::string at = fmt::format("{}[{}]", field, i);
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
      throw ApiError::bad_request(at + " must be an object with a string 'type'", at);
    const std::string type = part["type"].get<std::string>();
    if (type == "text" || type == "input_text" || type == "output_text") {
      texts.push_back(string_field(part, "text", at));
    } else if (type == "refusal") {
      texts.push_back(string_field(part, "refusal", at));
    } else if (const char* kind = media_kind(type)) {
      throw ApiError::bad_request(
          fmt::format("{} is a part of type '{}': this model takes text only and has no {} input", at, type, kind), at);
    } else {
      throw ApiError::bad_request(
          fmt::format("{}: unknown content part type '{}' (text parts are 'text', 'input_text', 'output_text' and "
                      "'refusal')",
                      at, type),
          at + ".type");
    }
  }
  return texts;
}

std::vector<ChatMessage> parse_chat_messages(const ordered_json& messages) {
  if (!messages.is_array() || messages.empty())
    throw ApiError::bad_request("'messages' must be a non-empty list", "messages");
  std::vector<ChatMessage> out;
  out.reserve(messages.size());
  for (size_t i = 0; i < messages.size(); ++i)
    out.push_back(parse_message(messages[i], fmt::format("messages[{}]", i)));
  return out;
}

ordered_json template_arguments(const ordered_json& arguments) {
  if (!arguments.is_string()) return arguments;
  ordered_json parsed = ordered_json::parse(arguments.get<std::string>(), nullptr, /*allow_exceptions=*/false);
  return parsed.is_object() ? parsed : arguments;
}

ordered_json template_messages(const ChatRequest& r, const ChatTemplateStyle& style) {
  ordered_json out = ordered_json::array();
  for (const ChatMessage& m : r.messages) out.push_back(template_message(m, style));
  return out;
}

ordered_json template_variables(const ChatRequest& r, const ChatTemplateStyle& style) {
  ordered_json vars = ordered_json::object();
  if (!r.reasoning_effort.empty()) {  // chat_template_kwargs below may still set either variable itself
    vars["reasoning_effort"] = r.reasoning_effort;
    if (style.enable_thinking)
      vars["enable_thinking"] = r.reasoning_effort != "none" && r.reasoning_effort != "minimal";
  }
  for (auto it = r.template_kwargs.begin(); it != r.template_kwargs.end(); ++it)
    if (it.key() != "messages") vars[it.key()] = it.value();
  if (r.tools.is_array() && !r.tools.empty()) vars["tools"] = r.tools;
  return vars;
}

}  // namespace kvik::server
