// The Responses API's output (OpenAI's Response object and its typed stream events; vLLM's
// vllm/entrypoints/openai/responses/ and the openai SDK's resources/responses types are the shapes): a choice's
// parsed text (ChatOutputParser: reasoning, content, tool-call fragments) becomes output items in the order the
// model wrote them — `reasoning` (reasoning_text content), `message` (one output_text part), `function_call`
// (call_id, name, arguments) — and, when streaming, the events that build them: output_item.added,
// content_part.added, output_text.delta / reasoning_text.delta / function_call_arguments.delta, their .done,
// content_part.done, output_item.done. The streamed events and the whole response come from the same code, so they
// agree. Whitespace before any text of a message (what a model writes before a tool call) opens no message item
// unless no call follows.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/chat_output.h"
#include "server/chat_request.h"
#include "server/generation.h"

namespace kvik::server {

class ResponseItems {
 public:
  // Feeds one parsed delta; the events it makes go to `events` (null when not streaming). Each event lacks its
  // sequence_number (the stream numbers them as it writes them).
  void push(const ChatDelta& d, std::vector<nlohmann::ordered_json>* events);
  // Closes the item still open; `incomplete` (the output was cut at max_output_tokens) marks it so.
  void finish(bool incomplete, std::vector<nlohmann::ordered_json>* events);

  const nlohmann::ordered_json& items() const { return items_; }  // the response's `output`
  // The output as the assistant turn a later request continues from (previous_response_id).
  ChatMessage as_message() const;

 private:
  enum class Open { kNone, kReasoning, kMessage, kCall };
  void open(Open kind, nlohmann::ordered_json item, std::vector<nlohmann::ordered_json>* events);
  void close(std::vector<nlohmann::ordered_json>* events);
  // `hold_space`: whitespace that would open a message waits in pending_space_ for what follows.
  void add_text(Open kind, const std::string& text, std::vector<nlohmann::ordered_json>* events,
                bool hold_space = true);
  void add_call(const ToolCallFragment& f, std::vector<nlohmann::ordered_json>* events);

  nlohmann::ordered_json items_ = nlohmann::ordered_json::array();
  Open open_ = Open::kNone;
  std::string pending_space_;           // whitespace that may yet start a message
  std::map<size_t, size_t> call_item_;  // a call's index (ToolCallFragment::index) → its output index
};

// Usage as the Responses API spells it.
nlohmann::ordered_json responses_usage_json(const Usage& u, int64_t reasoning_tokens);

// The Response object: `echo` holds the request's fields (ResponsesRequest::echo), `status` is "in_progress",
// "completed" or "incomplete" (then incomplete_details names `incomplete_reason`); `usage` null while in progress.
struct ResponseHead {
  std::string id;
  int64_t created_at = 0;
  std::string model;
  nlohmann::ordered_json echo = nlohmann::ordered_json::object();
};
nlohmann::ordered_json response_object_json(const ResponseHead& head, const std::string& status,
                                            const std::string& incomplete_reason, const nlohmann::ordered_json& output,
                                            const nlohmann::ordered_json& usage);

}  // namespace kvik::server
