// The tool-call and reasoning parsers (chat/tool_parsers, chat/reasoning_parser) on hand-written model outputs:
// per family one call, several, calls after text, nested/unicode/escaped arguments, truncated and malformed
// markup (→ content), and every output streamed split at every byte position (two pieces) and byte by byte,
// which must reassemble to the whole-output result. Under the tool grammar, well-formed calls also parse to
// the same calls, their arguments the model's own text, and byte by byte the arguments arrive in many fragments
// before the call's markup is complete.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>

#include "chat/reasoning_parser.h"
#include "chat/tool_parsers.h"

namespace kvik {
namespace {

using nlohmann::json;

struct Expected {
  std::string content;
  std::vector<std::pair<std::string, json>> calls;  // name, arguments
};

std::string describe(const ParsedToolCalls& p) {
  std::string s = "content=" + json(p.content).dump() + " calls=[";
  for (const ToolCall& c : p.calls) s += c.name + ":" + c.arguments + " ";
  return s + "]";
}

// The pieces streamed through `p`. `args_fragments`: per call, how many pushes gave it arguments text.
ParsedToolCalls collect(ToolCallParser& p, const std::vector<std::string_view>& pieces,
                        std::vector<size_t>* args_fragments = nullptr) {
  ParsedToolCalls r;
  auto take = [&](ToolCallDelta d) {
    r.content += d.content;
    append_fragments(r.calls, d.fragments);
    if (args_fragments)
      for (const ToolCallFragment& f : d.fragments) {
        if (args_fragments->size() <= f.index) args_fragments->resize(f.index + 1);
        (*args_fragments)[f.index] += !f.arguments.empty();
      }
  };
  for (std::string_view piece : pieces) take(p.push(piece));
  take(p.finish());
  return r;
}

void expect_same_calls(const ParsedToolCalls& a, const ParsedToolCalls& b, const std::string& where) {
  EXPECT_EQ(a.content, b.content) << where;
  ASSERT_EQ(a.calls.size(), b.calls.size()) << where;
  for (size_t i = 0; i < a.calls.size(); ++i) {
    EXPECT_EQ(a.calls[i].name, b.calls[i].name) << where;
    EXPECT_EQ(a.calls[i].arguments, b.calls[i].arguments) << where;
  }
}

// The whole-output parse is `want`, and every streamed split gives the same. `grammar`: parsed as output of the
// tool grammar (calls commit at their header and stream their arguments).
void check(ToolCallFormat f, const std::string& text, const Expected& want, bool grammar = false) {
  const ParsedToolCalls whole = parse_tool_calls(f, text, grammar);
  EXPECT_EQ(whole.content, want.content) << describe(whole);
  ASSERT_EQ(whole.calls.size(), want.calls.size()) << describe(whole);
  for (size_t i = 0; i < want.calls.size(); ++i) {
    EXPECT_EQ(whole.calls[i].name, want.calls[i].first);
    EXPECT_EQ(json::parse(whole.calls[i].arguments), want.calls[i].second);
    EXPECT_FALSE(whole.calls[i].id.empty());
    if (f == ToolCallFormat::kMistral) EXPECT_EQ(whole.calls[i].id.size(), 9u);
    // Under the grammar the arguments are the model's text as written.
    if (grammar) EXPECT_NE(text.find(whole.calls[i].arguments), std::string::npos) << whole.calls[i].arguments;
  }
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    ToolCallParser p(f, grammar);
    std::string_view t = text;
    expect_same_calls(collect(p, {t.substr(0, cut), t.substr(cut)}), whole, "split at " + std::to_string(cut));
  }
  ToolCallParser p(f, grammar);
  std::vector<std::string_view> bytes;
  for (size_t i = 0; i < text.size(); ++i) bytes.push_back(std::string_view(text).substr(i, 1));
  std::vector<size_t> fragments;
  expect_same_calls(collect(p, bytes, &fragments), whole, "byte by byte");
  ASSERT_EQ(fragments.size(), whole.calls.size());
  for (size_t i = 0; i < whole.calls.size(); ++i) {
    if (!grammar) {
      EXPECT_EQ(fragments[i], 1u) << "without a grammar a call comes out whole";
      continue;
    }
    // One fragment per byte but inside a UTF-8 character: well before the call's markup is complete.
    size_t chars = 0;
    for (unsigned char c : whole.calls[i].arguments) chars += (c & 0xC0) != 0x80;
    EXPECT_EQ(fragments[i], chars) << whole.calls[i].arguments;
  }
}

// Well-formed calls: the same calls with and without the grammar.
void check_both(ToolCallFormat f, const std::string& text, const Expected& want) {
  check(f, text, want, false);
  check(f, text, want, true);
}

const json kWeather = {{"city", "Paris"}, {"unit", "celsius"}};
const json kNested = {{"q", {{"a", json::array({1, 2, {{"b", nullptr}}})}}},
                      {"s", "say \"hi\" \\ ok"},
                      {"u", "\xc3\xa9t\xc3\xa9 \xe2\x98\x83 \xf0\x9f\x98\x80"}};

TEST(ToolParsers, HermesOneCall) {
  check_both(ToolCallFormat::kHermes,
             "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}\n"
             "</tool_call>",
             {"", {{"get_weather", kWeather}}});
}

TEST(ToolParsers, HermesSeveralCallsAfterText) {
  check_both(ToolCallFormat::kHermes,
             "Let me check both.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n"
             "{\"name\": \"b\", \"arguments\": {\"x\": 1}}\n</tool_call>\n",
             {"Let me check both.", {{"a", json::object()}, {"b", {{"x", 1}}}}});
}

TEST(ToolParsers, HermesNestedUnicodeEscapedArguments) {
  const std::string args = kNested.dump();
  check_both(ToolCallFormat::kHermes, "<tool_call>{\"name\": \"f\", \"arguments\": " + args + "}</tool_call>",
             {"", {{"f", kNested}}});
}

TEST(ToolParsers, HermesKeepsArgumentKeyOrder) {
  const auto p = parse_tool_calls(ToolCallFormat::kHermes,
                                  "<tool_call>{\"name\": \"f\", \"arguments\": {\"z\": 1, \"a\": 2}}</tool_call>");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].arguments, "{\"z\":1,\"a\":2}");
}

