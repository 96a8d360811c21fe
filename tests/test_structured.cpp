// Structured output: GBNF parsing and recognition, regex and JSON Schema translation, token masks against
// a brute-force check of every token.
#include <gtest/gtest.h>

#include <limits>
#include <random>

#include "core/error.h"
#include "engine/structured/grammar.h"
#include "engine/structured/grammar_dfa.h"
#include "engine/structured/json_schema_to_gbnf.h"
#include "engine/structured/regex_to_gbnf.h"
#include "engine/structured/structured_output.h"
#include "engine/structured/vocab_trie.h"

using namespace kvik;
using namespace kvik::structured;

namespace {

std::shared_ptr<const VocabTrie> byte_trie() {
  std::vector<std::string> v;
  for (int b = 0; b < 256; ++b) v.emplace_back(1, static_cast<char>(b));
  return std::make_shared<VocabTrie>(std::move(v));
}

// Whole-string match of a GBNF grammar.
bool matches_gbnf(const std::string& gbnf, std::string_view text) {
  GrammarDfa dfa(parse_gbnf(gbnf), byte_trie());
  DfaCursor c = dfa.start();
  return dfa.advance(c, text) && dfa.accepting(c);
}
bool matches_regex(const std::string& re, std::string_view text) {
  return matches_gbnf("root ::= " + regex_to_gbnf(re) + "\n", text);
}
bool matches_schema(const std::string& schema, std::string_view text) {
  return matches_gbnf(json_schema_to_gbnf(schema), text);
}

const char* kArithmetic = R"GBNF(# arithmetic with precedence
root   ::= expr
expr   ::= term (("+" | "-") term)*
term   ::= factor (("*" | "/") factor)*
factor ::= number | "(" expr ")" | "-" factor
number ::= [0-9]+ ("." [0-9]+)?
)GBNF";

// llama.cpp's grammars/json.gbnf.
const char* kJsonGbnf = R"GBNF(root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws

object ::=
  "{" ws (
            string ":" ws value
    ("," ws string ":" ws value)*
  )? "}" ws

array  ::=
  "[" ws (
            value
    ("," ws value)*
  )? "]" ws

string ::=
  "\"" (
    [^"\\\x7F\x00-\x1F] |
    "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4}) # escapes
  )* "\"" ws

number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws

# Optional space: by convention, applied in this grammar after literal chars when allowed
ws ::= | " " | "\n" [ \t]{0,20}
)GBNF";

}  // namespace

TEST(Gbnf, ArithmeticGrammarAcceptsExpressionsOnly) {
  for (const char* ok : {"1", "1+2*3", "(1+2)*-3.5", "((7))/2-1"}) EXPECT_TRUE(matches_gbnf(kArithmetic, ok)) << ok;
  for (const char* bad : {"", "1+", "(1", "1..2", "a", "1 + 2"}) EXPECT_FALSE(matches_gbnf(kArithmetic, bad)) << bad;
}

TEST(Gbnf, LlamaCppJsonGrammarWorks) {
  EXPECT_TRUE(matches_gbnf(kJsonGbnf, R"({"a": [1, 2.5e3, "x\n", {"b": null}], "c": true})"));
  EXPECT_TRUE(matches_gbnf(kJsonGbnf, "{}"));
  EXPECT_TRUE(matches_gbnf(kJsonGbnf, "{\"é\": \"日本\"}"));
  EXPECT_FALSE(matches_gbnf(kJsonGbnf, R"({"a": })"));
  EXPECT_FALSE(matches_gbnf(kJsonGbnf, "[1]"));
}

TEST(Gbnf, ClassesRepetitionsAndEscapes) {
  EXPECT_TRUE(matches_gbnf("root ::= [^a-c]{2,3}\n", "xé"));
  EXPECT_FALSE(matches_gbnf("root ::= [^a-c]{2,3}\n", "xa"));
  EXPECT_FALSE(matches_gbnf("root ::= [^a-c]{2,3}\n", "xyzw"));
  EXPECT_TRUE(matches_gbnf("root ::= \"\\x41\\u00e9\\t\" .\n", "Aé\t日"));
  EXPECT_TRUE(matches_gbnf("root ::= ( \"a\"\n | \"b\" )+ # comment\n", "abba"));
  EXPECT_TRUE(matches_gbnf("root ::= x?\nx ::= \"x\"\n", ""));
  EXPECT_TRUE(matches_gbnf("root ::= [а-я]+\n", "привет"));
  EXPECT_FALSE(matches_gbnf("root ::= [а-я]+\n", "hello"));
}

