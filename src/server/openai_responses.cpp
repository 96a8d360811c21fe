#include "server/openai_responses.h"

namespace kvik::server {

using nlohmann::json;

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }
std::string dump_ordered(const nlohmann::ordered_json& j) {
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

json usage_json(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

namespace {
json bytes_of(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}
}  // namespace

json logprobs_json(const ResponseMeta& m, const Tokenizer& tok, const std::vector<TokenLogprobs>& lps,
                   size_t text_offset) {
  if (m.chat) {
    json content = json::array();
    for (const TokenLogprobs& lp : lps) {
      const std::string piece = tok.token_to_piece(lp.token);
      json top = json::array();
      for (const auto& [id, l] : lp.top) {
        const std::string p = tok.token_to_piece(id);
        top.push_back({{"token", p}, {"logprob", l}, {"bytes", bytes_of(p)}});
      }
      content.push_back({{"token", piece}, {"logprob", lp.logprob}, {"bytes", bytes_of(piece)}, {"top_logprobs", top}});
    }
    return {{"content", content}};
  }
  json tokens = json::array(), token_logprobs = json::array(), top_logprobs = json::array(), offsets = json::array();
  for (const TokenLogprobs& lp : lps) {
    const std::string piece = tok.token_to_piece(lp.token);
    tokens.push_back(piece);
    token_logprobs.push_back(lp.logprob);
    json top = json::object();
    for (const auto& [id, l] : lp.top) top[tok.token_to_piece(id)] = l;
    top_logprobs.push_back(top);
    offsets.push_back(text_offset);
    text_offset += piece.size();
  }
  return {
      {"tokens", tokens}, {"token_logprobs", token_logprobs}, {"top_logprobs", top_logprobs}, {"text_offset", offsets}};
}

json chunk_json(const ResponseMeta& m, const Tokenizer& tok, const ChoiceDelta& d, bool first, size_t text_offset,
                bool include_usage_field) {
  json choice = {{"index", d.index},
                 {"logprobs", m.logprobs ? logprobs_json(m, tok, d.logprobs, text_offset) : json(nullptr)},
                 {"finish_reason", d.finish_reason ? json(*d.finish_reason) : json(nullptr)}};
  if (m.chat) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (!d.text.empty() || first) delta["content"] = d.text;
    choice["delta"] = delta;
  } else {
    choice["text"] = d.text;
  }
  json j = {{"id", m.id},
            {"object", m.chat ? "chat.completion.chunk" : "text_completion"},
            {"created", m.created},
            {"model", m.model},
            {"choices", json::array({choice})}};
  if (include_usage_field) j["usage"] = nullptr;
  return j;
}

std::string tool_finish_reason(const std::string& reason, size_t num_calls) {
  return num_calls > 0 && reason == "stop" ? "tool_calls" : reason;
}

std::vector<json> parsed_chunks_json(const ResponseMeta& m, const Tokenizer& tok, const ChoiceDelta& d,
                                     const ChatDelta& p, bool first, bool include_usage_field) {
  ChoiceDelta text = d;
  text.text = p.content;
  if (!p.calls.empty()) text.finish_reason.reset();
  std::vector<json> chunks;
  chunks.push_back(chunk_json(m, tok, text, first, 0, include_usage_field));
  json& delta = chunks.back()["choices"][0]["delta"];
  if (!p.reasoning.empty()) delta["reasoning_content"] = p.reasoning;
  if (!first && p.content.empty()) delta.erase("content");
  // An empty delta before call fragments is left out (unless it carries the tokens' logprobs).
  if (delta.empty() && !p.calls.empty() && !m.logprobs) chunks.pop_back();
  ChoiceDelta bare;
  bare.index = d.index;
  auto call_chunk = [&](json call) {
    json c = chunk_json(m, tok, bare, false, 0, include_usage_field);
    c["choices"][0]["logprobs"] = nullptr;
    c["choices"][0]["delta"] = {{"tool_calls", json::array({std::move(call)})}};
    chunks.push_back(std::move(c));
  };
  for (const ToolCallFragment& f : p.calls) {
    const int64_t index = static_cast<int64_t>(f.index);
    if (!f.id.empty())
      call_chunk(
          {{"index", index}, {"id", f.id}, {"type", "function"}, {"function", {{"name", f.name}, {"arguments", ""}}}});
    if (!f.arguments.empty()) call_chunk({{"index", index}, {"function", {{"arguments", f.arguments}}}});
  }
  if (!p.calls.empty() && d.finish_reason) chunks.back()["choices"][0]["finish_reason"] = *d.finish_reason;
  return chunks;
}

json usage_chunk_json(const ResponseMeta& m, const Usage& u) {
  return {{"id", m.id},
          {"object", m.chat ? "chat.completion.chunk" : "text_completion"},
          {"created", m.created},
          {"model", m.model},
          {"choices", json::array()},
          {"usage", usage_json(u)}};
}

json response_json(const ResponseMeta& m, const Tokenizer& tok, const std::vector<ChoiceResult>& choices,
                   const Usage& u) {
  json cs = json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    const ChoiceResult& c = choices[i];
    json choice = {{"index", i},
                   {"logprobs", m.logprobs ? logprobs_json(m, tok, c.logprobs, 0) : json(nullptr)},
                   {"finish_reason", c.finish_reason}};
    if (m.chat) {
      json message = {{"role", "assistant"}, {"content", c.text}};
      if (m.output.any() && c.text.empty() && !c.tool_calls.empty()) message["content"] = nullptr;
      if (m.output.reasoning) message["reasoning_content"] = c.reasoning.empty() ? json(nullptr) : json(c.reasoning);
      if (!c.tool_calls.empty()) {
        json calls = json::array();
        for (const ToolCall& t : c.tool_calls)
          calls.push_back(
              {{"id", t.id}, {"type", "function"}, {"function", {{"name", t.name}, {"arguments", t.arguments}}}});
        message["tool_calls"] = calls;
      }
      choice["message"] = message;
    } else {
      choice["text"] = c.text;
    }
    cs.push_back(choice);
  }
  return {{"id", m.id},           {"object", m.chat ? "chat.completion" : "text_completion"},
          {"created", m.created}, {"model", m.model},
          {"choices", cs},        {"usage", usage_json(u)}};
}

}  // namespace kvik::server