TEST(ToolParsers, HermesTruncatedAndMalformedStayContent) {
  const std::string truncated = "Sure.<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": ";
  check(ToolCallFormat::kHermes, truncated, {truncated, {}});
  const std::string bad_json = "<tool_call>{\"name\": \"f\", \"arguments\": {x: 1}}</tool_call> after";
  check(ToolCallFormat::kHermes, bad_json, {bad_json, {}});
  const std::string no_name = "<tool_call>{\"arguments\": {}}</tool_call>";
  check(ToolCallFormat::kHermes, no_name, {no_name, {}});
  // A malformed call beside a good one: the good one is a call, the bad one content.
  check(ToolCallFormat::kHermes,
        "<tool_call>{\"name\": 1}</tool_call><tool_call>{\"name\": \"g\", \"arguments\": {\"k\": [true]}}</tool_call>",
        {"<tool_call>{\"name\": 1}</tool_call>", {{"g", {{"k", {true}}}}}});
  check(ToolCallFormat::kHermes, "a < b and <tool but no call", {"a < b and <tool but no call", {}});
  check(ToolCallFormat::kHermes, "plain text\n\n", {"plain text\n\n", {}});
}

TEST(ToolParsers, Llama3OneCallWithAndWithoutPythonTag) {
  check_both(ToolCallFormat::kLlama3Json,
             "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"unit\": "
             "\"celsius\"}}",
             {"", {{"get_weather", kWeather}}});
  check_both(ToolCallFormat::kLlama3Json, "<|python_tag|>{\"name\": \"f\", \"parameters\": " + kNested.dump() + "}",
             {"", {{"f", kNested}}});
}