TEST(Gbnf, ErrorsNameTheProblem) {
  auto err = [](const std::string& g) {
    try {
      parse_gbnf(g);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };

  EXPECT_NE(err("root ::= foo\n").find("'foo' is used but not defined"), std::string::npos);
  EXPECT_NE(err("start ::= \"a\"\n").find("no 'root'"), std::string::npos);
  EXPECT_NE(err("root ::= root \"a\" | \"b\"\n").find("left-recursive"), std::string::npos);
  EXPECT_NE(err("root ::= x \"a\"\nx ::= \"\" | root\n").find("left-recursive"), std::string::npos);
  EXPECT_NE(err("root ::= \"a\n").find("line 1"), std::string::npos);
  EXPECT_NE(err("root ::= [a-\n").find("unterminated"), std::string::npos);
  EXPECT_NE(err("root ::= \"a\"{3,1}\n").find("n < m"), std::string::npos);
  EXPECT_NE(err("root = \"a\"\n").find("'::='"), std::string::npos);
}

TEST(Regex, DatesEmailsAndClasses) {
  const std::string date = R"(\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01]))";
  EXPECT_TRUE(matches_regex(date, "2024-02-29"));
  EXPECT_FALSE(matches_regex(date, "2024-13-01"));
  EXPECT_FALSE(matches_regex(date, "2024-1-01"));
  const std::string email = R"(^[a-zA-Z0-9._%+-]+@[a-zA-Z0-9.-]+\.[a-zA-Z]{2,}$)";
  EXPECT_TRUE(matches_regex(email, "john.doe+x@mail.example.org"));
  EXPECT_FALSE(matches_regex(email, "john@localhost"));
  EXPECT_TRUE(matches_regex("(?:ab|c)*d?", "ababcd"));
  EXPECT_TRUE(matches_regex("[^\\d\\s]+\\.", "abc."));
  EXPECT_FALSE(matches_regex("[^\\d\\s]+\\.", "a1."));
  EXPECT_TRUE(matches_regex("a.c", "a日c"));
  EXPECT_FALSE(matches_regex("a.c", "a\nc"));
  EXPECT_TRUE(matches_regex("x{2}y{1,}z{0,1}", "xxyyy"));
  EXPECT_THROW(regex_to_gbnf("(a)\\1"), Error);
  EXPECT_THROW(regex_to_gbnf("a(?=b)"), Error);
  EXPECT_THROW(regex_to_gbnf("a(b"), Error);
}

TEST(JsonSchema, PropertiesRequiredAndOptionalInOrder) {
  const std::string s = R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string","maxLength":3},
      "c":{"type":"boolean"}},"required":["b"]})";
  EXPECT_TRUE(matches_schema(s, R"({"b":"xyz"})"));
  EXPECT_TRUE(matches_schema(s, R"({"a": -12, "b": "", "c": true})"));
  EXPECT_TRUE(matches_schema(s, R"({ "b":"x" ,"c":false })"));
  EXPECT_FALSE(matches_schema(s, R"({"a":1})"));
  EXPECT_FALSE(matches_schema(s, R"({"b":"xyzw"})"));
  EXPECT_FALSE(matches_schema(s, R"({"b":"x","a":1})"));
  EXPECT_FALSE(matches_schema(s, R"({"b":"x","d":1})"));
  EXPECT_FALSE(matches_schema(s, R"({,"b":"x"})"));
}

