// What a request asks its output to be (vLLM's guided decoding / OpenAI's response_format).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace kvik {

struct StructuredOutputSpec {
  enum class Kind { kJsonObject, kJsonSchema, kRegex, kGrammar, kChoice };
  Kind kind = Kind::kJsonObject;
  std::string text;                        // the schema (JSON text), the regex or the GBNF grammar
  std::vector<std::string> choices;        // kChoice: the output is exactly one of these
  std::string source = "response_format";  // the request field that asked for it (named in errors)
  // Lazy (tool_choice "auto", the idea of llama.cpp's grammar triggers): no constraint until the output shows a
  // trigger, then the grammar from the trigger on. A text trigger may end inside a token; one that starts with
  // "^" counts only at the output's start (after whitespace; it may span tokens). A trigger token (a control token,
  // which has no bytes) feeds its text to the grammar. Empty both: the grammar holds from the first token.
  std::vector<std::string> triggers;
  std::vector<std::pair<int32_t, std::string>> trigger_tokens;
  // Lazy and a reasoning model: triggers do not count inside its thinking — an output that opens with
  // `think_open` (or every output, when `think_always`: the template opened the block) until `think_close`.
  std::string think_open, think_close;
  bool think_always = false;

  static StructuredOutputSpec json_object() {
    return {Kind::kJsonObject, {}, {}, "response_format", {}, {}, {}, {}, false};
  }
  static StructuredOutputSpec json_schema(std::string schema) {
    return {Kind::kJsonSchema, std::move(schema), {}, "response_format", {}, {}, {}, {}, false};
  }
  static StructuredOutputSpec regex(std::string pattern) {
    return {Kind::kRegex, std::move(pattern), {}, "guided_regex", {}, {}, {}, {}, false};
  }
  static StructuredOutputSpec grammar(std::string gbnf) {
    return {Kind::kGrammar, std::move(gbnf), {}, "guided_grammar", {}, {}, {}, {}, false};
  }
  static StructuredOutputSpec choice(std::vector<std::string> c) {
    return {Kind::kChoice, {}, std::move(c), "guided_choice", {}, {}, {}, {}, false};
  }
};

}  // namespace kvik
