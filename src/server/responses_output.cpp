#include "server/responses_output.h"

namespace kvik::server {

using nlohmann::ordered_json;

namespace {

bool all_space(const std::string& s) { return s.find_first_not_of(" \t\r\n") == std::string::npos; }

// The part a message or reasoning item holds its text in.
ordered_json text_part(bool reasoning, const std::string& text) {
  if (reasoning) return {{"type", "reasoning_text"}, {"text", text}};
  return {{"type", "output_text"},
          {"text", text},
          {"annotations", ordered_json::array()},
          {"logprobs", ordered_json::array()}};
}

ordered_json event(const char* type, const ordered_json& item, size_t output_index) {
  return {{"type", type}, {"item_id", item["id"]}, {"output_index", output_index}};
}

}  // namespace

void ResponseItems::open(Open kind, ordered_json item, std::vector<ordered_json>* events) {
  open_ = kind;
  items_.push_back(item);
  const size_t index = items_.size() - 1;
  if (kind == Open::kMessage || kind == Open::kReasoning)
    items_[index]["content"].push_back(text_part(kind == Open::kReasoning, ""));
  if (!events) return;
  events->push_back({{"type", "response.output_item.added"}, {"output_index", index}, {"item", std::move(item)}});
  if (kind == Open::kCall) return;
  ordered_json e = event("response.content_part.added", items_[index], index);
  e["content_index"] = 0;
  e["part"] = text_part(kind == Open::kReasoning, "");
  events->push_back(std::move(e));
}

void ResponseItems::close(std::vector<ordered_json>* events) {
  if (open_ == Open::kNone) return;
  const Open kind = open_;
  open_ = Open::kNone;
  const size_t index = items_.size() - 1;
  ordered_json& item = items_[index];
  if (item["status"] == "in_progress") item["status"] = "completed";
  if (!events) return;
  if (kind == Open::kCall) {
    ordered_json e = event("response.function_call_arguments.done", item, index);
    e["name"] = item["name"];
    e["arguments"] = item["arguments"];
    events->push_back(std::move(e));
  } else {
    const ordered_json& part = item["content"][0];
    ordered_json done =
        event(kind == Open::kMessage ? "response.output_text.done" : "response.reasoning_text.done", item, index);
    done["content_index"] = 0;
    done["text"] = part["text"];
    if (kind == Open::kMessage) done["logprobs"] = ordered_json::array();
    events->push_back(std::move(done));
    ordered_json part_done = event("response.content_part.done", item, index);
    part_done["content_index"] = 0;
    part_done["part"] = part;
    events->push_back(std::move(part_done));
  }
  events->push_back({{"type", "response.output_item.done"}, {"output_index", index}, {"item", item}});
}

void ResponseItems::add_text(Open kind, const std::string& text, std::vector<ordered_json>* events, bool hold_space) {
  std::string t = text;
  if (kind == Open::kMessage && open_ != Open::kMessage) {
    t = pending_space_ + text;
    pending_space_.clear();
    if (hold_space && all_space(t)) {  // no message yet: it may be the space before a call
      pending_space_ = std::move(t);
      return;
    }
  }
  if (open_ != kind) {
    close(events);
    const bool reasoning = kind == Open::kReasoning;
    ordered_json item = {{"id", (reasoning ? "rs_" : "msg_") + next_request_id()},
                         {"type", reasoning ? "reasoning" : "message"},
                         {"status", "in_progress"}};
    if (reasoning) item["summary"] = ordered_json::array();
    if (!reasoning) item["role"] = "assistant";
    item["content"] = ordered_json::array();
    open(kind, std::move(item), events);
  }
  const size_t index = items_.size() - 1;
  ordered_json& part = items_[index]["content"][0];
  part["text"] = part["text"].get<std::string>() + t;
  if (!events) return;
  ordered_json e = event(kind == Open::kMessage ? "response.output_text.delta" : "response.reasoning_text.delta",
                         items_[index], index);
  e["content_index"] = 0;
  e["delta"] = t;
  if (kind == Open::kMessage) e["logprobs"] = ordered_json::array();
  events->push_back(std::move(e));
}

void ResponseItems::add_call(const ToolCallFragment& f, std::vector<ordered_json>* events) {
  if (!f.id.empty()) {  // a new call
    pending_space_.clear();
    close(events);
    open(Open::kCall,
         {{"id", "fc_" + next_request_id()},
          {"type", "function_call"},
          {"status", "in_progress"},
          {"call_id", f.id},
          {"name", f.name},
          {"arguments", ""}},
         events);
    call_item_[f.index] = items_.size() - 1;
  }
  auto it = call_item_.find(f.index);
  if (it == call_item_.end() || f.arguments.empty()) return;
  ordered_json& item = items_[it->second];
  item["arguments"] = item["arguments"].get<std::string>() + f.arguments;
  if (!events) return;
  ordered_json e = event("response.function_call_arguments.delta", item, it->second);
  e["delta"] = f.arguments;
  events->push_back(std::move(e));
}

void ResponseItems::push(const ChatDelta& d, std::vector<ordered_json>* events) {
  if (!d.reasoning.empty()) add_text(Open::kReasoning, d.reasoning, events);
  if (!d.content.empty()) add_text(Open::kMessage, d.content, events);
  for (const ToolCallFragment& f : d.calls) add_call(f, events);
}

void ResponseItems::finish(bool incomplete, std::vector<ordered_json>* events) {
  // Whitespace that no call followed is the answer's text after all (an answer of only whitespace included).
  if (!pending_space_.empty() && call_item_.empty()) add_text(Open::kMessage, "", events, /*hold_space=*/false);
  if (incomplete && open_ != Open::kNone) items_.back()["status"] = "incomplete";
  close(events);
}

ChatMessage ResponseItems::as_message() const {
  ChatMessage m;
  m.role = "assistant";
  for (const ordered_json& item : items_) {
    const std::string type = item["type"].get<std::string>();
    if (type == "reasoning") {
      m.reasoning = m.reasoning.value_or("") + item["content"][0]["text"].get<std::string>();
    } else if (type == "message") {
      m.content.parts.push_back(item["content"][0]["text"].get<std::string>());
      m.content.null = false;
    } else if (type == "function_call") {
      m.tool_calls.push_back(
          {item["call_id"].get<std::string>(), item["name"].get<std::string>(), template_arguments(item["arguments"])});
    }
  }
  return m;
}

ordered_json responses_usage_json(const Usage& u, int64_t reasoning_tokens) {
  return {{"input_tokens", u.prompt_tokens},
          {"input_tokens_details", {{"cached_tokens", u.cached_tokens}}},
          {"output_tokens", u.completion_tokens},
          {"output_tokens_details", {{"reasoning_tokens", reasoning_tokens}}},
          {"total_tokens", u.prompt_tokens + u.completion_tokens}};
}

ordered_json response_object_json(const ResponseHead& head, const std::string& status,
                                  const std::string& incomplete_reason, const ordered_json& output,
                                  const ordered_json& usage) {
  ordered_json r = {
      {"id", head.id},
      {"object", "response"},
      {"created_at", head.created_at},
      {"status", status},
      {"error", nullptr},
      {"incomplete_details", status == "incomplete" ? ordered_json{{"reason", incomplete_reason}} : ordered_json()},
      {"model", head.model},
      {"output", output},
      {"usage", usage}};
  for (auto it = head.echo.begin(); it != head.echo.end(); ++it) r[it.key()] = it.value();
  return r;
}

}  // namespace kvik::server
