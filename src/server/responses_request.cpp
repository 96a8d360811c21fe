#include "server/responses_request.h"

#include <fmt/format.h>

namespace kvik::server {

using nlohmann::ordered_json;

namespace {

const ordered_json* field_of(const ordered_json& body, const char* key) {
  auto it = body.find(key);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

std::string string_of(const ordered_json& v, const std::string& field) {
  if (!v.is_string()) throw ApiError::bad_request(fmt::format("'{}' must be a string", field), field);
  return v.get<std::string>();
}

// The assistant turn that the next assistant-side item joins: the last message when it is the assistant's and
// `free` says the item's slot in it is still empty.
ChatMessage* open_assistant(std::vector<ChatMessage>& out, bool (*free)(const ChatMessage&)) {
  if (!out.empty() && out.back().role == "assistant" && free(out.back())) return &out.back();
  ChatMessage m;
  m.role = "assistant";
  out.push_back(std::move(m));
  return &out.back();
}

// A message item: {"type": "message"?, "role", "content": string | parts}.
void message_item(const ordered_json& item, const std::string& at, std::vector<ChatMessage>& out) {
  const std::string role = string_of(item.value("role", ordered_json()), at + ".role");
  if (role != "user" && role != "system" && role != "developer" && role != "assistant")
    throw ApiError::bad_request(fmt::format("{}.role '{}' is not one of user, system, developer, assistant", at, role),
                                at + ".role");
  ChatContent content;
  if (const ordered_json* c = field_of(item, "content")) {
    if (c->is_string())
      content.parts.push_back(c->get<std::string>());
    else if (c->is_array())
      content.parts = parse_text_parts(*c, at + ".content");
    else
      throw ApiError::bad_request(at + ".content must be a string or a list of parts", at + ".content");
    content.null = false;
  }
  if (role == "assistant") {  // joins a turn that so far holds only reasoning or calls (vLLM's merge)
    ChatMessage* m = open_assistant(out, [](const ChatMessage& m) { return m.content.null; });
    m->content = std::move(content);
    return;
  }
  ChatMessage m;
  m.role = role;
  m.content = std::move(content);
  out.push_back(std::move(m));
}

void function_call_item(const ordered_json& item, const std::string& at, std::vector<ChatMessage>& out) {
  ChatToolCall call;
  call.id = string_of(item.value("call_id", ordered_json()), at + ".call_id");
  call.name = string_of(item.value("name", ordered_json()), at + ".name");
  call.arguments =
      template_arguments(ordered_json(string_of(item.value("arguments", ordered_json()), at + ".arguments")));
  open_assistant(out, [](const ChatMessage&) { return true; })->tool_calls.push_back(std::move(call));
}

void function_call_output_item(const ordered_json& item, const std::string& at, std::vector<ChatMessage>& out) {
  ChatMessage m;
  m.role = "tool";
  m.tool_call_id = string_of(item.value("call_id", ordered_json()), at + ".call_id");
  const ordered_json* output = field_of(item, "output");
  if (output && output->is_array())
    m.content.parts = parse_text_parts(*output, at + ".output");
  else
    m.content.parts.push_back(string_of(output ? *output : ordered_json(), at + ".output"));
  m.content.null = false;
  out.push_back(std::move(m));
}

// {"type": "reasoning", "content": [{"type": "reasoning_text", "text"}], "summary": [{"type": "summary_text", ...}]}:
// the thinking of the assistant turn it opens or joins (its text, else its summary's, as vLLM reads it).
void reasoning_item(const ordered_json& item, const std::string& at, std::vector<ChatMessage>& out) {
  if (field_of(item, "encrypted_content"))
    throw ApiError::bad_request(at + ".encrypted_content: encrypted reasoning is not supported by this server",
                                at + ".encrypted_content");
  std::string text;
  for (const char* key : {"content", "summary"}) {
    const ordered_json* parts = field_of(item, key);
    if (!parts) continue;
    if (!parts->is_array()) throw ApiError::bad_request(fmt::format("{}.{} must be a list", at, key), at + "." + key);
    for (size_t i = 0; i < parts->size(); ++i)
      text += string_of((*parts)[i].value("text", ordered_json()), fmt::format("{}.{}[{}].text", at, key, i));
    if (!text.empty()) break;
  }
  open_assistant(out, [](const ChatMessage& m) {
    return !m.reasoning && m.content.null && m.tool_calls.empty();
  })->reasoning = std::move(text);
}

// Flat function tools → the chat shape the template and the grammar take; any other tool type is a 400.
ordered_json chat_tools(const ordered_json& tools) {
  if (!tools.is_array()) throw ApiError::bad_request("'tools' must be a list of tool definitions", "tools");
  ordered_json out = ordered_json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const ordered_json& t = tools[i];
    const std::string at = fmt::format("tools[{}]", i);
    if (!t.is_object() || !t.contains("type") || !t["type"].is_string())
      throw ApiError::bad_request(at + " must be an object with a string 'type'", at);
    const std::string type = t["type"].get<std::string>();
    if (type != "function")
      throw ApiError::bad_request(fmt::format("{}.type '{}' is not supported: this server runs function tools only "
                                              "(the model calls them, the client runs them)",
                                              at, type),
                                  at + ".type");
    ordered_json function = ordered_json::object();
    for (const char* key : {"name", "description", "parameters", "strict"})
      if (auto it = t.find(key); it != t.end() && !it->is_null()) function[key] = *it;
    out.push_back({{"type", "function"}, {"function", std::move(function)}});
  }
  return out;
}

// tool_choice "none" | "auto" | "required" | {"type": "function", "name"} → the chat API's spelling.
ordered_json chat_tool_choice(const ordered_json& tc) {
  if (tc.is_string()) return tc;
  if (tc.is_object() && tc.value("type", "") == "function" && tc.contains("name") && tc["name"].is_string())
    return {{"type", "function"}, {"function", {{"name", tc["name"]}}}};
  const std::string type = tc.is_object() ? tc.value("type", "") : "";
  throw ApiError::bad_request(
      type.empty() || type == "function"
          ? "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"name\": ...}"
          : fmt::format("'tool_choice' of type '{}' is not supported: this server runs function tools only", type),
      "tool_choice");
}

// text.format: {"type": "text"} | {"type": "json_object"} | {"type": "json_schema", "name", "schema", "strict"?}.
void parse_text_format(const ordered_json* text, GenerateRequest& r, ordered_json& echo) {
  ordered_json format = {{"type", "text"}};
  if (text) {
    if (!text->is_object()) throw ApiError::bad_request("'text' must be an object", "text");
    if (const ordered_json* f = field_of(*text, "format")) format = *f;
  }
  if (!format.is_object() || !format.contains("type") || !format["type"].is_string())
    throw ApiError::bad_request("'text.format' must be an object with a string 'type'", "text.format");
  const std::string type = format["type"].get<std::string>();
  if (type != "text" && r.params.structured_output)
    throw ApiError::bad_request(
        fmt::format("'text.format' cannot be combined with '{}'", r.params.structured_output->source), "text.format");
  if (type == "json_object") {
    r.params.structured_output = StructuredOutputSpec::json_object();
  } else if (type == "json_schema") {
    const ordered_json* schema = field_of(format, "schema");
    if (!schema || !schema->is_object())
      throw ApiError::bad_request("'text.format.schema' must be a JSON Schema object", "text.format.schema");
    r.params.structured_output = StructuredOutputSpec::json_schema(schema->dump());
  } else if (type != "text") {
    throw ApiError::bad_request(
        fmt::format("'text.format.type' '{}' is not one of text, json_object, json_schema", type), "text.format.type");
  }
  if (type != "text") r.params.structured_output->source = "text.format";
  echo["text"] = {{"format", format}};
}

// Fields kvik cannot honour: a 400 each rather than a response that silently differs from what was asked.
void refuse_unsupported(const ordered_json& body) {
  if (const ordered_json* b = field_of(body, "background"); b && *b != false)
    throw ApiError::bad_request("'background' responses are not supported by this server", "background");
  for (const char* key : {"conversation", "prompt", "max_tool_calls"})
    if (field_of(body, key)) throw ApiError::bad_request(fmt::format("'{}' is not supported by this server", key), key);
  if (const ordered_json* t = field_of(body, "top_logprobs"); t && *t != 0)
    throw ApiError::bad_request("'top_logprobs' is not supported by this server's Responses API", "top_logprobs");
  if (const ordered_json* t = field_of(body, "truncation"); t && *t != "disabled" && *t != "auto")
    throw ApiError::bad_request("'truncation' must be \"disabled\" or \"auto\"", "truncation");
  if (const ordered_json* m = field_of(body, "metadata")) {
    if (!m->is_object() || m->size() > 16)
      throw ApiError::bad_request("'metadata' must be an object of at most 16 string values", "metadata");
    for (const auto& [k, v] : m->items())
      if (!v.is_string() || k.size() > 64 || v.get<std::string>().size() > 512)
        throw ApiError::bad_request("'metadata' keys are strings of at most 64 characters, values of at most 512",
                                    "metadata");
  }
}

// The conversation's tools, tool_choice and reasoning effort.
void parse_tools_and_reasoning(const ordered_json& body, ResponsesRequest& out) {
  ChatRequest& chat = out.generate.chat_request;
  ordered_json tools = ordered_json::array();
  if (const ordered_json* t = field_of(body, "tools")) {
    tools = chat_tools(*t);
    validate_tools(tools);
    if (!tools.empty()) chat.tools = tools;
  }
  const ordered_json* tc = field_of(body, "tool_choice");
  const ordered_json choice = tc ? chat_tool_choice(*tc) : ordered_json();
  parse_tool_choice(tc ? &choice : nullptr, chat);
  if (const ordered_json* p = field_of(body, "parallel_tool_calls")) {
    if (!p->is_boolean()) throw ApiError::bad_request("'parallel_tool_calls' must be a boolean", "parallel_tool_calls");
    chat.parallel_tool_calls = p->get<bool>();
  }
  ordered_json reasoning = {{"effort", nullptr}, {"summary", nullptr}};
  if (const ordered_json* r = field_of(body, "reasoning")) {
    if (!r->is_object()) throw ApiError::bad_request("'reasoning' must be an object", "reasoning");
    chat.reasoning_effort = parse_reasoning_effort(field_of(*r, "effort"), "reasoning.effort");
    if (!chat.reasoning_effort.empty()) reasoning["effort"] = chat.reasoning_effort;
    if (const ordered_json* s = field_of(*r, "summary")) reasoning["summary"] = *s;
  }
  const ordered_json* given_tools = field_of(body, "tools");
  out.echo["tools"] = given_tools ? *given_tools : ordered_json::array();
  out.echo["tool_choice"] = tc ? *tc : ordered_json("auto");
  out.echo["parallel_tool_calls"] = chat.parallel_tool_calls;
  out.echo["reasoning"] = std::move(reasoning);
}

ResponsesRequest parse(const ordered_json& body, const ItemLookup& lookup) {
  if (!body.is_object()) throw ApiError::bad_request("the request body must be a JSON object");
  refuse_unsupported(body);
  ResponsesRequest out;
  GenerateRequest& r = out.generate;
  r.chat = true;
  parse_generation_fields(body, GenerationApi::kResponses, r);
  const ordered_json* input = field_of(body, "input");
  if (!input) throw ApiError::bad_request("'input' is required", "input");
  if (input->is_string()) {
    ChatMessage m;
    m.role = "user";
    m.content = {{input->get<std::string>()}, false};
    out.input.push_back(std::move(m));
  } else if (input->is_array() && !input->empty()) {
    append_item_messages(*input, "input", lookup, out.input);
  } else {
    throw ApiError::bad_request("'input' must be a string or a non-empty list of items", "input");
  }
  if (const ordered_json* i = field_of(body, "instructions")) out.instructions = string_of(*i, "instructions");
  if (const ordered_json* p = field_of(body, "previous_response_id"))
    out.previous_response_id = string_of(*p, "previous_response_id");
  if (const ordered_json* s = field_of(body, "store")) {
    if (!s->is_boolean()) throw ApiError::bad_request("'store' must be a boolean", "store");
    out.store = s->get<bool>();
  }
  parse_tools_and_reasoning(body, out);
  parse_text_format(field_of(body, "text"), r, out.echo);
  continue_conversation(out, {});
  return out;
}

void fill_echo(const ordered_json& body, ResponsesRequest& out) {
  ordered_json& e = out.echo;
  e["instructions"] = out.instructions.empty() ? ordered_json() : ordered_json(out.instructions);
  for (const char* key : {"max_output_tokens", "temperature", "top_p", "user", "safety_identifier", "prompt_cache_key"})
    e[key] = body.contains(key) ? body[key] : ordered_json();
  if (e["temperature"].is_null()) e["temperature"] = 1.0;
  if (e["top_p"].is_null()) e["top_p"] = 1.0;
  e["metadata"] = body.contains("metadata") && !body["metadata"].is_null() ? body["metadata"] : ordered_json::object();
  e["previous_response_id"] =
      out.previous_response_id.empty() ? ordered_json() : ordered_json(out.previous_response_id);
  e["store"] = out.store;
  e["truncation"] = body.value("truncation", ordered_json("disabled"));
  e["top_logprobs"] = 0;
  e["service_tier"] = "default";
  e["background"] = false;
  e["max_tool_calls"] = nullptr;
}

}  // namespace

void append_item_messages(const ordered_json& items, const std::string& field, const ItemLookup& lookup,
                          std::vector<ChatMessage>& out) {
  for (size_t i = 0; i < items.size(); ++i) {
    const std::string at = fmt::format("{}[{}]", field, i);
    std::optional<ordered_json> referenced;
    const ordered_json* item = &items[i];
    if (!item->is_object()) throw ApiError::bad_request(at + " must be an object", at);
    if (item->value("type", "") == "item_reference") {  // an output item of a stored response, by its id
      const std::string id = string_of(item->value("id", ordered_json()), at + ".id");
      referenced = lookup ? lookup(id) : std::nullopt;
      if (!referenced)
        throw ApiError{404, fmt::format("{}: no stored response has an item with id '{}'", at, id), at + ".id",
                       "NotFoundError"};
      item = &*referenced;
    }
    const std::string type = item->contains("type") && (*item)["type"].is_string() ? (*item)["type"].get<std::string>()
                             : item->contains("role")                              ? "message"
                                                                                   : "";
    if (type == "message")
      message_item(*item, at, out);
    else if (type == "function_call")
      function_call_item(*item, at, out);
    else if (type == "function_call_output")
      function_call_output_item(*item, at, out);
    else if (type == "reasoning")
      reasoning_item(*item, at, out);
    else
      throw ApiError::bad_request(
          type.empty() ? at + " must have a 'type' (message, function_call, function_call_output, reasoning, "
                              "item_reference)"
                       : fmt::format("{}: item type '{}' is not supported (message, function_call, "
                                     "function_call_output, reasoning and item_reference are)",
                                     at, type),
          at + ".type");
  }
}

void continue_conversation(ResponsesRequest& r, const std::vector<ChatMessage>& previous) {
  std::vector<ChatMessage>& messages = r.generate.chat_request.messages;
  messages.clear();
  if (!r.instructions.empty()) {
    ChatMessage system;
    system.role = "system";
    system.content = {{r.instructions}, false};
    messages.push_back(std::move(system));
  }
  messages.insert(messages.end(), previous.begin(), previous.end());
  messages.insert(messages.end(), r.input.begin(), r.input.end());
}

std::variant<ResponsesRequest, ApiError> parse_responses_request(const ordered_json& body, const ItemLookup& lookup) {
  try {
    ResponsesRequest r = parse(body, lookup);
    fill_echo(body, r);
    return r;
  } catch (const ApiError& e) {
    return e;
  } catch (const nlohmann::json::exception& e) {
    return ApiError::bad_request(fmt::format("invalid request: {}", e.what()));
  }
}

}  // namespace kvik::server
