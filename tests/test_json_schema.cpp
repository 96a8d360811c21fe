// The JSON Schema compiler keyword by keyword: numeric ranges of any size against exact decimal comparison,
// formats, patterns with lengths, objects (patternProperties, propertyNames, counts, dependencies), arrays (tuples),
// allOf merging, $ref to any local pointer, and the bounds on work and grammar size.
#include <gtest/gtest.h>

#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "engine/structured/grammar.h"
#include "engine/structured/grammar_dfa.h"
#include "engine/structured/json_schema_numbers.h"
#include "engine/structured/json_schema_to_gbnf.h"
#include "engine/structured/vocab_trie.h"

using namespace kvik;
using namespace kvik::structured;

namespace {

std::shared_ptr<const VocabTrie> byte_trie() {
  static const std::shared_ptr<const VocabTrie> trie = [] {
    std::vector<std::string> v;
    for (int b = 0; b < 256; ++b) v.emplace_back(1, static_cast<char>(b));
    return std::make_shared<const VocabTrie>(std::move(v));
  }();
  return trie;
}

struct Matcher {
  explicit Matcher(const std::string& schema) : dfa(parse_gbnf(json_schema_to_gbnf(schema)), byte_trie()) {}
  bool operator()(std::string_view text) {
    DfaCursor c = dfa.start();
    return dfa.advance(c, text) && dfa.accepting(c);
  }
  GrammarDfa dfa;
};

bool matches(const std::string& schema, std::string_view text) { return Matcher(schema)(text); }

std::string not_enforced(const std::string& schema) {
  std::string all;
  for (const std::string& n : json_schema_rules(schema, "").not_enforced) all += n + "\n";
  return all;
}

// Exact comparison of two canonical decimal texts (sign, digits, optional fraction).
int compare_decimal_text(const std::string& a, const std::string& b) {
  const Decimal x = *parse_decimal(a), y = *parse_decimal(b);
  auto cmp_mag = [](const Decimal& p, const Decimal& q) {
    if (p.int_digits.size() != q.int_digits.size()) return p.int_digits.size() < q.int_digits.size() ? -1 : 1;
    if (p.int_digits != q.int_digits) return p.int_digits < q.int_digits ? -1 : 1;
    const size_t n = std::max(p.frac_digits.size(), q.frac_digits.size());
    const std::string fp = p.frac_digits + std::string(n - p.frac_digits.size(), '0');
    const std::string fq = q.frac_digits + std::string(n - q.frac_digits.size(), '0');
    return fp == fq ? 0 : (fp < fq ? -1 : 1);
  };
  if (x.negative != y.negative) return x.negative ? -1 : 1;
  const int c = cmp_mag(x, y);
  return x.negative ? -c : c;
}

}  // namespace

