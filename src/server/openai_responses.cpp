#include "server/openai_responses.h"

namespace kvik::server {

using nlohmann::json;

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

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
    if (m.chat)
      choice["message"] = {{"role", "assistant"}, {"content", c.text}};
    else
      choice["text"] = c.text;
    cs.push_back(choice);
  }
  return {{"id", m.id},           {"object", m.chat ? "chat.completion" : "text_completion"},
          {"created", m.created}, {"model", m.model},
          {"choices", cs},        {"usage", usage_json(u)}};
}

}  // namespace kvik::server
