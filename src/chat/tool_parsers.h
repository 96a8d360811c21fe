// Tool calls in a model's output text, in the three call syntaxes of vLLM's tool parsers (same names):
//   hermes       Hermes, Qwen2.5, Qwen3:  <tool_call>{"name": ..., "arguments": {...}}</tool_call>, several in a row
//   llama3_json  Llama 3.1/3.2/3.3:       [<|python_tag|>]{"name": ..., "parameters": {...}} [; {...}]...
//   mistral      Mistral v3, Nemo:        [TOOL_CALLS][{"name": ..., "arguments": {...}, "id": "abcDEF123"}, ...]
//
// One incremental parser serves streamed and whole responses alike (the whole text is one push), so the
// streamed deltas always reassemble to the non-streamed result. Text that only looks like a call and does not
// parse (truncated, malformed JSON, no name) stays content, verbatim; nothing here throws on model output.
// Whitespace next to a call is not content (the "\n" between calls), nor is trailing whitespace once calls were
// found.
//
// Streaming arguments. Without a grammar a call is only known to be one once its markup is whole and parses, so
// it comes out in one piece, its arguments re-serialized compactly. Under the tool grammar (`grammar`: every
// call the output opens is decoded under the server's call grammar, tool_choice required / named / auto after the
// trigger) a call is committed as soon as its header is read — the trigger, `{"name": "NAME", "arguments"` (or
// "parameters") `: {` — and from then its arguments are the model's own JSON text, passed on in fragments as it
// is generated (held back only inside a UTF-8 character). The rule depends on the text alone, so the whole
// response gets the same: a committed call's arguments are the raw text of the object, up to its closing brace by
// bracket depth, or to the end of the output when it was cut short (max_tokens, a stop string); the rest of its
// markup (the closing "}", "</tool_call>", "]") is never content.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/json_scan.h"

namespace kvik {

enum class ToolCallFormat { kHermes, kLlama3Json, kMistral };

// vLLM's parser names: "hermes", "llama3_json", "mistral"; nullopt for others.
std::optional<ToolCallFormat> tool_call_format_from_name(std::string_view name);
const char* tool_call_format_name(ToolCallFormat f);
// The format a chat template teaches its model, by its markers: <tool_call> → hermes, [TOOL_CALLS] → mistral,
// <|python_tag|> or "parameters" with ipython → llama3_json; nullopt when the template shows no tool syntax.
std::optional<ToolCallFormat> detect_tool_call_format(std::string_view chat_template);

struct ToolCall {
  std::string id;  // call_… (mistral: 9 alphanumerics, the model's own id when it wrote a valid one)
  std::string name;
  std::string arguments;  // compact JSON text of an object
};

// A piece of a call: its first fragment carries the id and the name, later ones the next part of the arguments'
// JSON text (a call made whole at once is one fragment with both). `index` is the call's position in the output.
struct ToolCallFragment {
  size_t index = 0;
  std::string id;    // set on the call's first fragment only
  std::string name;  // likewise
  std::string arguments;
};

// What one push (or finish) produced: content that is final, and call fragments, in order.
struct ToolCallDelta {
  std::string content;
  std::vector<ToolCallFragment> fragments;
};

// Adds fragments to the calls they belong to (a first fragment opens a new call).
void append_fragments(std::vector<ToolCall>& calls, const std::vector<ToolCallFragment>& fragments);

class ToolCallParser {
 public:
  explicit ToolCallParser(ToolCallFormat format, bool grammar = false) : format_(format), grammar_(grammar) {}
  ToolCallDelta push(std::string_view text);
  ToolCallDelta finish();  // the end of the output: whatever is held is resolved
  size_t num_calls() const { return num_calls_; }

 private:
  void step(bool final, ToolCallDelta& out);
  bool step_tagged(bool final, ToolCallDelta& out);  // hermes and mistral
  bool step_llama3(bool final, ToolCallDelta& out);
  void emit_content(std::string_view s, ToolCallDelta& out);
  void emit_call(ToolCall call, ToolCallDelta& out);
  void emit_args(std::string_view s, ToolCallDelta& out);
  std::string new_id();
  // Under the grammar: commits to the call object at buf_[i] when its header is there. 1: committed, 0: not a
  // header (parse it whole), -1: wait for more text.
  int try_commit(size_t i, bool final, ToolCallDelta& out);
  bool step_committed(bool final, ToolCallDelta& out);  // a committed call's arguments and the rest of its markup
  bool step_after(bool final);
  bool step_mistral_next(bool final, ToolCallDelta& out);

  ToolCallFormat format_;
  bool grammar_;
  // A committed call: its arguments streaming, then the rest of its markup; mistral: then ", {call}" or "]".
  enum class Stream { kNone, kArgs, kTail, kAfter, kMistralNext } stream_ = Stream::kNone;
  JsonBracketScan scan_;         // over a committed call's arguments (then over the rest of its object)
  std::string buf_;              // text not yet resolved
  std::string held_ws_;          // trailing whitespace of the content so far (dropped at the end if there were calls)
  bool after_call_ = false;      // leading whitespace of the next content is dropped
  bool llama3_started_ = false;  // past the output's start (llama3_json calls only open the output)
  bool llama3_content_ = false;  // the rest is content
  size_t num_calls_ = 0;
  bool finished_ = false;
};

// The whole output at once: content (empty when there is none) and the calls.
struct ParsedToolCalls {
  std::string content;
  std::vector<ToolCall> calls;
};
ParsedToolCalls parse_tool_calls(ToolCallFormat format, std::string_view text, bool grammar = false);

// The trigger text that opens a call in the format's syntax ("<tool_call>", "[TOOL_CALLS]", "<|python_tag|>").
const char* tool_call_trigger(ToolCallFormat f);

}  // namespace kvik