// zod's z.number().int() bounds, 2^63 and negative ranges: small, fast and exact at and around the bounds.
TEST(JsonSchemaNumbers, HugeIntegerRangesAreCompactFastAndExact) {
  struct Case {
    std::string lo, hi;  // "" = open
  };
  const Case cases[] = {{"0", "9007199254740991"},
                        {"-9007199254740991", "9007199254740991"},
                        {"0", "9223372036854775807"},
                        {"-9223372036854775808", "-1"},
                        {"12345", ""},
                        {"", "-777"},
                        {"100000000000000000000", "100000000000000000000000000000"}};
  std::mt19937_64 rng(7);
  for (const Case& c : cases) {
    std::string schema = R"({"type":"integer")";
    if (!c.lo.empty()) schema += ",\"minimum\":" + c.lo;
    if (!c.hi.empty()) schema += ",\"maximum\":" + c.hi;
    schema += "}";
    // Compile and parse time: the best of 5 runs (the machine may be shared).
    double ms = 1e9;
    std::string gbnf;
    Grammar g;
    for (int run = 0; run < 5; ++run) {
      const auto t0 = std::chrono::steady_clock::now();
      gbnf = json_schema_to_gbnf(schema);
      g = parse_gbnf(gbnf);
      ms = std::min(ms, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    EXPECT_LE(gbnf.size(), 64u << 10) << schema;
    EXPECT_LT(ms, 10.0) << schema;
    std::cout << fmt::format("{}: {} bytes of grammar, {:.3f} ms\n", schema, gbnf.size(), ms);
    GrammarDfa dfa(std::move(g), byte_trie());
    auto ok = [&](const std::string& t) {
      DfaCursor cur = dfa.start();
      return dfa.advance(cur, t) && dfa.accepting(cur);
    };
    // An open side allows up to 16 digits (as json-integer), or the other bound's count when it has more.
    auto in_range = [&](const std::string& v) {
      const size_t digits = v.size() - (v[0] == '-');
      const bool open_side = v[0] == '-' ? c.lo.empty() : c.hi.empty();
      const std::string& other = v[0] == '-' ? c.hi : c.lo;
      if (open_side && digits > std::max<size_t>(16, other.size() - (!other.empty() && other[0] == '-'))) return false;
      return (c.lo.empty() || compare_decimal_text(v, c.lo) >= 0) &&
             (c.hi.empty() || compare_decimal_text(v, c.hi) <= 0);
    };
    std::vector<std::string> texts = {"0",     "1",     "-1",    "9",    "10",   "99",  "100",
                                      "12344", "12345", "12346", "-776", "-777", "-778"};
    for (const std::string& b : {c.lo, c.hi}) {
      if (b.empty()) continue;
      texts.push_back(b);
      const bool neg = b[0] == '-';
      std::string mag = neg ? b.substr(1) : b;
      for (int d : {-1, 1}) {  // the neighbours of the bound: mag ± 1
        std::string m = mag;
        int i = static_cast<int>(m.size()) - 1;
        if (d > 0) {
          while (i >= 0 && m[static_cast<size_t>(i)] == '9') m[static_cast<size_t>(i--)] = '0';
          if (i < 0)
            m.insert(0, "1");
          else
            ++m[static_cast<size_t>(i)];
        } else if (m != "0") {
          while (m[static_cast<size_t>(i)] == '0') m[static_cast<size_t>(i--)] = '9';
          --m[static_cast<size_t>(i)];
          if (m.size() > 1 && m[0] == '0') m.erase(0, 1);
        }
        texts.push_back(m == "0" ? "0" : (neg ? "-" : "") + m);
      }
    }
    for (int k = 0; k < 300; ++k) {
      const uint64_t v = rng() >> (rng() % 64);
      texts.push_back(std::to_string(v));
      if (v) texts.push_back("-" + std::to_string(v));
    }
    for (const std::string& t : texts) EXPECT_EQ(ok(t), in_range(t)) << schema << " value " << t;
    for (const char* bad : {"-0", "007", "1.5", "1e3", "+1", ""}) EXPECT_FALSE(ok(bad)) << schema << " " << bad;
  }
}

// Every decimal with up to 3 fraction digits in [-3, 3] against exact comparison, for fractional, integral,
// exclusive and one-sided bounds.
TEST(JsonSchemaNumbers, DecimalBoundsAreExact) {
  const char* bounds[][2] = {{"0.2", "0.7"}, {"-1.25", "0.5"}, {"-2.5", "-0.05"}, {"0", "1"},  {"0.1", ""},
                             {"", "-0.125"}, {"1", "1"},       {"0.35", "0.351"}, {"-3", "3"}, {"2.999", ""}};
  std::vector<std::string> texts;
  for (int i = -3000; i <= 3000; ++i) {
    const int a = std::abs(i);
    std::string t = (i < 0 ? "-" : "") + std::to_string(a / 1000);
    std::string f = fmt::format("{:03d}", a % 1000);
    while (!f.empty() && f.back() == '0') f.pop_back();
    if (!f.empty()) t += "." + f;
    texts.push_back(t);
  }
  for (const auto& b : bounds)
    for (int ex = 0; ex < 4; ++ex) {
      std::string schema = R"({"type":"number")";
      if (*b[0]) schema += fmt::format(",\"{}\":{}", ex & 1 ? "exclusiveMinimum" : "minimum", b[0]);
      if (*b[1]) schema += fmt::format(",\"{}\":{}", ex & 2 ? "exclusiveMaximum" : "maximum", b[1]);
      schema += "}";
      std::string gbnf;
      try {
        gbnf = json_schema_to_gbnf(schema);
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("no JSON value"), std::string::npos) << schema << e.what();
        continue;
      }
      GrammarDfa dfa(parse_gbnf(gbnf), byte_trie());
      for (const std::string& t : texts) {
        bool in = true;
        if (*b[0]) in = in && (ex & 1 ? compare_decimal_text(t, b[0]) > 0 : compare_decimal_text(t, b[0]) >= 0);
        if (*b[1]) in = in && (ex & 2 ? compare_decimal_text(t, b[1]) < 0 : compare_decimal_text(t, b[1]) <= 0);
        if (t == "-0") continue;
        DfaCursor c = dfa.start();
        EXPECT_EQ(dfa.advance(c, t) && dfa.accepting(c), in) << schema << " value " << t;
      }
    }
}

TEST(JsonSchemaFormats, AcceptTheirFormAndRejectOthers) {
  struct Case {
    const char* format;
    std::vector<const char*> good, bad;
  };
  const std::vector<Case> cases = {
      {"date",
       {"2024-02-29", "2000-02-29", "2023-12-31", "0000-02-29"},
       {"2023-02-29", "1900-02-29", "2024-04-31", "2024-13-01", "24-01-01"}},
      {"time", {"12:34:56Z", "23:59:59.123+05:30", "00:00:00-00:00"}, {"24:00:00Z", "12:34:56", "12:60:00Z", "1:2:3Z"}},
      {"date-time",
       {"2024-05-06T07:08:09Z", "1999-12-31T23:59:59.5-08:00"},
       {"2024-05-06 07:08:09Z", "2024-05-06T07:08Z"}},
      {"duration", {"P1Y2M3D", "PT4H5M6S", "P3W", "P1DT2H", "PT0S"}, {"P", "PT", "P1H", "P1Y2W", "1Y"}},
      {"uuid",
       {"123e4567-e89b-12d3-a456-426614174000", "00000000-0000-0000-0000-000000000000"},
       {"123e4567e89b12d3a456426614174000", "xyz"}},
      {"email", {"a@b.co", "first.last+tag@sub.example.org"}, {"a@b", "@b.co", "a..b@c.de", ".a@b.co", "a b@c.de"}},
      {"hostname", {"localhost", "api.example.com", "a-b.c"}, {"-a.com", "a_b.com", "a..b", ""}},
      {"ipv4", {"0.0.0.0", "192.168.1.255", "255.255.255.255"}, {"256.1.1.1", "1.2.3", "01.2.3.4", "1.2.3.4.5"}},
      {"ipv6",
       {"::", "::1", "2001:db8::8a2e:370:7334", "1:2:3:4:5:6:7:8", "::ffff:192.0.2.1"},
       {"1:2:3:4:5:6:7:8:9", ":::", "12345::", "1::2::3"}},
      {"uri",
       {"https://example.com/a/b?c=d#e", "mailto:x@y.z", "urn:isbn:123", "file:///tmp/x", "http://[::1]"},
       {"example.com", "http://a b", "://x"}},
  };
  for (const Case& c : cases) {
    Matcher m(fmt::format(R"({{"type":"string","format":"{}"}})", c.format));
    for (const char* g : c.good)
      if (std::string(c.format) != "uri" || std::string(g).find('[') == std::string::npos)
        EXPECT_TRUE(m(fmt::format("\"{}\"", g))) << c.format << " " << g;
    for (const char* b : c.bad) EXPECT_FALSE(m(fmt::format("\"{}\"", b))) << c.format << " " << b;
  }
  EXPECT_NE(not_enforced(R"({"type":"string","format":"credit-card"})").find("'credit-card'"), std::string::npos);
  EXPECT_TRUE(matches(R"({"type":"string","format":"credit-card"})", "\"anything\""));
}

// JSON Schema patterns search (unanchored unless ^/$ say otherwise); beside lengths they are intersected when one
// element varies, else the lengths are reported as not enforced.
TEST(JsonSchemaPattern, SearchSemanticsAndLengths) {
  EXPECT_TRUE(matches(R"({"type":"string","pattern":"abc"})", "\"xxabcyy\""));
  EXPECT_FALSE(matches(R"({"type":"string","pattern":"abc"})", "\"xxabyy\""));
  EXPECT_TRUE(matches(R"({"type":"string","pattern":"^abc"})", "\"abcyy\""));
  EXPECT_FALSE(matches(R"({"type":"string","pattern":"^abc"})", "\"xabc\""));
  EXPECT_TRUE(matches(R"({"type":"string","pattern":"^a$|b"})", "\"xbx\""));
  EXPECT_FALSE(matches(R"({"type":"string","pattern":"^a$|b"})", "\"ax\""));
  const std::string ident = R"({"type":"string","pattern":"^[a-z][a-z0-9_]*$","minLength":2,"maxLength":5})";
  Matcher m(ident);
  for (const char* ok : {"\"ab\"", "\"a_1\"", "\"abcde\""}) EXPECT_TRUE(m(ok)) << ok;
  for (const char* bad : {"\"a\"", "\"abcdef\"", "\"1ab\""}) EXPECT_FALSE(m(bad)) << bad;
  EXPECT_EQ(not_enforced(ident), "");
  const std::string prefix = R"({"type":"string","pattern":"^https://","maxLength":12})";
  EXPECT_TRUE(matches(prefix, "\"https://abcd\""));
  EXPECT_FALSE(matches(prefix, "\"https://abcde\""));
  const std::string two = R"({"type":"string","pattern":"^[a-z]+-[a-z]+$","maxLength":4})";
  EXPECT_NE(not_enforced(two).find("minLength/maxLength"), std::string::npos);
  EXPECT_TRUE(matches(two, "\"ab-cd\""));  // the pattern holds, the length is not enforced
  const std::string look = R"({"type":"string","pattern":"^(?!x)[a-z]+$","maxLength":3})";
  EXPECT_NE(not_enforced(look).find("pattern '^(?!x)[a-z]+$' is not enforced (regex: lookaround"), std::string::npos);
  EXPECT_TRUE(matches(look, "\"abc\""));
  EXPECT_FALSE(matches(look, "\"abcd\""));  // the lengths still are
  EXPECT_TRUE(matches(R"({"type":"string","pattern":"^\\d{3}$","format":"email"})", "\"123\""));
}

TEST(JsonSchemaObjects, PatternPropertiesNamesCountsAndDependencies) {
  const std::string rec = R"({"type":"object","propertyNames":{"pattern":"^[a-z]+$"},
      "additionalProperties":{"type":"integer"},"minProperties":1,"maxProperties":2})";
  Matcher r(rec);
  for (const char* ok : {R"({"a":1})", R"({"a":1,"bc":2})"}) EXPECT_TRUE(r(ok)) << ok;
  for (const char* bad : {"{}", R"({"a":1,"b":2,"c":3})", R"({"A":1})", R"({"a":"x"})"}) EXPECT_FALSE(r(bad)) << bad;
  const std::string pp = R"({"type":"object","properties":{"id":{"type":"string"}},
      "patternProperties":{"^x-":{"type":"boolean"}},"required":["id"]})";
  Matcher p(pp);
  EXPECT_TRUE(p(R"({"id":"a","x-a":true,"x-b":false})"));
  EXPECT_FALSE(p(R"({"id":"a","y":true})"));
  EXPECT_FALSE(p(R"({"id":"a","x-a":1})"));
  const std::string add =
      R"({"type":"object","properties":{"a":{"type":"string"}},"additionalProperties":{"type":"number"}})";
  Matcher a(add);
  EXPECT_TRUE(a(R"({"a":"s","b":1.5})"));
  EXPECT_FALSE(a(R"({"a":"s","a":1})"));  // a declared name is not an additional property
  EXPECT_TRUE(a(R"({"ab":1})"));
  const std::string dep = R"({"type":"object","properties":{"card":{"type":"string"},"name":{"type":"string"},
      "billing":{"type":"string"}},"dependentRequired":{"billing":["card"],"card":["name"]}})";
  Matcher d(dep);
  for (const char* ok :
       {"{}", R"({"name":"n"})", R"({"card":"c","name":"n"})", R"({"card":"c","name":"n","billing":"b"})"})
    EXPECT_TRUE(d(ok)) << ok;
  for (const char* bad : {R"({"card":"c"})", R"({"billing":"b"})", R"({"name":"n","billing":"b"})"})
    EXPECT_FALSE(d(bad)) << bad;
  const std::string counts = R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"},
      "c":{"type":"integer"}},"minProperties":2,"maxProperties":2})";
  Matcher c(counts);
  EXPECT_TRUE(c(R"({"a":1,"c":3})"));
  EXPECT_FALSE(c(R"({"a":1})"));
  EXPECT_FALSE(c(R"({"a":1,"b":2,"c":3})"));
}

