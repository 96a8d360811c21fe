// What a request asks its output to be (vLLM's guided decoding / OpenAI's response_format).
#pragma once

#include <string>
#include <vector>

namespace kvik {

struct StructuredOutputSpec {
  enum class Kind { kJsonObject, kJsonSchema, kRegex, kGrammar, kChoice };
  Kind kind = Kind::kJsonObject;
  std::string text;                        // the schema (JSON text), the regex or the GBNF grammar
  std::vector<std::string> choices;        // kChoice: the output is exactly one of these
  std::string source = "response_format";  // the request field that asked for it (named in errors)

  static StructuredOutputSpec json_object() { return {Kind::kJsonObject, {}, {}, "response_format"}; }
  static StructuredOutputSpec json_schema(std::string schema) {
    return {Kind::kJsonSchema, std::move(schema), {}, "response_format"};
  }
  static StructuredOutputSpec regex(std::string pattern) {
    return {Kind::kRegex, std::move(pattern), {}, "guided_regex"};
  }
  static StructuredOutputSpec grammar(std::string gbnf) {
    return {Kind::kGrammar, std::move(gbnf), {}, "guided_grammar"};
  }
  static StructuredOutputSpec choice(std::vector<std::string> c) {
    return {Kind::kChoice, {}, std::move(c), "guided_choice"};
  }
};

}  // namespace kvik
