#include "server/tool_grammar.h"

#include <fmt/format.h>

#include "core/error.h"
#include "engine/structured/grammar.h"
#include "engine/structured/json_schema_to_gbnf.h"

namespace kvik::server {

using nlohmann::json;
using ojson = nlohmann::ordered_json;

namespace {

// One call object of the family: {"name": "NAME", "arguments"|"parameters": ARGS}, ARGS from the schema.
std::string call_object(const std::string& name, const std::string& args_rule, ToolCallFormat f) {
  const char* key = f == ToolCallFormat::kLlama3Json ? "parameters" : "arguments";
  return fmt::format(R"("{{" ws "\"name\"" ws ":" ws {} ws "," ws "\"{}\"" ws ":" ws {} ws "}}")",
                     structured::gbnf_literal(json(name).dump()), key, args_rule);
}

}  // namespace

std::string tool_calls_gbnf(const ojson& tools, const ToolGrammarOptions& o) {
  std::string rules, calls;
  for (size_t i = 0; i < tools.size(); ++i) {
    const ojson& f = tools[i]["function"];
    const std::string name = f["name"].get<std::string>();
    if (!o.only_name.empty() && name != o.only_name) continue;
    std::string args = "json-object";
    if (f.contains("parameters") && f["parameters"].is_object()) {
      structured::SchemaRules r = structured::json_schema_rules(f["parameters"].dump(), fmt::format("t{}-", i));
      rules += r.rules;
      args = r.start;
    }
    const std::string rule = fmt::format("tool-call-{}", i);
    rules += rule + " ::= " + call_object(name, args, o.format) + "\n";
    calls += (calls.empty() ? "" : " | ") + rule;
  }
  if (calls.empty()) fail("tools: no function named '{}'", o.only_name);
  std::string root;
  switch (o.format) {
    case ToolCallFormat::kHermes:
      rules += "tool-call ::= \"<tool_call>\\n\" (" + calls + ") \"\\n</tool_call>\"\n";
      root = o.parallel ? "tool-call (\"\\n\" tool-call)*" : "tool-call";
      break;
    case ToolCallFormat::kLlama3Json:
      rules += "tool-call ::= " + calls + "\n";
      root = std::string(o.lazy ? "\"<|python_tag|>\"? " : "") +
             (o.parallel ? "tool-call (\"; \" tool-call)*" : "tool-call");
      break;
    case ToolCallFormat::kMistral:
      rules += "tool-call ::= " + calls + "\n";
      root = std::string("\"[TOOL_CALLS]\" \" \"? \"[\" ") +
             (o.parallel ? "tool-call (\", \" tool-call)*" : "tool-call") + " \"]\"";
      break;
  }
  return "root ::= " + root + "\n" + rules + structured::json_primitives_gbnf(/*compact=*/true);
}

StructuredOutputSpec tool_calls_spec(const ojson& tools, const ToolGrammarOptions& o, const Tokenizer& tok) {
  StructuredOutputSpec spec = StructuredOutputSpec::grammar(tool_calls_gbnf(tools, o));
  spec.source = o.only_name.empty() ? "tools" : "tool_choice";
  if (!o.lazy) return spec;
  const std::string trigger = tool_call_trigger(o.format);
  spec.triggers.push_back(trigger);
  if (o.format == ToolCallFormat::kLlama3Json)  // a bare call opens the output: {"name" as the grammar writes it
    for (const char* t : {"^{\"name\"", "^{ \"name\""}) spec.triggers.push_back(t);
  const int32_t id = tok.vocab().find(trigger);
  if (id >= 0 && tok.is_special(id)) spec.trigger_tokens.emplace_back(id, trigger);
  return spec;
}

}  // namespace kvik::server