TEST(JsonSchemaArrays, TuplesAndCounts) {
  const std::string t =
      R"({"type":"array","prefixItems":[{"type":"string"},{"type":"integer"}],"items":false,"minItems":1})";
  Matcher m(t);
  for (const char* ok : {R"(["a"])", R"(["a",1])"}) EXPECT_TRUE(m(ok)) << ok;
  for (const char* bad : {"[]", R"(["a",1,2])", R"([1])"}) EXPECT_FALSE(m(bad)) << bad;
  const std::string d4 =
      R"({"type":"array","items":[{"type":"boolean"}],"additionalItems":{"type":"null"},"maxItems":3})";
  Matcher n(d4);
  for (const char* ok : {"[]", "[true]", "[true,null,null]"}) EXPECT_TRUE(n(ok)) << ok;
  for (const char* bad : {"[null]", "[true,true]", "[true,null,null,null]"}) EXPECT_FALSE(n(bad)) << bad;
  EXPECT_TRUE(matches(R"({"type":"array","prefixItems":[{"type":"string"},{"type":"number"}]})", R"(["x",1,{}])"));
}

TEST(JsonSchemaCombinations, AllOfAnyOfBesidePropertiesRefsAndNullable) {
  const std::string all = R"({"allOf":[{"type":"object","properties":{"a":{"type":"string"}},"required":["a"],
      "additionalProperties":false},{"type":"object","properties":{"b":{"type":"number","minimum":0}},"required":["b"],
      "additionalProperties":false}]})";
  Matcher a(all);
  EXPECT_TRUE(a(R"({"a":"x","b":1})"));
  EXPECT_FALSE(a(R"({"a":"x"})"));
  EXPECT_FALSE(a(R"({"a":"x","b":-1})"));
  EXPECT_NE(not_enforced(all).find("additionalProperties of one allOf member"), std::string::npos);
  const std::string beside = R"({"type":"object","properties":{"kind":{"type":"string"}},"required":["kind"],
      "anyOf":[{"properties":{"kind":{"const":"file"},"path":{"type":"string"}},"required":["path"]},
               {"properties":{"kind":{"const":"url"},"url":{"type":"string","format":"uri"}},"required":["url"]}]})";
  Matcher b(beside);
  EXPECT_TRUE(b(R"({"kind":"file","path":"/x"})"));
  EXPECT_TRUE(b(R"({"kind":"url","url":"https://x.y"})"));
  EXPECT_FALSE(b(R"({"kind":"file","url":"https://x.y"})"));
  const std::string refs =
      R"({"type":"object","properties":{"home":{"type":"object","properties":{"city":{"type":"string"}},
      "required":["city"]},"work":{"$ref":"#/properties/home"},"tree":{"$ref":"#/$defs/node"}},
      "$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},"kids":{"type":"array","items":{"$ref":"#/$defs/node"}}},
      "required":["v"]}}})";
  Matcher r(refs);
  EXPECT_TRUE(r(R"({"home":{"city":"a"},"work":{"city":"b"},"tree":{"v":1,"kids":[{"v":2,"kids":[]}]}})"));
  EXPECT_FALSE(r(R"({"work":{}})"));
  EXPECT_TRUE(matches(R"({"type":"object","properties":{"n":{"$ref":"#"}}})", R"({"n":{"n":{}}})"));
  const std::string anchors = R"({"$id":"https://example.com/s.json","type":"object","properties":{
      "p":{"$ref":"#A"},"q":{"$ref":"https://example.com/s.json#/$defs/a%20b"},"r":{"$ref":"#/properties/p","maximum":5}},
      "$defs":{"a":{"$anchor":"A","type":"integer"},"a b":{"type":"boolean"}}})";
  Matcher an(anchors);
  EXPECT_TRUE(an(R"({"p":7,"q":true,"r":5})"));
  EXPECT_FALSE(an(R"({"p":"x"})"));
  EXPECT_FALSE(an(R"({"r":6})"));
  EXPECT_TRUE(matches(R"({"type":"string","nullable":true})", "null"));
  EXPECT_TRUE(matches(R"({"type":["integer","boolean"]})", "true"));
  EXPECT_TRUE(matches(R"({"enum":[{"a":[1,2.0]},null,"x"]})", R"({"a":[1,2]})"));
  EXPECT_TRUE(matches(R"({"oneOf":[{"type":"string"},{"type":"integer"}]})", "\"s\""));
  EXPECT_EQ(not_enforced(R"({"oneOf":[{"type":"string"},{"type":"integer"}]})"), "");
  EXPECT_NE(not_enforced(R"({"oneOf":[{"type":"string"},{"minLength":2}]})").find("oneOf"), std::string::npos);
}

