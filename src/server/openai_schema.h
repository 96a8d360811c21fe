// OpenAI request schemas: /v1/completions and /v1/chat/completions bodies parsed and validated into one
// GenerateRequest. Every known field's type and range is checked and a bad one is a 400 naming the field;
// unknown fields are ignored, as OpenAI's own server does for fields it does not know.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "engine/sampling_params.h"
#include "server/api_error.h"
#include "server/interventions.h"

namespace kvik::server {

inline constexpr int32_t kMaxN = 16;
inline constexpr size_t kMaxStopStrings = 16;
inline constexpr size_t kMaxPrompts = 64;
inline constexpr size_t kMaxTools = 128;

// tool_choice: what the model may or must do with `tools`.
enum class ToolChoice { kNone, kAuto, kRequired, kNamed };

// A prompt is text (tokenized by the server) or token ids.
using Prompt = std::variant<std::string, std::vector<int32_t>>;

struct GenerateRequest {
  bool chat = false;
  std::string model;            // "" when absent
  std::vector<Prompt> prompts;  // completions: one or more; chat: empty (see messages)
  nlohmann::json messages;      // chat only, validated shape
  SamplingParams params;        // max_tokens set only when the client gave it (see max_tokens_given)
  bool max_tokens_given = false;
  int32_t n = 1;
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;
  bool echo = false;
  std::vector<InterventionSpec> interventions;  // kvik extension (server/interventions.h)
  // Chat tools (validated: type function, unique names, parameters a schema the grammar compiler accepts).
  nlohmann::json tools;                        // null or a non-empty array, as given
  ToolChoice tool_choice = ToolChoice::kNone;  // default: auto with tools, none without
  std::string tool_choice_name;                // kNamed: the function
  bool parallel_tool_calls = true;
  nlohmann::json chat_template_kwargs = nlohmann::json::object();  // extra template variables
};

// Parses a JSON body. `chat` selects the chat schema. Returns the request or the 400 naming the field.
std::variant<GenerateRequest, ApiError> parse_generate_request(const nlohmann::json& body, bool chat);

// /tokenize: {"prompt": str} or {"messages": [...]}, optional add_special_tokens; /detokenize: {"tokens": [int]}.
struct TokenizeRequest {
  std::optional<std::string> prompt;
  nlohmann::json messages;
  bool add_special_tokens = true;
};
std::variant<TokenizeRequest, ApiError> parse_tokenize_request(const nlohmann::json& body);
std::variant<std::vector<int32_t>, ApiError> parse_detokenize_request(const nlohmann::json& body);

}  // namespace kvik::server
