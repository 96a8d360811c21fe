// POST /v1/responses bodies (OpenAI's Responses API, as vLLM serves it: vllm/entrypoints/openai/responses/) parsed
// into the same GenerateRequest + ChatRequest as /v1/chat/completions: `input` (a string, or items — messages with
// input_text / output_text parts, function_call, function_call_output, reasoning) becomes chat messages (a
// function_call joins the assistant turn before it, a function_call_output is a tool message), `instructions` a
// leading system message, flat function `tools` the chat shape, `text.format` the response format,
// `reasoning.effort` the template's reasoning effort, max_output_tokens the length. Fields kept only to be echoed in
// the response object (metadata, user, ...) are in `echo`. A field kvik cannot honour (a hosted tool, background,
// an encrypted reasoning item, ...) is a 400 naming it.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "server/api_error.h"
#include "server/chat_request.h"
#include "server/openai_schema.h"

namespace kvik::server {

struct ResponsesRequest {
  GenerateRequest generate;          // chat: the conversation below, the sampling fields, stream
  std::vector<ChatMessage> input;    // `input` as chat messages (what a stored response keeps, with its output)
  std::string instructions;          // "" when absent; the first system message of the conversation
  std::string previous_response_id;  // "" when absent
  bool store = true;
  // The request's fields as the response object echoes them: instructions, max_output_tokens, metadata,
  // parallel_tool_calls, previous_response_id, reasoning, store, temperature, text, tool_choice, tools, top_p,
  // truncation, user, ... (OpenAI's Response shape, defaults filled in).
  nlohmann::ordered_json echo = nlohmann::ordered_json::object();
};

// A stored output item by its id, for `item_reference` inputs (what the Vercel AI SDK sends for its earlier steps'
// messages when `store` is on); nullopt when there is none.
using ItemLookup = std::function<std::optional<nlohmann::ordered_json>(const std::string& id)>;

// Parses a body (defaults already applied). The conversation is the instructions then `input`; a caller that finds
// previous_response_id in its store puts that conversation between them (continue_conversation).
std::variant<ResponsesRequest, ApiError> parse_responses_request(const nlohmann::ordered_json& body,
                                                                 const ItemLookup& lookup = {});

// Inserts a stored response's conversation before the request's input (after its instructions).
void continue_conversation(ResponsesRequest& r, const std::vector<ChatMessage>& previous);

// Response items (`input` items, or a response's `output`) → chat messages, appended to `out`. `field` names the
// list in errors. Throws ApiError (an item_reference that `lookup` does not find is a 404).
void append_item_messages(const nlohmann::ordered_json& items, const std::string& field, const ItemLookup& lookup,
                          std::vector<ChatMessage>& out);

}  // namespace kvik::server