// The bounds: each names itself and says by how much it was exceeded.
TEST(JsonSchemaBounds, WorkSizeAndDepthAreBoundedAndNamed) {
  JsonSchemaLimits small;
  small.max_grammar_bytes = 2000;
  std::string big = R"({"type":"object","properties":{)";
  for (int i = 0; i < 200; ++i)
    big += fmt::format(R"({}"p{}":{{"type":"string","maxLength":{}}})", i ? "," : "", i, i + 1);
  big += "}}";
  try {
    json_schema_to_gbnf(big, small);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the limit of 2000"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("x the limit"), std::string::npos) << e.what();  // by how much
  }
  JsonSchemaLimits work;
  work.max_work = 50;
  EXPECT_THROW(json_schema_to_gbnf(big, work), Error);
  std::string deep = "{}";
  for (int i = 0; i < 100; ++i) deep = R"({"type":"array","items":)" + deep + "}";
  try {
    json_schema_to_gbnf(deep);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("limit of 64"), std::string::npos) << e.what();
  }
  // The work bound stands for time: a schema that reaches it takes a bounded time to refuse.
  std::string huge = R"({"type":"object","properties":{)";
  for (int i = 0; i < 900; ++i) {
    huge += fmt::format(R"({}"o{}":{{"type":"object","properties":{{)", i ? "," : "", i);
    for (int j = 0; j < 100; ++j)
      huge += fmt::format(R"({}"p{}":{{"type":"integer","minimum":{}}})", j ? "," : "", j, j);
    huge += "}}";
  }
  huge += "}}";
  JsonSchemaLimits roomy;
  roomy.max_grammar_bytes = size_t{1} << 30;
  roomy.max_schema_bytes = size_t{1} << 30;
  const std::clock_t t0 = std::clock();  // CPU time: the machine may be shared
  try {
    json_schema_to_gbnf(huge, roomy);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("work limit of 100000"), std::string::npos) << e.what();
  }
  const double ms = 1000.0 * static_cast<double>(std::clock() - t0) / CLOCKS_PER_SEC;
  std::cout << fmt::format("refused at the work limit after {:.1f} ms of CPU\n", ms);
  EXPECT_LT(ms, 1000.0);
  std::string wide = R"({"type":"object","properties":{)";
  for (int i = 0; i < 1001; ++i) wide += fmt::format(R"({}"p{}":{{}})", i ? "," : "", i);
  try {
    json_schema_to_gbnf(wide + "}}");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("has 1001 members, more than the limit of 1000"), std::string::npos)
        << e.what();
  }
  std::string nested = std::string(300, '[') + std::string(300, ']');
  EXPECT_THROW(json_schema_to_gbnf(R"({"const":)" + nested + "}"), Error);
  JsonSchemaLimits text;
  text.max_schema_bytes = 100;
  EXPECT_THROW(json_schema_to_gbnf(big, text), Error);
  EXPECT_NO_THROW(json_schema_to_gbnf(big));
}

