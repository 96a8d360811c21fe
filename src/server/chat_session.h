// A conversation with a model through the engine (`kvik chat`). Each turn renders the whole conversation in
// the model's chat format (render_chat, as the server does) and runs it as one engine request. The prefix
// cache still holds the KV of the earlier turns (their prompts and the replies generated into them), so a turn
// prefills only what is new since the last one: the reply's closing markers and the new message.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "engine/engine_core.h"
#include "tokenizer/tokenizer.h"

namespace kvik::server {

struct ChatTurn {
  std::string reply;
  std::vector<int32_t> prompt_ids;  // the whole conversation as this turn's engine request saw it
  std::vector<int32_t> reply_ids;   // generated, EOS not included
  int64_t cached_tokens = 0;        // prompt tokens served from the prefix cache
  std::string finish_reason;        // "stop" (EOS) or "length" (max_tokens)
};

class ChatSession {
 public:
  // `engine` must be idle and built with the tokenizer's end-of-generation ids; it should cache prefixes.
  // `params` applies to every reply (its max_tokens is the reply's length limit).
  ChatSession(EngineCore& engine, const Tokenizer& tokenizer, const std::string& system_message,
              const SamplingParams& params);

  // Adds the user's message, generates the reply (each newly completed piece of text goes to `on_text` as it
  // comes), adds the reply to the conversation and returns the turn. Throws kvik::Error (and leaves the
  // conversation as it was) when the template fails or the conversation no longer fits max_model_len.
  ChatTurn send(const std::string& user_message, const std::function<void(std::string_view)>& on_text = {});

  const nlohmann::ordered_json& messages() const { return messages_; }

 private:
  std::vector<int32_t> prompt_ids() const;
  void generate(ChatTurn& turn, const std::function<void(std::string_view)>& on_text);

  EngineCore& engine_;
  const Tokenizer& tokenizer_;
  ChatFormat format_;
  SamplingParams params_;
  nlohmann::ordered_json messages_ = nlohmann::ordered_json::array();
  int64_t num_turns_ = 0;
};

}  // namespace kvik::server
