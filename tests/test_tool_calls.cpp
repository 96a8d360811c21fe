// The server side of tool calling without a socket: tools / tool_choice / chat_template_kwargs validation
// (400 naming the field), the call grammars of each family (every grammar-accepted call parses back to the
// same call; arguments follow the schema), and the streamed chunks of parsed output in OpenAI's shape.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "chat/tool_parsers.h"
#include "core/error.h"
#include "engine/structured/grammar.h"
#include "engine/structured/grammar_dfa.h"
#include "server/chat_output.h"
#include "server/openai_responses.h"
#include "server/openai_schema.h"
#include "server/tool_grammar.h"
#include "synth_models.h"

using namespace kvik;
using namespace kvik::server;
using nlohmann::json;
using ojson = nlohmann::ordered_json;

namespace {

const json kTools = json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
    "properties": {"city": {"type": "string", "maxLength": 8}, "days": {"type": "integer", "minimum": 1, "maximum": 7}},
    "required": ["city", "days"]}}},
  {"type": "function", "function": {"name": "noop"}}
])");

json chat(json extra) {
  json body = {{"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}};
  for (auto& [k, v] : extra.items()) body[k] = v;
  return body;
}

std::string param_of(const json& body) {
  auto r = parse_generate_request(body, true);
  if (auto* e = std::get_if<ApiError>(&r)) return e->param;
  return "(accepted)";
}

}  // namespace

TEST(ToolRequests, FieldsAreParsed) {
  auto r = parse_generate_request(chat({{"tools", kTools}}), true);
  ASSERT_TRUE(std::holds_alternative<GenerateRequest>(r));
  EXPECT_EQ(std::get<GenerateRequest>(r).chat_request.tool_choice, ToolChoice::kAuto);  // the default with tools
  r = parse_generate_request(chat({{"tools", kTools},
                                   {"tool_choice", {{"type", "function"}, {"function", {{"name", "noop"}}}}},
                                   {"parallel_tool_calls", false},
                                   {"chat_template_kwargs", {{"enable_thinking", false}}}}),
                             true);
  ASSERT_TRUE(std::holds_alternative<GenerateRequest>(r));
  const ChatRequest& g = std::get<GenerateRequest>(r).chat_request;
  EXPECT_EQ(g.tool_choice, ToolChoice::kNamed);
  EXPECT_EQ(g.tool_choice_name, "noop");
  EXPECT_FALSE(g.parallel_tool_calls);
  EXPECT_EQ(g.template_kwargs["enable_thinking"], false);
  r = parse_generate_request(chat({{"tool_choice", "none"}}), true);
  EXPECT_EQ(std::get<GenerateRequest>(r).chat_request.tool_choice, ToolChoice::kNone);
  // An assistant turn with tool calls and a tool turn are valid messages.
  json body = chat({{"tools", kTools}});
  body["messages"].push_back({{"role", "assistant"},
                              {"content", nullptr},
                              {"tool_calls", json::array({{{"id", "call_1"},
                                                           {"type", "function"},
                                                           {"function", {{"name", "noop"}, {"arguments", "{}"}}}}})}});
  body["messages"].push_back({{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "ok"}});
  EXPECT_EQ(param_of(body), "(accepted)");
}

TEST(ToolRequests, MalformedDefinitionsAre400NamingTheField) {
  json dup = kTools;
  dup.push_back(kTools[0]);
  json bad_schema = kTools;
  bad_schema[0]["function"]["parameters"]["properties"]["days"]["multipleOf"] = 2;
  json bad_type = kTools;
  bad_type[1]["type"] = "retrieval";
  json bad_name = kTools;
  bad_name[1]["function"]["name"] = "no spaces";
  json bad_params = kTools;
  bad_params[1]["function"]["parameters"] = json::array();
  EXPECT_EQ(param_of(chat({{"tools", dup}})), "tools[2].function.name");
  EXPECT_EQ(param_of(chat({{"tools", bad_schema}})), "(accepted)");  // compiled where the grammar is built
  EXPECT_EQ(param_of(chat({{"tools", bad_type}})), "tools[1].type");
  EXPECT_EQ(param_of(chat({{"tools", bad_name}})), "tools[1].function.name");
  EXPECT_EQ(param_of(chat({{"tools", bad_params}})), "tools[1].function.parameters");
  EXPECT_EQ(param_of(chat({{"tools", "get_weather"}})), "tools");
  EXPECT_EQ(param_of(chat({{"tools", kTools}, {"tool_choice", "always"}})), "tool_choice");
  EXPECT_EQ(param_of(chat({{"tools", kTools}, {"tool_choice", {{"type", "function"}}}})), "tool_choice");
  EXPECT_EQ(param_of(chat({{"tools", kTools}, {"tool_choice", {{"type", 1}, {"function", {{"name", "noop"}}}}}})),
            "tool_choice");
  EXPECT_EQ(param_of(chat({{"tools", kTools}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "x"}}}}}})),
            "tool_choice");
  EXPECT_EQ(param_of(chat({{"tool_choice", "required"}})), "tool_choice");
  EXPECT_EQ(param_of(chat({{"tools", kTools}, {"parallel_tool_calls", 1}})), "parallel_tool_calls");
  EXPECT_EQ(param_of(chat({{"chat_template_kwargs", "x"}})), "chat_template_kwargs");
  json calls = chat({});
  calls["messages"].push_back({{"role", "assistant"}, {"tool_calls", {{{"function", {{"name", 3}}}}}}});
  EXPECT_EQ(param_of(calls), "messages[1].tool_calls[0].function.name");
}