namespace {

// A random sentence of the grammar, byte by byte (ASCII preferred, stopping at an accepting state now and then);
// "" when it ran past `max_bytes`.
std::string random_walk(GrammarDfa& dfa, std::mt19937& rng, size_t max_bytes) {
  DfaCursor c = dfa.start();
  std::string out;
  while (out.size() < max_bytes) {
    const auto mask = dfa.mask(c);
    std::vector<int> ascii, other;
    for (int b = 0; b < 256; ++b)
      if (mask->allowed(b)) (b >= 0x20 && b < 0x7F ? ascii : other).push_back(b);
    if (mask->accepting && (ascii.empty() && other.empty() || rng() % 4 == 0)) return out;
    if (ascii.empty() && other.empty()) return "";
    const std::vector<int>& from = !ascii.empty() && (other.empty() || rng() % 20 != 0) ? ascii : other;
    // Closing bytes more often than the rest, so that walks end.
    int b = from[rng() % from.size()];
    for (int closer : {'"', '}', ']'})
      if (rng() % 3 == 0 && std::find(from.begin(), from.end(), closer) != from.end()) b = closer;
    const char ch = static_cast<char>(b);
    if (!dfa.advance(c, std::string_view(&ch, 1))) return "";
    out += ch;
  }
  return "";
}

}  // namespace

