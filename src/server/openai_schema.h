// OpenAI request schemas: /v1/completions and /v1/chat/completions bodies parsed and validated once into one
// GenerateRequest (a chat request's conversation as the typed ChatRequest of chat_request.h). Every known field's
// type and range is checked and a bad one is a 400 naming the field; unknown fields are ignored, as OpenAI's own
// server does for fields it does not know. Bodies are read as ordered_json: the client's key order reaches the
// chat template.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "engine/sampling_params.h"
#include "server/api_error.h"
#include "server/chat_request.h"
#include "server/interventions.h"

namespace kvik::server {

inline constexpr int32_t kMaxN = 16;
inline constexpr size_t kMaxStopStrings = 16;
inline constexpr size_t kMaxPrompts = 64;
inline constexpr size_t kMaxTools = 128;

// A prompt is text (tokenized by the server) or token ids.
using Prompt = std::variant<std::string, std::vector<int32_t>>;

struct GenerateRequest {
  bool chat = false;
  std::string model;            // "" when absent
  std::vector<Prompt> prompts;  // completions: one or more; chat: empty (see chat)
  ChatRequest chat_request;     // chat: messages, tools, tool_choice, template variables
  SamplingParams params;        // max_tokens set only when the client gave it (see max_tokens_given)
  bool max_tokens_given = false;
  int32_t n = 1;
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;
  bool echo = false;
  std::vector<InterventionSpec> interventions;  // kvik extension (server/interventions.h)
  std::string max_tokens_field = "max_tokens";  // how the client spelled the length (for errors)
};

// Parses a JSON body. `chat` selects the chat schema. Returns the request or the 400 naming the field.
std::variant<GenerateRequest, ApiError> parse_generate_request(const nlohmann::ordered_json& body, bool chat);
std::variant<GenerateRequest, ApiError> parse_generate_request(const nlohmann::json& body, bool chat);

enum class GenerationApi { kCompletions, kChat, kResponses };

// The fields every generating API shares, each a 400 naming the field when wrong: model, sampling (the length,
// temperature and filters, penalties, seed, n and logprobs as `api` spells them; the Responses API has neither n
// nor response_format), stop, response_format / guided_*, logit_bias and stop_token_ids, interventions, stream.
// Throws ApiError.
void parse_generation_fields(const nlohmann::ordered_json& body, GenerationApi api, GenerateRequest& r);

// Chat tools ([{"type": "function", "function": {...}}]): each function's name unique and its parameters a JSON
// Schema the grammar compiler accepts. `field` names the list in errors. Throws ApiError.
void validate_tools(const nlohmann::ordered_json& tools, const std::string& field = "tools");
// tool_choice as the chat API spells it, checked against the request's tools. Throws ApiError.
void parse_tool_choice(const nlohmann::ordered_json* tool_choice, ChatRequest& r);
// reasoning_effort: none, minimal, low, medium or high ("" when absent). Throws ApiError naming `field`.
std::string parse_reasoning_effort(const nlohmann::ordered_json* effort, const std::string& field);

// /tokenize: {"prompt": str} or {"messages": [...]}, optional add_special_tokens; /detokenize: {"tokens": [int]}.
struct TokenizeRequest {
  std::optional<std::string> prompt;
  ChatRequest chat_request;  // messages, when no prompt
  bool add_special_tokens = true;
};
std::variant<TokenizeRequest, ApiError> parse_tokenize_request(const nlohmann::ordered_json& body);
std::variant<std::vector<int32_t>, ApiError> parse_detokenize_request(const nlohmann::json& body);

}  // namespace kvik::server