namespace {

bool accepts(const std::string& gbnf, std::string_view text) {
  std::vector<std::string> bytes;
  for (int b = 0; b < 256; ++b) bytes.emplace_back(1, static_cast<char>(b));
  structured::GrammarDfa dfa(structured::parse_gbnf(gbnf), std::make_shared<structured::VocabTrie>(bytes));
  structured::DfaCursor c = dfa.start();
  return dfa.advance(c, text) && dfa.accepting(c);
}

}  // namespace

// Each family's grammar accepts the calls as the family writes them (and those parse back to the same call), and
// rejects arguments the schema does not allow and unknown functions.
TEST(ToolGrammar, FamiliesAcceptTheirCallSyntaxOnly) {
  const ojson tools = ojson::parse(kTools.dump());
  struct Case {
    ToolCallFormat format;
    std::string one, two, bad_args, unknown;
  };
  const std::string w = R"({"name": "get_weather", "ARGS": {"city": "Paris", "days": 3}})";
  const std::string n = R"({"name": "noop", "ARGS": {}})";
  auto with = [](std::string s, const char* key) { return s.replace(s.find("ARGS"), 4, key); };
  const std::string wa = with(w, "arguments"), na = with(n, "arguments"), wp = with(w, "parameters"),
                    np = with(n, "parameters");
  const std::vector<Case> cases = {
      {ToolCallFormat::kHermes, "<tool_call>\n" + wa + "\n</tool_call>",
       "<tool_call>\n" + wa + "\n</tool_call>\n<tool_call>\n" + na + "\n</tool_call>",
       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 9}}\n</tool_call>",
       "<tool_call>\n{\"name\": \"other\", \"arguments\": {}}\n</tool_call>"},
      {ToolCallFormat::kLlama3Json, wp, wp + "; " + np,
       "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris!Paris!\", \"days\": 1}}",
       "{\"name\": \"other\", \"parameters\": {}}"},
      {ToolCallFormat::kMistral, "[TOOL_CALLS][" + wa + "]", "[TOOL_CALLS][" + wa + ", " + na + "]",
       "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"days\": 1}}]",
       "[TOOL_CALLS][{\"name\": \"other\", \"arguments\": {}}]"},
  };
  for (const Case& c : cases) {
    const std::string many = tool_calls_gbnf(tools, {c.format, "", true, false});
    const std::string one = tool_calls_gbnf(tools, {c.format, "", false, false});
    const char* name = tool_call_format_name(c.format);
    EXPECT_TRUE(accepts(one, c.one)) << name;
    EXPECT_FALSE(accepts(one, c.two)) << name << ": parallel_tool_calls false allows one call";
    EXPECT_TRUE(accepts(many, c.two)) << name;
    EXPECT_FALSE(accepts(many, c.bad_args)) << name;
    EXPECT_FALSE(accepts(many, c.unknown)) << name;
    EXPECT_FALSE(accepts(tool_calls_gbnf(tools, {c.format, "noop", false, false}), c.one)) << name << ": named";
    const ParsedToolCalls p = parse_tool_calls(c.format, c.two);
    ASSERT_EQ(p.calls.size(), 2u) << name;
    EXPECT_EQ(p.calls[0].name, "get_weather");
    EXPECT_EQ(p.calls[0].arguments, R"({"city":"Paris","days":3})");
    EXPECT_EQ(p.calls[1].name, "noop");
    EXPECT_EQ(p.content, "");
  }
  // Lazy Llama 3 grammars take the python tag the trigger token feeds.
  EXPECT_TRUE(accepts(tool_calls_gbnf(tools, {ToolCallFormat::kLlama3Json, "", false, true}), "<|python_tag|>" + wp));
}