// The corpus (tests/structured/schema_corpus.json, 1000 schemas shaped like MCP servers' tool schemas and zod's
// output, written by make_schema_corpus.mjs): every schema compiles within the default bounds; every ajv-valid
// instance is accepted; every ajv-invalid one is rejected when the compiler reports nothing as not enforced; and
// random sentences of those fully enforced grammars are valid for ajv (validate.mjs).
TEST(JsonSchemaCorpus, ThousandSchemasCompileAcceptValidAndRejectInvalid) {
  const std::string dir = KVIK_SOURCE_DIR "/tests/structured";
  std::ifstream in(dir + "/schema_corpus.json");
  ASSERT_TRUE(in) << "missing " << dir << "/schema_corpus.json";
  const nlohmann::ordered_json corpus = nlohmann::ordered_json::parse(in);
  ASSERT_EQ(corpus.size(), 1000u);
  std::mt19937 rng(99);
  const std::string walks_path = ::testing::TempDir() + "kvik_schema_corpus_walks.jsonl";
  std::ofstream walks(walks_path);
  double max_ms = 0, total_ms = 0;
  size_t max_bytes = 0, exact = 0, valid = 0, invalid = 0, rejected = 0, walked = 0;
  std::string slowest, biggest;
  std::map<std::string, int> note_kinds;  // what the corpus leaves not enforced, by kind
  for (const auto& entry : corpus) {
    const std::string name = entry["name"];
    const std::string schema = entry["schema"].dump();
    SchemaRules r;
    std::string gbnf;
    Grammar g;
    const auto t0 = std::chrono::steady_clock::now();
    try {
      r = json_schema_rules(schema, "");
      gbnf = "root ::= " + r.start + "\n" + r.rules + json_primitives_gbnf();
      g = parse_gbnf(gbnf);
    } catch (const Error& e) {
      ADD_FAILURE() << name << ": " << e.what() << "\n" << schema;
      continue;
    }
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    total_ms += ms;
    if (ms > max_ms) max_ms = ms, slowest = name;
    if (gbnf.size() > max_bytes) max_bytes = gbnf.size(), biggest = name;
    GrammarDfa dfa(std::move(g), byte_trie());
    auto ok = [&](const std::string& t) {
      DfaCursor c = dfa.start();
      return dfa.advance(c, t) && dfa.accepting(c);
    };
    for (const auto& v : entry["valid"]) {
      ++valid;
      EXPECT_TRUE(ok(v.get<std::string>())) << name << ": rejects the valid " << v.get<std::string>() << "\n" << schema;
    }
    const bool fully_enforced = r.not_enforced.empty();
    for (const std::string& n : r.not_enforced) ++note_kinds[n.substr(n.find(": ") + 2)];
    exact += fully_enforced;
    for (const auto& v : entry["invalid"]) {
      ++invalid;
      const bool accepted = ok(v["text"].get<std::string>());
      rejected += !accepted;
      if (fully_enforced)
        EXPECT_FALSE(accepted) << name << ": accepts the invalid " << v["text"].get<std::string>() << " ("
                               << v["keywords"].dump() << ")\n"
                               << schema;
    }
    if (!fully_enforced) continue;
    for (int k = 0; k < 3; ++k) {
      const std::string text = random_walk(dfa, rng, 2000);
      if (text.empty()) continue;
      ++walked;
      walks << nlohmann::json{{"id", name},
                              {"check", "json_schema_any"},
                              {"schema", entry["schema"]},
                              {"text", text},
                              {"finish_reason", "stop"}}
                   .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
            << "\n";
    }
  }
  walks.close();
  std::cout << fmt::format(
      "corpus: {} schemas, {} fully enforced; compile + parse {:.1f} ms in all, slowest {:.2f} ms ({}); largest "
      "grammar "
      "{} bytes ({}); {} valid instances accepted, {} of {} invalid rejected; {} random sentences\n",
      corpus.size(), exact, total_ms, max_ms, slowest, max_bytes, biggest, valid, rejected, invalid, walked);
  std::vector<std::pair<int, std::string>> kinds;
  for (const auto& [k, n] : note_kinds) kinds.emplace_back(n, k);
  std::sort(kinds.rbegin(), kinds.rend());
  for (size_t i = 0; i < kinds.size() && i < 10; ++i)
    std::cout << "  not enforced " << kinds[i].first << "x: " << kinds[i].second << "\n";
  EXPECT_GT(exact, 500u);
  EXPECT_GT(walked, 1000u);
  ASSERT_TRUE(std::filesystem::exists(dir + "/node_modules/ajv-formats"))
      << "the independent validator is not installed: run `npm ci` in tests/structured (scripts/test.sh does)";
  const std::string cmd = "node " + dir + "/validate.mjs " + walks_path + " > " + walks_path + ".out 2>&1";
  const int rc = std::system(cmd.c_str());
  std::ifstream res(walks_path + ".out");
  const std::string summary((std::istreambuf_iterator<char>(res)), std::istreambuf_iterator<char>());
  std::cout << "ajv on the random sentences: " << summary;
  EXPECT_EQ(rc, 0) << "random sentences ajv rejects: " << summary;
}

