// The one chat request every API translates into: /v1/chat/completions bodies, /v1/responses inputs (and the
// Anthropic Messages API's, built on the same types), parsed once into messages whose content is a list of text
// parts, chat-shaped tools, tool_choice and reasoning effort. The sampling fields and response format beside it
// live in GenerateRequest (openai_schema.h). What reaches the chat template keeps the client's key order
// (ordered_json): a template's `tojson` of the tools or of a call's arguments shows it.
//
// Rendering follows vLLM (vllm/entrypoints/chat_utils.py): each message's text parts become one string joined by
// "\n" for a template that treats content as a string, or a list of {"type": "text", "text"} parts for one that
// loops over it (--chat-template-content-format, chat/content_format.h); a tool message's parts are always joined;
// a call's arguments given as JSON text reach the template as an object.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "chat/content_format.h"

namespace kvik::server {

// tool_choice: what the model may or must do with `tools`.
enum class ToolChoice { kNone, kAuto, kRequired, kNamed };

// A message's content: its text parts in order (a string is one part). Null or absent content has no parts.
struct ChatContent {
  std::vector<std::string> parts;
  bool null = true;
};

struct ChatToolCall {
  std::string id;  // "" when the client gave none
  std::string name;
  // As the template sees it: the arguments as a JSON object when given as an object or as JSON text of one,
  // otherwise the text as given.
  nlohmann::ordered_json arguments = nlohmann::ordered_json::object();
};

struct ChatMessage {
  std::string role;
  ChatContent content;
  std::vector<ChatToolCall> tool_calls;
  std::string tool_call_id;
  std::optional<std::string> reasoning;  // an assistant turn's thinking (reasoning_content / reasoning items)
  // The message object as the client sent it (chat API): keys this type does not model (e.g. "name") reach the
  // template as given, in the client's order. Empty for messages translated from another API.
  nlohmann::ordered_json fields = nlohmann::ordered_json::object();
};

struct ChatRequest {
  std::vector<ChatMessage> messages;
  // Chat-shaped function tools, [{"type": "function", "function": {"name", "description", "parameters"}}], in the
  // client's key order; null when the request has none. Validated: unique names, schemas the grammar compiles.
  nlohmann::ordered_json tools;
  ToolChoice tool_choice = ToolChoice::kNone;  // default: auto with tools, none without
  std::string tool_choice_name;                // kNamed: the function
  bool parallel_tool_calls = true;
  std::string reasoning_effort;  // "" unset; none, minimal, low, medium, high
  nlohmann::ordered_json template_kwargs = nlohmann::ordered_json::object();  // chat_template_kwargs
};

// What a model's chat template expects of the messages, settled once per template.
struct ChatTemplateStyle {
  ContentFormat content_format = ContentFormat::kString;
  bool developer_role = false;   // the template names the "developer" role; otherwise such messages go in as "system"
  bool enable_thinking = false;  // the template reads enable_thinking (Qwen3): reasoning effort switches it
  // `forced`: --chat-template-content-format string|openai; nullopt = auto (detected from the template).
  static ChatTemplateStyle of(const std::string& chat_template, std::optional<ContentFormat> forced = std::nullopt);
};

// Chat API `messages` (a non-empty list) → typed messages. Throws ApiError naming the field
// (`messages[2].content[0]`); an image, audio or file part is a 400 saying the model takes text only.
std::vector<ChatMessage> parse_chat_messages(const nlohmann::ordered_json& messages);

// The text of a list of content parts (`field` names the list in errors). Text parts are "text", "input_text" and
// "output_text" (their "text"), and "refusal" (its "refusal"). Throws ApiError for any other part.
std::vector<std::string> parse_text_parts(const nlohmann::ordered_json& parts, const std::string& field);

// Arguments as the template takes them: an object stays, JSON text of an object is parsed, anything else is kept.
nlohmann::ordered_json template_arguments(const nlohmann::ordered_json& arguments);

// The template's `messages` and its further variables (tools, chat_template_kwargs, reasoning_effort).
nlohmann::ordered_json template_messages(const ChatRequest& r, const ChatTemplateStyle& style);
nlohmann::ordered_json template_variables(const ChatRequest& r, const ChatTemplateStyle& style);

}  // namespace kvik::server