// The streamed chunks of a parsed delta: content first, then per call a chunk with index, id, type and name and one
// with the arguments; finish_reason on the last.
TEST(ToolChunks, CallsAreAHeaderChunkThenAnArgumentsChunk) {
  ResponseMeta m;
  m.chat = true;
  m.id = "chatcmpl-x";
  m.output.tools = ToolCallFormat::kHermes;
  ChatOutputParser parser(m.output);
  ChatDelta p = parser.push("Sure.<tool_call>{\"name\": \"noop\", \"arguments\": {\"a\": [1]}}</tool_call>");
  ChatDelta end = parser.finish();
  EXPECT_TRUE(end.calls.empty());
  ChoiceDelta d;
  d.finish_reason = tool_finish_reason("stop", parser.num_calls());
  EXPECT_EQ(*d.finish_reason, "tool_calls");
  const std::unique_ptr<Tokenizer> tok = test_models::stories_tokenizer("");
  const std::vector<json> chunks = parsed_chunks_json(m, *tok, d, p, true, false);
  ASSERT_EQ(chunks.size(), 3u);
  EXPECT_EQ(chunks[0]["choices"][0]["delta"]["content"], "Sure.");
  EXPECT_EQ(chunks[0]["choices"][0]["finish_reason"], nullptr);
  const json& head = chunks[1]["choices"][0]["delta"]["tool_calls"][0];
  EXPECT_EQ(head["index"], 0);
  EXPECT_EQ(head["type"], "function");
  EXPECT_EQ(head["function"]["name"], "noop");
  EXPECT_TRUE(head["id"].get<std::string>().rfind("call_", 0) == 0);
  const json& args = chunks[2]["choices"][0]["delta"]["tool_calls"][0];
  EXPECT_EQ(args["index"], 0);
  EXPECT_FALSE(args.contains("id"));
  EXPECT_EQ(args["function"]["arguments"], "{\"a\":[1]}");
  EXPECT_EQ(chunks[2]["choices"][0]["finish_reason"], "tool_calls");
}

// Under the tool grammar the arguments stream: the header chunk as soon as the name is read, then a chunk per
// piece of the arguments as it is generated, which add up to the whole response's arguments.
TEST(ToolChunks, GrammarCallsStreamTheirArguments) {
  ResponseMeta m;
  m.chat = true;
  m.output.tools = ToolCallFormat::kHermes;
  m.output.tool_grammar = true;
  const std::string text = "<tool_call>\n{\"name\":\"noop\",\"arguments\":{\"a\":[1,2],\"b\":\"x\"}}\n</tool_call>";
  const std::unique_ptr<Tokenizer> tok = test_models::stories_tokenizer("");
  ChatOutputParser parser(m.output);
  std::vector<json> chunks;
  for (size_t i = 0; i < text.size(); i += 4) {
    ChoiceDelta d;
    d.text = text.substr(i, 4);
    ChatDelta p = parser.push(d.text);
    if (i + 4 >= text.size()) {
      ChatDelta end = parser.finish();
      p.calls.insert(p.calls.end(), end.calls.begin(), end.calls.end());
      d.finish_reason = tool_finish_reason("stop", parser.num_calls());
    }
    for (json& c : parsed_chunks_json(m, *tok, d, p, i == 0, false)) chunks.push_back(std::move(c));
  }
  std::string args;
  int headers = 0, pieces = 0;
  for (const json& c : chunks) {
    const json& delta = c["choices"][0]["delta"];
    EXPECT_FALSE(delta.contains("content") && !delta["content"].get<std::string>().empty()) << c.dump();
    if (!delta.contains("tool_calls")) continue;
    const json& t = delta["tool_calls"][0];
    EXPECT_EQ(t["index"], 0);
    if (t.contains("id")) {
      ++headers;
      EXPECT_EQ(t["function"]["name"], "noop");
      EXPECT_TRUE(args.empty());
    } else {
      ++pieces;
      args += t["function"]["arguments"].get<std::string>();
    }
  }
  EXPECT_EQ(headers, 1);
  EXPECT_GT(pieces, 3);
  EXPECT_EQ(args, "{\"a\":[1,2],\"b\":\"x\"}");
  EXPECT_EQ(chunks.back()["choices"][0]["finish_reason"], "tool_calls");
}

