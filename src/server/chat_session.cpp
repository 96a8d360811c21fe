#include "server/chat_session.h"

#include "core/error.h"
#include "server/chat_prompt.h"
#include "tokenizer/streaming_detokenizer.h"

namespace kvik::server {

ChatSession::ChatSession(EngineCore& engine, const Tokenizer& tokenizer, const std::string& system_message,
                         const SamplingParams& params)
    : engine_(engine), tokenizer_(tokenizer), format_(chat_format(tokenizer)), params_(params) {
  if (auto err = params_.validate()) fail("chat: {}", err->message);
  if (!system_message.empty()) messages_.push_back({{"role", "system"}, {"content", system_message}});
}

std::vector<int32_t> ChatSession::prompt_ids() const {
  return encode_chat_prompt(tokenizer_, render_chat(format_, messages_, true));
}

ChatTurn ChatSession::send(const std::string& user_message, const std::function<void(std::string_view)>& on_text) {
  messages_.push_back({{"role", "user"}, {"content", user_message}});
  ChatTurn turn;
  try {
    turn.prompt_ids = prompt_ids();
    const int64_t max_len = engine_.config().max_model_len;
    if (static_cast<int64_t>(turn.prompt_ids.size()) + params_.max_tokens > max_len)
      fail("the conversation ({} tokens) and a reply of {} no longer fit the context of {}", turn.prompt_ids.size(),
           params_.max_tokens, max_len);
    generate(turn, on_text);
  } catch (...) {
    messages_.erase(messages_.size() - 1);
    throw;
  }
  messages_.push_back({{"role", "assistant"}, {"content", turn.reply}});
  return turn;
}

void ChatSession::generate(ChatTurn& turn, const std::function<void(std::string_view)>& on_text) {
  const std::string id = "chat-" + std::to_string(num_turns_++);
  if (auto err = engine_.add_request(id, turn.prompt_ids, params_)) fail("chat: {}", err->message);
  StreamingDetokenizer detok(tokenizer_, turn.prompt_ids);
  const auto emit = [&](const std::string& piece) {
    turn.reply += piece;
    if (on_text && !piece.empty()) on_text(piece);
  };
  for (bool done = false; !done;) {
    if (!engine_.has_unfinished()) fail("chat: the engine dropped request {}", id);
    for (const RequestOutput& out : engine_.step()) {
      if (out.request_id != id) continue;
      for (int32_t t : out.new_token_ids) {
        turn.reply_ids.push_back(t);
        emit(detok.push(t));
      }
      if (!out.finished) continue;
      if (out.finish_reason == "error") fail("chat: {}", out.error);
      turn.finish_reason = out.finish_reason;
      turn.cached_tokens = out.stats.num_cached_tokens;
      done = true;
    }
  }
  emit(detok.flush());
}

}  // namespace kvik::server
