// OpenAI response bodies: completion and chat.completion objects, their streaming chunks, logprobs in each
// API's shape, and usage. Pure functions of the deltas, so the streamed and the whole responses agree.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/chat_output.h"
#include "server/generation.h"
#include "tokenizer/tokenizer.h"

namespace kvik::server {

struct ResponseMeta {
  bool chat = false;
  std::string id;  // "cmpl-..." or "chatcmpl-..."
  int64_t created = 0;
  std::string model;
  bool logprobs = false;
  ChatOutputOptions output;  // chat: reasoning and tool-call parsing of each choice's text
};

// The accumulated result of one choice, for the non-streaming response.
struct ChoiceResult {
  std::string text;  // with ResponseMeta::output: the content
  std::vector<TokenLogprobs> logprobs;
  std::string finish_reason;
  std::string reasoning;
  std::vector<ToolCall> tool_calls;
};

nlohmann::json usage_json(const Usage& u);
nlohmann::json logprobs_json(const ResponseMeta& m, const Tokenizer& tok, const std::vector<TokenLogprobs>& lps,
                             size_t text_offset);
// One SSE chunk (without "data: "). `first` adds the chat delta's role.
nlohmann::json chunk_json(const ResponseMeta& m, const Tokenizer& tok, const ChoiceDelta& d, bool first,
                          size_t text_offset, bool include_usage_field);
// The chunks of one chat choice's parsed delta (ResponseMeta::output set): the content/reasoning chunk, then per
// call fragment a chunk with the call's index, id, type and name when the call starts there and one with the
// fragment of its arguments when there is one. finish_reason goes on the last chunk.
std::vector<nlohmann::json> parsed_chunks_json(const ResponseMeta& m, const Tokenizer& tok, const ChoiceDelta& d,
                                               const ChatDelta& p, bool first, bool include_usage_field);
// finish_reason "tool_calls" when calls were made and the model stopped by itself.
std::string tool_finish_reason(const std::string& reason, size_t num_calls);
nlohmann::json usage_chunk_json(const ResponseMeta& m, const Usage& u);
nlohmann::json response_json(const ResponseMeta& m, const Tokenizer& tok, const std::vector<ChoiceResult>& choices,
                             const Usage& u);

// JSON text for the wire: invalid UTF-8 (a token piece ending inside a character) becomes U+FFFD.
std::string dump(const nlohmann::json& j);
std::string dump_ordered(const nlohmann::ordered_json& j);

}  // namespace kvik::server
