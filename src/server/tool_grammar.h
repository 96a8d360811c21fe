// Tool calls that cannot be malformed: the GBNF of a model family's call syntax (chat/tool_parsers.h) with each
// tool's arguments constrained by its `parameters` schema, as a structured-output spec for the engine.
//   tool_choice "required" / named: the grammar holds from the first token (calls only, then EOS).
//   tool_choice "auto": the same grammar, lazy — it switches on when the output shows the family's trigger
//   (<tool_call>, [TOOL_CALLS], <|python_tag|> or {"name" opening a Llama 3 output — not any "{", so a JSON
//   answer is left alone), so a model that decides to call a tool writes a well-formed call, and text without
//   calls is left alone.
// A tool whose `parameters` cannot be compiled (a bound of json_schema_to_gbnf.h exceeded, a malformed schema)
// does not fail an "auto" request: its arguments become any JSON object and a warning says why (and the largest
// schemas fall back the same way while the whole grammar is over the parser's size limit). Under "required" or a
// named tool the request fails with the bound and by how much, naming the tool's field.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "chat/tool_parsers.h"
#include "engine/structured/structured_output_spec.h"
#include "tokenizer/tokenizer.h"

namespace kvik::server {

struct ToolGrammarOptions {
  ToolCallFormat format = ToolCallFormat::kHermes;
  std::string only_name;  // a named tool_choice: only this function; "" = any of `tools`
  bool parallel = true;   // several calls (parallel_tool_calls)
  bool lazy = false;      // tool_choice "auto"
  // The whole grammar's budget (0: the GBNF parser's limits, less a sixteenth for the call syntax).
  size_t max_text_bytes = 0;
  size_t max_elems = 0;
};

// The grammar text. `tools` is a validated OpenAI tools array. Throws kvik::Error ("tools[2].function.parameters:
// json_schema: ...") when a schema fails and `o.lazy` is false; with `o.lazy` the fallbacks go to `warnings`.
std::string tool_calls_gbnf(const nlohmann::ordered_json& tools, const ToolGrammarOptions& o,
                            std::vector<std::string>* warnings = nullptr);

// The spec for SamplingParams::structured_output (source "tools"); lazy specs carry the family's triggers, the
// trigger token's id looked up in `tok` when the trigger is a single token of the vocabulary.
StructuredOutputSpec tool_calls_spec(const nlohmann::ordered_json& tools, const ToolGrammarOptions& o,
                                     const Tokenizer& tok);

}  // namespace kvik::server