TEST(JsonSchema, ArraysEnumsConstAnyOfRefsAndPatterns) {
  EXPECT_TRUE(
      matches_schema(R"({"type":"array","items":{"enum":["x",1,null]},"minItems":1,"maxItems":2})", R"(["x", null])"));
  EXPECT_FALSE(matches_schema(R"({"type":"array","items":{"enum":["x",1,null]},"minItems":1,"maxItems":2})", "[]"));
  EXPECT_FALSE(
      matches_schema(R"({"type":"array","items":{"enum":["x",1,null]},"minItems":1,"maxItems":2})", "[1,1,1]"));
  EXPECT_TRUE(matches_schema(R"({"const":{"k":[1,2]}})", R"({"k":[1,2]})"));
  EXPECT_TRUE(matches_schema(R"({"anyOf":[{"type":"number"},{"type":"null"}]})", "-1.5e3"));
  EXPECT_TRUE(matches_schema(R"({"type":["string","null"]})", "null"));
  EXPECT_TRUE(matches_schema(
      R"({"$defs":{"n":{"type":"object","properties":{"next":{"anyOf":[{"$ref":"#/$defs/n"},{"type":"null"}]}},
      "required":["next"]}},"$ref":"#/$defs/n"})",
      R"({"next":{"next":null}})"));
  const std::string pat = R"({"type":"string","pattern":"^\\d{3}-[a-z\"]+$"})";
  EXPECT_TRUE(matches_schema(pat, R"("123-ab\"c")"));
  EXPECT_FALSE(matches_schema(pat, R"("123-ab"c")"));
  EXPECT_TRUE(matches_gbnf(json_object_gbnf(), R"({"a":{"b":[1,{}]}})"));
  EXPECT_FALSE(matches_gbnf(json_object_gbnf(), "[1]"));
}

// Keywords a grammar cannot express are accepted, reported by place, and loosen the grammar (every valid instance
// still matches); only a schema that is not a schema is an error, naming where.
TEST(JsonSchema, UnenforcedKeywordsAreAcceptedAndReported) {
  const std::string s = R"({"type":"object","properties":{"age":{"type":"integer","multipleOf":2},
      "tags":{"type":"array","items":{"type":"string"},"uniqueItems":true},"x":{"not":{"type":"null"}},
      "y":{"if":{"minimum":0},"then":{"maximum":9},"contentMediaType":"text/plain","x-vendor":1,"whatever":2}},
      "required":["age"]})";
  const SchemaRules r = json_schema_rules(s, "");
  std::string all;
  for (const std::string& n : r.not_enforced) all += n + "\n";
  for (const char* k : {"/properties/age: 'multipleOf'", "/properties/tags: 'uniqueItems'", "/properties/x: 'not'",
                        "'if'", "'then'", "'contentMediaType'", "'whatever'"})
    EXPECT_NE(all.find(k), std::string::npos) << k << " in\n" << all;
  EXPECT_EQ(all.find("x-vendor"), std::string::npos) << all;
  EXPECT_TRUE(matches_schema(s, R"({"age":3,"tags":["a","a"],"x":1,"y":"z"})"));
  EXPECT_FALSE(matches_schema(s, R"({"tags":[]})"));
  try {
    json_schema_to_gbnf(R"({"type":"object","properties":{"age":{"type":"integr"}}})");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/properties/age"), std::string::npos) << e.what();
  }
  EXPECT_THROW(json_schema_to_gbnf("{not json"), Error);
  EXPECT_THROW(json_schema_to_gbnf("[1]"), Error);
  EXPECT_THROW(json_schema_to_gbnf("false"), Error);  // no value at all satisfies it
  EXPECT_TRUE(matches_schema(R"({"required":["x"]})", R"({"x":[1]})"));
  EXPECT_TRUE(matches_schema(R"({"$ref":"http://example.com/s.json"})", "12"));
}

// minimum/maximum (inclusive and exclusive, draft 4 booleans too) on integers: exactly the integers in range,
// checked against every integer in a window around the bounds; canonical spelling only.
TEST(JsonSchema, IntegerBoundsAcceptExactlyTheRange) {
  struct Case {
    const char* schema;
    int64_t lo, hi;  // inclusive; INT64_MIN/MAX = open
  };
  const int64_t kMin = std::numeric_limits<int64_t>::min(), kMax = std::numeric_limits<int64_t>::max();
  const Case cases[] = {
      {R"({"type":"integer","minimum":0})", 0, kMax},
      {R"({"type":"integer","minimum":-17,"maximum":250})", -17, 250},
      {R"({"type":"integer","exclusiveMinimum":-3,"exclusiveMaximum":1000})", -2, 999},
      {R"({"type":"integer","minimum":5,"exclusiveMinimum":true,"maximum":99})", 6, 99},
      {R"({"type":"integer","maximum":-40})", kMin, -40},
      {R"({"type":"integer","minimum":1.5,"maximum":12.5})", 2, 12},
      {R"({"type":"integer","minimum":7,"maximum":7})", 7, 7},
      {R"({"type":"integer","minimum":99,"maximum":1001})", 99, 1001},
  };
  for (const Case& c : cases) {
    const std::string gbnf = json_schema_to_gbnf(c.schema);
    GrammarDfa dfa(parse_gbnf(gbnf), byte_trie());
    for (int64_t v = -1200; v <= 1200; ++v) {
      DfaCursor cur = dfa.start();
      const bool ok = dfa.advance(cur, std::to_string(v)) && dfa.accepting(cur);
      EXPECT_EQ(ok, v >= c.lo && v <= c.hi) << c.schema << " value " << v;
    }
    for (const char* bad : {"-0", "007", "1.5", "1e3", "+1"}) EXPECT_FALSE(matches_gbnf(gbnf, bad)) << c.schema << bad;
  }
  EXPECT_TRUE(matches_schema(R"({"type":"integer","minimum":0})", "1234567890123456"));
  EXPECT_THROW(json_schema_to_gbnf(R"({"type":"integer","minimum":5,"maximum":4})"), Error);
  EXPECT_THROW(json_schema_to_gbnf(R"({"type":"integer","minimum":"0"})"), Error);
}

// Numbers with bounds: every accepted text is a number inside the bounds (integers, and fractions whose unit
// interval lies inside); the integers of the range are all accepted.
TEST(JsonSchema, NumberBoundsAcceptOnlyValuesInRange) {
  struct Case {
    const char* schema;
    double lo, hi;
    bool lo_open, hi_open;
  };
  const Case cases[] = {
      {R"({"type":"number","minimum":0,"maximum":1})", 0, 1, false, false},
      {R"({"type":"number","exclusiveMinimum":-2.5,"exclusiveMaximum":3})", -2.5, 3, true, true},
      {R"({"type":"number","minimum":-10})", -10, 1e300, false, false},
      {R"({"type":"number","exclusiveMaximum":0})", -1e300, 0, false, true},
  };
  std::vector<std::string> texts;
  for (int i = -120; i <= 120; ++i) {
    texts.push_back(std::to_string(i));
    for (const char* f : {".5", ".25", ".0", ".05", ".999"}) {
      texts.push_back(std::to_string(i) + f);
      if (i == 0) texts.push_back(std::string("-0") + f);
    }
  }
  for (const Case& c : cases) {
    GrammarDfa dfa(parse_gbnf(json_schema_to_gbnf(c.schema)), byte_trie());
    int accepted = 0;
    for (const std::string& t : texts) {
      DfaCursor cur = dfa.start();
      if (!(dfa.advance(cur, t) && dfa.accepting(cur))) continue;
      ++accepted;
      const double v = std::stod(t);
      EXPECT_TRUE(c.lo_open ? v > c.lo : v >= c.lo) << c.schema << " accepted " << t;
      EXPECT_TRUE(c.hi_open ? v < c.hi : v <= c.hi) << c.schema << " accepted " << t;
      EXPECT_EQ(t.back() == '0' && t.find('.') != std::string::npos, false) << "trailing zero " << t;
    }
    EXPECT_GT(accepted, 2) << c.schema;
  }
  EXPECT_TRUE(matches_schema(R"({"type":"number","minimum":0,"maximum":1})", "0.5"));
  EXPECT_TRUE(matches_schema(R"({"type":"number","minimum":0,"maximum":1})", "1"));
  EXPECT_FALSE(matches_schema(R"({"type":"number","minimum":0,"maximum":1})", "1.5"));
  EXPECT_TRUE(matches_schema(R"({"minimum":3})", "4.25"));  // bounds alone imply a number
}

// Properties come in the schema's order, not sorted.
TEST(JsonSchema, PropertiesFollowTheSchemaOrder) {
  const char* schema = R"({"type":"object","properties":{"zeta":{"type":"integer"},"alpha":{"type":"string"}},
                          "required":["zeta","alpha"]})";
  EXPECT_TRUE(matches_schema(schema, R"({"zeta": 1, "alpha": "x"})"));
  EXPECT_FALSE(matches_schema(schema, R"({"alpha": "x", "zeta": 1})"));
}

