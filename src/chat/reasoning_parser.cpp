#include "chat/reasoning_parser.h"

namespace kvik {

namespace {

constexpr std::string_view kOpen = "<think>";
constexpr std::string_view kClose = "</think>";

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

size_t partial_suffix(std::string_view s, std::string_view tag) {
  for (size_t n = std::min(s.size(), tag.size() - 1); n > 0; --n)
    if (s.substr(s.size() - n) == tag.substr(0, n)) return n;
  return 0;
}

}  // namespace

std::optional<ReasoningFormat> reasoning_format_from_name(std::string_view name) {
  if (name == "qwen3") return ReasoningFormat::kQwen3;
  if (name == "deepseek_r1") return ReasoningFormat::kDeepSeekR1;
  return std::nullopt;
}

void ReasoningParser::step(bool final, ReasoningDelta& out) {
  if (state_ == State::kStart) {
    size_t i = 0;
    while (i < buf_.size() && is_ws(buf_[i])) ++i;
    const std::string_view rest = std::string_view(buf_).substr(i);
    if (!final && rest.size() < kOpen.size() && kOpen.substr(0, rest.size()) == rest) return;  // maybe <think>
    if (rest.substr(0, kOpen.size()) == kOpen) {
      buf_.erase(0, i + kOpen.size());
      state_ = State::kThinking;
    } else {
      state_ = format_ == ReasoningFormat::kQwen3 ? State::kContent : State::kThinking;
    }
  }
  if (state_ == State::kThinking) {
    const size_t close = buf_.find(kClose);
    if (close == std::string::npos) {
      const size_t keep = final ? 0 : partial_suffix(buf_, kClose);
      out.reasoning += buf_.substr(0, buf_.size() - keep);
      buf_.erase(0, buf_.size() - keep);
      return;
    }
    out.reasoning += buf_.substr(0, close);
    buf_.erase(0, close + kClose.size());
    state_ = State::kAfterThinking;
  }
  if (state_ == State::kAfterThinking) {
    size_t i = 0;
    while (i < buf_.size() && is_ws(buf_[i])) ++i;
    buf_.erase(0, i);
    if (buf_.empty()) return;
    state_ = State::kContent;
  }
  out.content += buf_;
  buf_.clear();
}

ReasoningDelta ReasoningParser::push(std::string_view text) {
  ReasoningDelta out;
  buf_ += text;
  step(false, out);
  return out;
}

ReasoningDelta ReasoningParser::finish() {
  ReasoningDelta out;
  step(true, out);
  return out;
}

ReasoningDelta split_reasoning(ReasoningFormat format, std::string_view text) {
  ReasoningParser p(format);
  ReasoningDelta a = p.push(text);
  ReasoningDelta b = p.finish();
  return {a.reasoning + b.reasoning, a.content + b.content};
}

}  // namespace kvik
