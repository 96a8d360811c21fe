// A chat choice's generated text split the way the request and server ask: reasoning (--reasoning-parser) first,
// then tool calls in what remains (when the request has tools and tool_choice is not "none"). Incremental, one
// parser per choice, so streamed chunks and the whole response come from the same code.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "chat/reasoning_parser.h"
#include "chat/tool_parsers.h"

namespace kvik::server {

struct ChatOutputOptions {
  std::optional<ReasoningFormat> reasoning;
  std::optional<ToolCallFormat> tools;
  bool tool_grammar = false;  // calls are decoded under the tool grammar: their arguments stream in fragments
  bool any() const { return reasoning || tools; }
};

struct ChatDelta {
  std::string reasoning;
  std::string content;
  std::vector<ToolCallFragment> calls;
};

class ChatOutputParser {
 public:
  explicit ChatOutputParser(const ChatOutputOptions& o);
  ChatDelta push(std::string_view text);
  ChatDelta finish();
  size_t num_calls() const { return tools_ ? tools_->num_calls() : 0; }

 private:
  void take_content(std::string_view text, bool final, ChatDelta& out);

  std::optional<ReasoningParser> reasoning_;
  std::optional<ToolCallParser> tools_;
};

}  // namespace kvik::server