// A lazy matcher allows everything, control tokens included, until a trigger shows in the output (here split
// across two tokens), then follows its grammar from the trigger's first byte; a trigger token feeds its text.
TEST(StructuredOutputManager, LazyMatcherSwitchesOnAtTheTrigger) {
  std::vector<std::string> vocab = {"", "hello ", "<to", "ol>", "{\"a\":1}", "x", "</tool>"};
  StructuredOutputManager m(std::make_shared<VocabTrie>(vocab));
  StructuredOutputSpec spec = StructuredOutputSpec::grammar(R"(root ::= "<tool>" "{\"a\":" [0-9] "}" "</tool>")");
  spec.triggers = {"<tool>"};
  spec.trigger_tokens = {{0, "<tool>"}};
  std::string err;
  auto g = m.make_matcher(spec, err);
  ASSERT_TRUE(g) << err;
  EXPECT_FALSE(g->active());
  EXPECT_TRUE(g->mask()->allowed(0));    // a control token (no bytes) is allowed while inactive
  EXPECT_EQ(g->mask()->bits[0], 0x7Fu);  // every token of the vocabulary, nothing past it
  EXPECT_TRUE(g->mask()->allowed(5));
  EXPECT_TRUE(g->accept_token(1));
  EXPECT_TRUE(g->accept_token(5));
  EXPECT_TRUE(g->accept_token(2));
  EXPECT_FALSE(g->active());
  EXPECT_TRUE(g->accept_token(3));  // "<to" + "ol>" completes the trigger
  EXPECT_TRUE(g->active());
  EXPECT_FALSE(g->mask()->allowed(5));
  EXPECT_TRUE(g->mask()->allowed(4));
  EXPECT_FALSE(g->accepting());
  EXPECT_TRUE(g->accept_token(4));
  EXPECT_TRUE(g->accept_token(6));
  EXPECT_TRUE(g->accepting());
  auto t = m.make_matcher(spec, err);  // by the trigger token
  EXPECT_TRUE(t->accept_token(0));
  EXPECT_TRUE(t->active());
  EXPECT_TRUE(t->mask()->allowed(4));
  // "^" triggers count only at the output's start.
  StructuredOutputSpec anchored = StructuredOutputSpec::grammar(R"(root ::= "{\"a\":" [0-9] "}")");
  anchored.triggers = {"^{"};
  auto a = m.make_matcher(anchored, err);
  EXPECT_TRUE(a->accept_token(4));
  EXPECT_TRUE(a->active());
  EXPECT_TRUE(a->accepting());
  auto b = m.make_matcher(anchored, err);
  EXPECT_TRUE(b->accept_token(1));
  EXPECT_TRUE(b->accept_token(4));
  EXPECT_FALSE(b->active());
}

// A "^" trigger split across tokens still counts at the output's start (Llama 3's {"name"); a start that
// leaves it ({"age"), or text before it, does not.
TEST(StructuredOutputManager, AnchoredTriggerSplitAcrossTokens) {
  std::vector<std::string> vocab = {"{", "\"name\"", ":1}", " ", "\"age\"", "x"};
  StructuredOutputManager m(std::make_shared<VocabTrie>(vocab));
  StructuredOutputSpec spec = StructuredOutputSpec::grammar(R"(root ::= "{\"name\":1}")");
  spec.triggers = {"^{\"name\""};
  std::string err;
  auto g = m.make_matcher(spec, err);
  for (int32_t t : {3, 0}) {
    EXPECT_TRUE(g->accept_token(t));
    EXPECT_FALSE(g->active());
  }
  EXPECT_TRUE(g->accept_token(1));
  EXPECT_TRUE(g->active());
  EXPECT_FALSE(g->mask()->allowed(5));
  EXPECT_TRUE(g->accept_token(2));
  EXPECT_TRUE(g->accepting());
  auto h = m.make_matcher(spec, err);
  for (int32_t t : {0, 4, 2}) EXPECT_TRUE(h->accept_token(t));
  EXPECT_FALSE(h->active());  // {"age" is a JSON answer, not a call
  auto k = m.make_matcher(spec, err);
  for (int32_t t : {5, 0, 1}) EXPECT_TRUE(k->accept_token(t));
  EXPECT_FALSE(k->active());  // not at the start
}

// With a reasoning model's think block, triggers inside the thinking do not count; after </think> they do.
TEST(StructuredOutputManager, LazyMatcherIgnoresTriggersWhileThinking) {
  std::vector<std::string> vocab = {"<think>", "<tool>", "</think>", "\n", "{\"a\":1}", "</tool>", "x"};
  StructuredOutputManager m(std::make_shared<VocabTrie>(vocab));
  StructuredOutputSpec spec = StructuredOutputSpec::grammar(R"(root ::= "<tool>" "{\"a\":" [0-9] "}" "</tool>")");
  spec.triggers = {"<tool>"};
  spec.think_open = "<think>";
  spec.think_close = "</think>";
  std::string err;
  auto g = m.make_matcher(spec, err);
  for (int32_t t : {0, 6, 1, 4, 5, 3}) EXPECT_TRUE(g->accept_token(t));  // <think>x<tool>{"a":1}</tool>\n
  EXPECT_FALSE(g->active());
  EXPECT_TRUE(g->accept_token(2));  // </think>
  EXPECT_FALSE(g->active());
  EXPECT_TRUE(g->accept_token(1));  // <tool> after the thinking
  EXPECT_TRUE(g->active());
  // Without a leading <think> (thinking disabled), triggers count from the start ...
  auto n = m.make_matcher(spec, err);
  EXPECT_TRUE(n->accept_token(3));
  EXPECT_TRUE(n->accept_token(1));
  EXPECT_TRUE(n->active());
  // ... unless the template opened the block (deepseek_r1): then only after </think>.
  spec.think_always = true;
  auto d = m.make_matcher(spec, err);
  EXPECT_TRUE(d->accept_token(1));
  EXPECT_FALSE(d->active());
  EXPECT_TRUE(d->accept_token(2));
  EXPECT_TRUE(d->accept_token(1));
  EXPECT_TRUE(d->active());
}

// The trie walk must give exactly the tokens whose bytes the grammar accepts from the current state.
TEST(TokenMask, EqualsBruteForceOverRandomVocabAndStates) {
  std::mt19937 rng(5);
  const std::string alphabet = "{}[]\":, 0123456789abe.-tnrulf\\\xc3\xa9";
  std::vector<std::string> vocab;
  for (int i = 0; i < 3000; ++i) {
    std::string t;
    const int len = 1 + static_cast<int>(rng() % 5);
    for (int k = 0; k < len; ++k) t += alphabet[rng() % alphabet.size()];
    vocab.push_back(t);
  }
  vocab.push_back("");  // a never-allowed token
  auto trie = std::make_shared<VocabTrie>(vocab);
  auto dfa = std::make_shared<GrammarDfa>(parse_gbnf(json_object_gbnf()), trie);
  GrammarMatcher m(dfa, trie);
  int steps = 0;
  for (; steps < 300; ++steps) {
    auto mask = m.mask();
    std::vector<int32_t> allowed;
    for (int32_t id = 0; id < static_cast<int32_t>(vocab.size()); ++id) {
      bool ok = false;
      if (!vocab[id].empty()) {
        GrammarMatcher copy = m;
        ok = copy.accept_token(id);
      }
      ASSERT_EQ(mask->allowed(id), ok) << "token '" << vocab[id] << "' at step " << steps;
      if (ok) allowed.push_back(id);
    }
    if (allowed.empty()) break;
    ASSERT_TRUE(m.accept_token(allowed[rng() % allowed.size()]));
  }
  EXPECT_GT(steps, 50);
}

TEST(StructuredOutputManager, CachesCompiledGrammarsAndReportsErrors) {
  StructuredOutputManager mgr(byte_trie(), 2);
  std::string err;
  EXPECT_TRUE(mgr.make_matcher(StructuredOutputSpec::regex("a+"), err)) << err;
  EXPECT_TRUE(mgr.make_matcher(StructuredOutputSpec::regex("a+"), err));
  EXPECT_EQ(mgr.cache_entries(), 1u);
  EXPECT_TRUE(mgr.make_matcher(StructuredOutputSpec::choice({"yes", "no"}), err));
  EXPECT_TRUE(mgr.make_matcher(StructuredOutputSpec::json_object(), err));
  EXPECT_EQ(mgr.cache_entries(), 2u);
  EXPECT_FALSE(
      mgr.make_matcher(StructuredOutputSpec::json_schema(R"({"type":"object","properties":{"a":{"type":7}}})"), err));
  EXPECT_NE(err.find("/properties/a"), std::string::npos) << err;
  auto m = mgr.make_matcher(StructuredOutputSpec::choice({"yes", "no"}), err);
  EXPECT_TRUE(m->accept_token('n'));
  EXPECT_FALSE(m->accepting());
  EXPECT_FALSE(m->accept_token('x'));
  EXPECT_TRUE(m->accept_token('o'));
  EXPECT_TRUE(m->accepting());
  EXPECT_FALSE(m->mask()->any);
}
