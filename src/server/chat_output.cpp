#include "server/chat_output.h"

namespace kvik::server {

ChatOutputParser::ChatOutputParser(const ChatOutputOptions& o) {
  if (o.reasoning) reasoning_.emplace(*o.reasoning);
  if (o.tools) tools_.emplace(*o.tools, o.tool_grammar);
}

void ChatOutputParser::take_content(std::string_view text, bool final, ChatDelta& out) {
  if (!tools_) {
    out.content += text;
    return;
  }
  for (ToolCallDelta d : {tools_->push(text), final ? tools_->finish() : ToolCallDelta{}}) {
    out.content += d.content;
    for (ToolCallFragment& f : d.fragments) out.calls.push_back(std::move(f));
  }
}

ChatDelta ChatOutputParser::push(std::string_view text) {
  ChatDelta out;
  if (!reasoning_) {
    take_content(text, false, out);
    return out;
  }
  ReasoningDelta r = reasoning_->push(text);
  out.reasoning = std::move(r.reasoning);
  take_content(r.content, false, out);
  return out;
}

ChatDelta ChatOutputParser::finish() {
  ChatDelta out;
  std::string rest;
  if (reasoning_) {
    ReasoningDelta r = reasoning_->finish();
    out.reasoning = std::move(r.reasoning);
    rest = std::move(r.content);
  }
  take_content(rest, true, out);
  return out;
}

}  // namespace kvik::server
