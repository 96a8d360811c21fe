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
};

std::vector<ToolArgs> tool_arguments(const ojson& tools, const ToolGrammarOptions& o,
                                     std::vector<std::string>* warnings) {
  std::vector<ToolArgs> out;
  for (size_t i = 0; i < tools.size(); ++i) {
    const ojson& f = tools[i]["function"];
    ToolArgs t{f["name"].get<std::string>(), "json-object", ""};
    if (!o.only_name.empty() && t.name != o.only_name) continue;
    if (f.contains("parameters") && f["parameters"].is_object()) {
      try {
        structured::SchemaRules r = structured::json_schema_rules(f["parameters"].dump(), fmt::format("t{}-", i));
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

// Under the parser's size limit: lazy grammars give up their largest schemas first; forced ones fail.
void fit_grammar(std::vector<ToolArgs>& args, const ToolGrammarOptions& o, std::vector<std::string>* warnings) {
  size_t total = 0;
  for (const ToolArgs& a : args) total += a.rules.size();
  // Room for the call syntax and the primitives.
  const size_t room = size_t{64} << 10;
  const size_t limit = structured::kMaxGrammarTextBytes > 2 * room ? structured::kMaxGrammarTextBytes - room
                                                                   : structured::kMaxGrammarTextBytes / 2;
  while (total > limit) {
    auto big = std::max_element(args.begin(), args.end(),
                                [](const ToolArgs& a, const ToolArgs& b) { return a.rules.size() < b.rules.size(); });
    if (!o.lazy)
      fail(
          "tools: the tools' argument grammars have {} bytes together, more than the limit of {} ({:.1f}x; the "
          "largest, '{}', has {})",
          total, limit, static_cast<double>(total) / limit, big->name, big->rules.size());
    if (warnings)
      warnings->push_back(fmt::format(
          "tools: the argument grammars have {} bytes together, more than the limit of {}; the largest, '{}' ({} "
          "bytes), takes any JSON object",
          total, limit, big->name, big->rules.size()));
    total -= big->rules.size();
    big->rules.clear();
    big->start = "json-object";
  }
}

}  // namespace

namespace {

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

// The parser's own limits (text size, elements after repetitions are expanded) are checked by parsing: under
// "auto" the largest remaining schema falls back and the grammar is parsed again.
std::string tool_calls_gbnf(const ojson& tools, const ToolGrammarOptions& o, std::vector<std::string>* warnings) {
  std::vector<ToolArgs> args = tool_arguments(tools, o, warnings);
  fit_grammar(args, o, warnings);
  for (;;) {
    std::string gbnf = assemble(args, o);
    try {
      structured::parse_gbnf(gbnf);
      return gbnf;
    } catch (const Error& e) {
      auto big = std::max_element(args.begin(), args.end(),
                                  [](const ToolArgs& a, const ToolArgs& b) { return a.rules.size() < b.rules.size(); });
      if (!o.lazy || big->rules.empty()) fail("tools: the call grammar cannot be compiled: {}", e.what());
      if (warnings)
        warnings->push_back(
            fmt::format("tools: the call grammar cannot be compiled ({}); the largest schema's tool, "
                        "'{}', takes any JSON object",
                        e.what(), big->name));
      big->rules.clear();
      big->start = "json-object";
    }
  }
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