// A schema that cannot be compiled (here: nested past the compiler's depth bound) gives its tool plain JSON-object
// arguments under "auto", with a warning naming the field and the bound; under "required" it is an error saying
// the same.
TEST(ToolGrammar, UncompilableSchemaFallsBackUnderAutoOnly) {
  ojson deep = ojson::object();
  for (int i = 0; i < 80; ++i) deep = ojson{{"type", "array"}, {"items", deep}};
  ojson tools = ojson::parse(kTools.dump());
  tools[0]["function"]["parameters"]["properties"]["deep"] = deep;
  std::vector<std::string> warnings;
  const std::string gbnf = tool_calls_gbnf(tools, {ToolCallFormat::kHermes, "", true, true}, &warnings);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("tools[0].function.parameters"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find("limit of 64"), std::string::npos) << warnings[0];
  EXPECT_TRUE(
      accepts(gbnf, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"anything\": [1]}}\n</tool_call>"));
  try {
    tool_calls_gbnf(tools, {ToolCallFormat::kHermes, "", true, false});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tools[0].function.parameters"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("limit of 64"), std::string::npos) << e.what();
  }
  // A named tool compiles only its own schema.
  EXPECT_NO_THROW(tool_calls_gbnf(tools, {ToolCallFormat::kHermes, "noop", false, false}));
}

// Each schema within its own bound, together over the parser's limits (text size, expanded elements): under "auto"
// the largest give up their grammars (warnings name them) until the rest parse; under "required" the error says by
// how much.
TEST(ToolGrammar, CombinedGrammarOverTheLimitFallsBackLargestFirst) {
  ojson tools = ojson::array();
  for (int t = 0; t < 5; ++t) {
    ojson props = ojson::object();
    for (int i = 0; i < 5 + t; ++i) props[fmt::format("p{}", i)] = {{"type", "string"}, {"maxLength", 100}};
    tools.push_back(
        {{"type", "function"},
         {"function", {{"name", fmt::format("f{}", t)}, {"parameters", {{"type", "object"}, {"properties", props}}}}}});
  }
  ToolGrammarOptions o{ToolCallFormat::kHermes, "", true, true};
  o.max_elems = 10000;  // less than the five together
  std::vector<std::string> warnings;
  const std::string gbnf = tool_calls_gbnf(tools, o, &warnings);
  ASSERT_FALSE(warnings.empty());
  EXPECT_LT(warnings.size(), 5u);
  EXPECT_NE(warnings[0].find("elements together, more than the limit of 10000"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find("'f4'"), std::string::npos) << warnings[0];  // the largest first
  EXPECT_LE(structured::parse_gbnf(gbnf).elems.size(), 12000u);
  o.max_elems = 0;
  o.max_text_bytes = 5000;
  warnings.clear();
  tool_calls_gbnf(tools, o, &warnings);
  ASSERT_FALSE(warnings.empty());
  EXPECT_NE(warnings[0].find("bytes together, more than the limit of 5000"), std::string::npos) << warnings[0];
  o.lazy = false;
  try {
    tool_calls_gbnf(tools, o);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("more than the limit of 5000"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("x; the largest, 'f4'"), std::string::npos) << e.what();
  }
}