TEST(ToolParsers, Llama3SeveralCallsSeparatedBySemicolons) {
  check_both(
      ToolCallFormat::kLlama3Json,
      " {\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": {\"x\": \"}\"}};{\"name\": \"c\", "
      "\"arguments\": {}}\n",
      {"", {{"a", json::object()}, {"b", {{"x", "}"}}}, {"c", json::object()}}});
}

TEST(ToolParsers, Llama3TextAndMalformedStayContent) {
  check(ToolCallFormat::kLlama3Json, "The answer is {\"name\": \"f\"}", {"The answer is {\"name\": \"f\"}", {}});
  check(ToolCallFormat::kLlama3Json,
        "{\"name\": \"f\", \"parameters\": {\"x\": ", {"{\"name\": \"f\", \"parameters\": {\"x\": ", {}});
  check(ToolCallFormat::kLlama3Json, "{\"city\": \"Paris\"}", {"{\"city\": \"Paris\"}", {}});
  check(ToolCallFormat::kLlama3Json, "<|python_tag|>print(1)", {"<|python_tag|>print(1)", {}});
  // After a good call, text that is not another call is content.
  check(ToolCallFormat::kLlama3Json, "{\"name\": \"a\", \"parameters\": {}}; oops",
        {"; oops", {{"a", json::object()}}});
}

TEST(ToolParsers, MistralV3AndNemoForms) {
  check_both(ToolCallFormat::kMistral,
             "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}]",
             {"", {{"get_weather", kWeather}}});
  const auto nemo = parse_tool_calls(
      ToolCallFormat::kMistral,
      "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {}, \"id\": \"abcDEF123\"}, {\"name\": \"b\", \"arguments\": "
      "{\"s\": \"[x]\"}, \"id\": \"bad\"}]");
  ASSERT_EQ(nemo.calls.size(), 2u);
  EXPECT_EQ(nemo.calls[0].id, "abcDEF123");  // the model's own id
  EXPECT_EQ(nemo.calls[1].id.size(), 9u);    // a fresh one for an invalid id
  EXPECT_NE(nemo.calls[1].id, "bad");
  check_both(ToolCallFormat::kMistral,
             "Calling.[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {}}, {\"name\": \"f\", \"arguments\": " +
                 kNested.dump() + "}]",
             {"Calling.", {{"a", json::object()}, {"f", kNested}}});
}

TEST(ToolParsers, MistralMalformedStaysContent) {
  for (const std::string text : {"[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {}", "[TOOL_CALLS] hello",
                                 "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": 3}]", "[TOOL_CALLS][]", "[TOOL"})
    check(ToolCallFormat::kMistral, text, {text, {}});
}

// Under the grammar a call is committed at its header: cut short (max_tokens, a stop string) it stays a call with
// the arguments written so far, and the rest of its markup is no content; text that never reaches a header is
// content as without the grammar.
TEST(ToolParsers, GrammarCallsCommitAtTheirHeader) {
  const std::string head = "Sure.<tool_call>\n{\"name\": \"f\", \"arguments\": ";
  for (const std::string& text : {head + "{\"x\": [1, ", head + "{\"x\": \"caf\xc3"}) {
    const ParsedToolCalls p = parse_tool_calls(ToolCallFormat::kHermes, text, true);
    EXPECT_EQ(p.content, "Sure.");
    ASSERT_EQ(p.calls.size(), 1u);
    EXPECT_EQ(p.calls[0].name, "f");
    EXPECT_EQ(p.calls[0].arguments, text.substr(head.size()));
    for (size_t cut = 0; cut <= text.size(); ++cut) {
      ToolCallParser s(ToolCallFormat::kHermes, true);
      expect_same_calls(collect(s, {std::string_view(text).substr(0, cut), std::string_view(text).substr(cut)}), p,
                        "split at " + std::to_string(cut));
    }
  }
  // The closing markup cut short is no content either; after the closing tag text is content again.
  check(ToolCallFormat::kHermes, "<tool_call>{\"name\": \"f\", \"arguments\": {}}\n</tool",
        {"", {{"f", json::object()}}}, true);
  check(ToolCallFormat::kHermes,
        "<tool_call>{\"name\": \"f\", \"arguments\": {\"s\": \"</tool_call>\"}}</tool_call> ok",
        {"ok", {{"f", {{"s", "</tool_call>"}}}}}, true);
  // No header: content, as without the grammar.
  for (const std::string text : {"<tool_call>{\"name\": 1}</tool_call>", "<tool_call>{\"arguments\": {}}</tool_call>",
                                 "Sure.<tool_call>\n{\"name\": \"f\", \"argu"})
    check(ToolCallFormat::kHermes, text, {text, {}}, true);
  // A header not in the grammar's shape was not generated under it: the call is parsed whole (and a broken one
  // is content).
  const std::string loose = "<tool_call>{\n  \"name\": \"f\",\n  \"arguments\": {\"x\": 1}}</tool_call>";
  check(ToolCallFormat::kHermes, loose, {"", {{"f", {{"x", 1}}}}});
  ToolCallParser whole(ToolCallFormat::kHermes, true);
  std::vector<std::string_view> bytes;
  for (size_t i = 0; i < loose.size(); ++i) bytes.push_back(std::string_view(loose).substr(i, 1));
  std::vector<size_t> fragments;
  expect_same_calls(collect(whole, bytes, &fragments), parse_tool_calls(ToolCallFormat::kHermes, loose), loose);
  EXPECT_EQ(fragments, std::vector<size_t>{1});
  const std::string broken = "<tool_call>{\"name\":  \"f\", \"arguments\": {\"x\": }}</tool_call>";
  check(ToolCallFormat::kHermes, broken, {broken, {}}, true);
  // Llama 3: "parameters"; Mistral: the model's id after the arguments is not used (the header went out first).
  check(ToolCallFormat::kLlama3Json, "{\"name\": \"a\", \"parameters\": {\"x\": \"}\"}}; oops",
        {"; oops", {{"a", {{"x", "}"}}}}}, true);
  const ParsedToolCalls m = parse_tool_calls(ToolCallFormat::kMistral,
                                             "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {}, \"id\": "
                                             "\"abcDEF123\"}, {\"name\": \"b\", \"arguments\": {}}] x",
                                             true);
  EXPECT_EQ(m.content, "x");
  ASSERT_EQ(m.calls.size(), 2u);
  EXPECT_EQ(m.calls[0].id.size(), 9u);
  EXPECT_EQ(m.calls[1].name, "b");
}

TEST(ToolParsers, DetectsTheFormatFromTemplateMarkers) {
  EXPECT_EQ(detect_tool_call_format("{{- '<tool_call>\\n' }}"), ToolCallFormat::kHermes);
  EXPECT_EQ(detect_tool_call_format("{{ '[TOOL_CALLS]' }}"), ToolCallFormat::kMistral);
  EXPECT_EQ(detect_tool_call_format("{{- '<|python_tag|>' }}"), ToolCallFormat::kLlama3Json);
  EXPECT_EQ(detect_tool_call_format("{{ messages[0].content }}"), std::nullopt);
  EXPECT_EQ(tool_call_format_from_name("llama3_json"), ToolCallFormat::kLlama3Json);
  EXPECT_EQ(tool_call_format_from_name("pythonic"), std::nullopt);
}

// Random soups of markup fragments: no parser crashes, any random split streams to the whole result, and an
// output without calls is its own content, byte for byte (nothing is lost or invented).
TEST(ToolParsers, RandomMarkupStreamsLikeTheWholeAndLosesNothing) {
  const std::vector<std::string> pieces = {"<tool_call>",
                                           "</tool_call>",
                                           "{",
                                           "}",
                                           "\"name\"",
                                           ": ",
                                           "\"f\"",
                                           ", ",
                                           "\"arguments\"",
                                           "\"parameters\"",
                                           "[TOOL_CALLS]",
                                           "[",
                                           "]",
                                           ";",
                                           " ",
                                           "\n",
                                           "<|python_tag|>",
                                           "\\",
                                           "\"",
                                           "x",
                                           "<think>",
                                           "</think>",
                                           "\xc3\xa9",
                                           "<tool",
                                           "[TOOL",
                                           "{}"};
  std::mt19937 rng(16);
  for (ToolCallFormat f : {ToolCallFormat::kHermes, ToolCallFormat::kLlama3Json, ToolCallFormat::kMistral}) {
    int with_calls = 0;
    for (int i = 0; i < 3000; ++i) {
      std::string text;
      const int n = 1 + static_cast<int>(rng() % 24);
      for (int k = 0; k < n; ++k) text += pieces[rng() % pieces.size()];
      if (i % 3 == 0) {  // a valid call at the end (Llama 3: the start), so calls are found too (unless an unclosed
        // call before it swallows it)
        const std::string call = f == ToolCallFormat::kHermes
                                     ? "<tool_call>{\"name\": \"g\", \"arguments\": {}}</tool_call>"
                                 : f == ToolCallFormat::kMistral ? "[TOOL_CALLS][{\"name\": \"g\", \"arguments\": {}}]"
                                                                 : "{\"name\": \"g\", \"parameters\": {}}";
        text = f == ToolCallFormat::kLlama3Json ? call + text : text + call;
      }
      std::vector<std::string_view> parts;
      for (size_t at = 0; at < text.size();) {
        const size_t len = std::min(text.size() - at, static_cast<size_t>(1 + rng() % 7));
        parts.push_back(std::string_view(text).substr(at, len));
        at += len;
      }
      for (bool grammar : {false, true}) {
        const ParsedToolCalls whole = parse_tool_calls(f, text, grammar);
        with_calls += !grammar && !whole.calls.empty();
        if (whole.calls.empty()) EXPECT_EQ(whole.content, text) << tool_call_format_name(f);
        ToolCallParser p(f, grammar);
        expect_same_calls(collect(p, parts), whole, text + (grammar ? " (grammar)" : ""));
      }
    }
    EXPECT_GT(with_calls, 500) << tool_call_format_name(f);
  }
}

void check_reasoning(ReasoningFormat f, const std::string& text, const std::string& reasoning,
                     const std::string& content) {
  const ReasoningDelta whole = split_reasoning(f, text);
  EXPECT_EQ(whole.reasoning, reasoning) << text;
  EXPECT_EQ(whole.content, content) << text;
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    ReasoningParser p(f);
    ReasoningDelta a = p.push(std::string_view(text).substr(0, cut));
    ReasoningDelta b = p.push(std::string_view(text).substr(cut));
    ReasoningDelta c = p.finish();
    EXPECT_EQ(a.reasoning + b.reasoning + c.reasoning, reasoning) << "split at " << cut;
    EXPECT_EQ(a.content + b.content + c.content, content) << "split at " << cut;
  }
}

TEST(ReasoningParsers, Qwen3SplitsThinkBlock) {
  check_reasoning(ReasoningFormat::kQwen3, "<think>\nLet me think.\n</think>\n\nThe answer is 4.", "\nLet me think.\n",
                  "The answer is 4.");
  check_reasoning(ReasoningFormat::kQwen3, "No thinking here.", "", "No thinking here.");
  check_reasoning(ReasoningFormat::kQwen3, "<think>cut off", "cut off", "");
  check_reasoning(ReasoningFormat::kQwen3, "<thin", "", "<thin");
}

TEST(ReasoningParsers, DeepSeekR1ReasonsUntilTheClosingTag) {
  check_reasoning(ReasoningFormat::kDeepSeekR1, "hmm </think> ok", "hmm ", "ok");
  check_reasoning(ReasoningFormat::kDeepSeekR1, "<think>a</think>b", "a", "b");
  check_reasoning(ReasoningFormat::kDeepSeekR1, "never closed", "never closed", "");
}

TEST(ReasoningParsers, ToolCallAfterThinkingIsParsed) {
  const std::string out =
      "<think>I should call the tool.</think>\n\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n"
      "</tool_call>";
  const ReasoningDelta r = split_reasoning(ReasoningFormat::kQwen3, out);
  EXPECT_EQ(r.reasoning, "I should call the tool.");
  const ParsedToolCalls p = parse_tool_calls(ToolCallFormat::kHermes, r.content);
  EXPECT_EQ(p.content, "");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].arguments, "{\"a\":1}");
}

}  // namespace
}  // namespace kvik
