#include "server/tool_grammar.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"
#include "core/log.h"
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

// Each callable tool's arguments: its schema's rules, or json-object when it cannot be compiled (lazy only).
struct ToolArgs {
  std::string name, start, rules;
  size_t elems = 0;  // the rules' elements once the parser expands repetitions
};

// Each callable tool's arguments: its schema's rules (parsed alone, to measure them), or json-object when they
// cannot be compiled (lazy only).
std::vector<ToolArgs> tool_arguments(const ojson& tools, const ToolGrammarOptions& o,
                                     std::vector<std::string>* warnings) {
  std::vector<ToolArgs> out;
  for (size_t i = 0; i < tools.size(); ++i) {
    const ojson& f = tools[i]["function"];
    ToolArgs t{f["name"].get<std::string>(), "json-object", "", 0};
    if (!o.only_name.empty() && t.name != o.only_name) continue;
    if (f.contains("parameters") && f["parameters"].is_object()) {
      try {
        structured::SchemaRules r = structured::json_schema_rules(f["parameters"].dump(), fmt::format("t{}-", i));
        t.elems =
            structured::parse_gbnf("root ::= " + r.start + "\n" + r.rules + structured::json_primitives_gbnf(true))
                .elems.size();
        t.start = std::move(r.start);
        t.rules = std::move(r.rules);
      } catch (const Error& e) {
        const std::string what = fmt::format("tools[{}].function.parameters: {}", i, e.what());
        if (!o.lazy) throw Error(what);
        if (warnings) warnings->push_back(what + "; the tool's arguments are any JSON object");
      }
    }
    out.push_back(std::move(t));
  }
  if (out.empty()) fail("tools: no function named '{}'", o.only_name);
  return out;
}

// Under the parser's limits on text and expanded elements, with room for the call syntax and the primitives: lazy
// grammars give up their largest schemas first; forced ones fail saying by how much.
void fit_grammar(std::vector<ToolArgs>& args, const ToolGrammarOptions& o, std::vector<std::string>* warnings) {
  const size_t text_limit =
      o.max_text_bytes ? o.max_text_bytes : structured::kMaxGrammarTextBytes - structured::kMaxGrammarTextBytes / 16;
  const size_t elem_limit =
      o.max_elems ? o.max_elems : structured::kMaxGrammarElems - structured::kMaxGrammarElems / 16;
  for (;;) {
    size_t text = 0, elems = 0;
    for (const ToolArgs& a : args) text += a.rules.size(), elems += a.elems;
    if (text <= text_limit && elems <= elem_limit) return;
    const bool by_text = static_cast<double>(text) / text_limit >= static_cast<double>(elems) / elem_limit;
    auto big = std::max_element(args.begin(), args.end(), [&](const ToolArgs& a, const ToolArgs& b) {
      return by_text ? a.rules.size() < b.rules.size() : a.elems < b.elems;
    });
    const std::string what =
        by_text ? fmt::format("the tools' argument grammars have {} bytes together, more than the limit of {} ({:.1f}x",
                              text, text_limit, static_cast<double>(text) / text_limit)
                : fmt::format(
                      "the tools' argument grammars expand to {} elements together, more than the limit of {} "
                      "({:.1f}x",
                      elems, elem_limit, static_cast<double>(elems) / elem_limit);
    if (!o.lazy) fail("tools: {}; the largest, '{}')", what, big->name);
    if (warnings)
      warnings->push_back(fmt::format("tools: {}); the largest, '{}', takes any JSON object", what, big->name));
    big->rules.clear();
    big->start = "json-object";
    big->elems = 0;
  }
}

std::string assemble(const std::vector<ToolArgs>& args, const ToolGrammarOptions& o) {
  std::string rules, calls;
  for (size_t i = 0; i < args.size(); ++i) {
    rules += args[i].rules;
    const std::string rule = fmt::format("tool-call-{}", i);
    rules += rule + " ::= " + call_object(args[i].name, args[i].start, o.format) + "\n";
    calls += (calls.empty() ? "" : " | ") + rule;
  }
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

}  // namespace

std::string tool_calls_gbnf(const ojson& tools, const ToolGrammarOptions& o, std::vector<std::string>* warnings) {
  std::vector<ToolArgs> args = tool_arguments(tools, o, warnings);
  fit_grammar(args, o, warnings);
  return assemble(args, o);
}

StructuredOutputSpec tool_calls_spec(const ojson& tools, const ToolGrammarOptions& o, const Tokenizer& tok) {
  std::vector<std::string> warnings;
  StructuredOutputSpec spec = StructuredOutputSpec::grammar(tool_calls_gbnf(tools, o, &warnings));
  for (const std::string& w : warnings) log_warn("{}", w);
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