// Each keyword issue #44 found refused (one schema each, as agents send them) compiles, and a valid instance matches.
TEST(JsonSchemaCombinations, KeywordsAgentsSendAllCompile) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"type":"string","format":"email"})", R"("a@b.co")"},
      {R"({"type":"object","propertyNames":{"minLength":1},"additionalProperties":{"type":"string"}})", R"({"k":"v"})"},
      {R"({"type":"array","prefixItems":[{"type":"string"},{"type":"number"}]})", R"(["a",1])"},
      {R"({"type":"string","pattern":"^[a-z]+$","minLength":1,"maxLength":8})", R"("abc")"},
      {R"({"type":"number","multipleOf":0.5})", "1.5"},
      {R"({"type":"array","uniqueItems":true})", "[1,2]"},
      {R"({"type":"object","minProperties":1})", R"({"a":1})"},
      {R"({"not":{"type":"string"}})", "1"},
      {R"({"if":{"type":"string"},"then":{"minLength":1}})", R"("x")"},
      {R"({"type":"object","patternProperties":{"^x":{"type":"integer"}}})", R"({"xa":1})"},
      {R"({"type":"string","nullable":true})", "null"},
      {R"({"type":"string","contentMediaType":"text/html"})", R"("<p>")"},
      {R"({"type":"object","properties":{"a":{"type":"string"}},"anyOf":[{"required":["a"]},{"required":["b"]}]})",
       R"({"a":"x"})"},
      {R"({"allOf":[{"type":"object","properties":{"a":{"type":"integer"}}},{"properties":{"b":{"type":"string"}}}]})",
       R"({"a":1,"b":"x"})"},
      {R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"$ref":"#/properties/a"}}})", R"({"a":1,"b":2})"},
      {R"({"type":"array","items":[{"type":"string"}],"additionalItems":{"type":"integer"}})", R"(["a",1,2])"},
      {R"({"type":"integer","minimum":0,"maximum":9007199254740991})", "9007199254740991"},
  };
  for (const auto& [schema, instance] : cases) {
    std::string gbnf;
    ASSERT_NO_THROW(gbnf = json_schema_to_gbnf(schema)) << schema;
    EXPECT_TRUE(matches(schema, instance)) << schema << " " << instance;
  }
}
