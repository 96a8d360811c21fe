// Structured output through EngineCore on stories260K, a model that knows nothing about JSON: random
// schemas, regexes and grammars at temperature 1.0; every output that finishes with "stop" is checked by an
// independent validator (ajv and JavaScript's RegExp, tests/structured/validate.mjs). Also: seeded sampling
// gives the same text alone and inside a batch of 32 different requests.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "engine/engine_core.h"
#include "engine/structured/vocab_trie.h"
#include "model/llama.h"
#include "tokenizer/tokenizer.h"
#include "validation_util.h"

using namespace kvik;
using nlohmann::json;

namespace {

const std::string kModel = KVIK_SOURCE_DIR "/models/stories260K.gguf";
const std::string kRefDir = KVIK_SOURCE_DIR "/tests/structured";

struct Fixture {
  std::unique_ptr<LlamaModel> model = LlamaModel::load(kModel);
  std::unique_ptr<Tokenizer> tok = load_tokenizer(kModel);
};
Fixture& fx() {
  static Fixture f;
  return f;
}

std::unique_ptr<EngineCore> make_engine(int64_t max_num_seqs = 64) {
  EngineConfig c;
  c.max_num_seqs = max_num_seqs;
  c.num_kv_blocks = 2048;
  c.log_stats = false;
  auto e = std::make_unique<EngineCore>(*fx().model, c, std::vector<int32_t>{fx().tok->eos_id()});
  e->enable_structured_output(structured::VocabTrie::token_bytes_of(*fx().tok));
  return e;
}

struct Result {
  std::vector<int32_t> ids;
  std::string text;
  std::string finish_reason;
  std::string error;
};

std::map<std::string, Result> run_all(EngineCore& e) {
  std::map<std::string, Result> res;
  while (e.has_unfinished())
    for (auto& o : e.step()) {
      Result& r = res[o.request_id];
      for (int32_t t : o.new_token_ids) {
        r.ids.push_back(t);
        r.text += fx().tok->token_to_piece(t);
      }
      if (o.finished) {
        r.finish_reason = o.finish_reason;
        r.error = o.error;
      }
    }
  return res;
}

std::vector<int32_t> prompt(const std::string& text) { return fx().tok->encode(text, true, false); }

// ---- random schemas ----
struct SchemaGen {
  std::mt19937 rng;
  explicit SchemaGen(uint32_t seed) : rng(seed) {}
  int pick(int n) { return static_cast<int>(rng() % static_cast<uint32_t>(n)); }
  std::string word() {
    static const char* words[] = {"name",  "age", "id",    "tags", "kind", "value",
                                  "items", "ok",  "score", "note", "x",    "é"};
    return words[pick(12)] + std::to_string(pick(10));
  }
  json scalar_value() {
    switch (pick(4)) {
      case 0: return pick(100) - 50;
      case 1: return word();
      case 2: return pick(2) == 0;
      default: return nullptr;
    }
  }
  json gen(int depth) {
    const int kind = pick(depth >= 3 ? 8 : 11);
    switch (kind) {
      case 0: {
        const int mx = pick(8);
        json s = {{"type", "string"}, {"maxLength", mx}};
        if (pick(3) == 0) s["minLength"] = std::min(mx, pick(3));
        return s;
      }
      case 1: {
        static const char* patterns[] = {"^[a-z]{1,6}$",
                                         "^\\d{3}-\\d{4}$",
                                         "^(yes|no|maybe)$",
                                         "^[A-Z][a-z]{0,4}( [A-Z][a-z]{0,4})?$",
                                         "^\\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\\d|3[01])$",
                                         "^\"?[^\"\\\\]{0,3}\\\\?$"};
        return {{"type", "string"}, {"pattern", patterns[pick(6)]}};
      }
      case 2:
      case 3: {  // integer / number, half of them with bounds (inclusive or exclusive, either side or both)
        json s = {{"type", kind == 2 ? "integer" : "number"}};
        if (pick(2) == 0) return s;
        const int lo = pick(200) - 100, hi = lo + 1 + pick(150);
        if (pick(3) != 0) s[pick(2) ? "minimum" : "exclusiveMinimum"] = kind == 3 && pick(2) ? lo + 0.5 : lo;
        if (pick(3) != 0) s[pick(2) ? "maximum" : "exclusiveMaximum"] = hi;
        return s;
      }
      case 4: return {{"type", "boolean"}};
      case 5: return {{"type", "null"}};
      case 6: {
        json e = json::array();
        const int n = 1 + pick(4);
        for (int i = 0; i < n; ++i) {
          json v = scalar_value();
          if (std::find(e.begin(), e.end(), v) == e.end()) e.push_back(v);  // enum items must be unique
        }
        return {{"enum", e}};
      }
      case 7: return {{"const", scalar_value()}};
      case 8: {
        json p = json::object(), req = json::array();
        const int n = 1 + pick(4);
        for (int i = 0; i < n; ++i) {
          const std::string k = word();
          if (p.contains(k)) continue;
          p[k] = gen(depth + 1);
          if (pick(2) == 0) req.push_back(k);
        }
        json s = {{"type", "object"}, {"properties", p}, {"additionalProperties", false}};
        if (!req.empty()) s["required"] = req;
        return s;
      }
      case 9: {
        const int mn = pick(3);
        return {{"type", "array"}, {"items", gen(depth + 1)}, {"minItems", mn}, {"maxItems", mn + pick(4)}};
      }
      default: return {{"anyOf", json::array({gen(depth + 1), gen(depth + 1)})}};
    }
  }
  json top() {  // an object at the top, as response_format json_schema usually is
    json s;
    do s = gen(0);
    while (!s.contains("type") || s["type"] != "object");
    return s;
  }
};

void run_validator(const std::string& jsonl, int min_stop, const std::string& what) {
  ASSERT_TRUE(std::filesystem::exists(kRefDir + "/node_modules/ajv"))
      << "the independent validator is not installed: run `npm ci` in tests/structured (scripts/test.sh does)";
  const std::string cmd = "node " + kRefDir + "/validate.mjs " + jsonl + " > " + jsonl + ".out 2>&1";
  const int rc = std::system(cmd.c_str());
  std::ifstream in(jsonl + ".out");
  std::string out((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_EQ(rc, 0) << what << ": invalid outputs: " << out;
  const json summary = json::parse(out);
  std::cout << what << ": " << summary.dump() << "\n";
  EXPECT_GE(summary["stop"].get<int>(), min_stop) << what << ": too few outputs finished";
  EXPECT_EQ(summary["other"].get<int>(), 0) << what;
}

}  // namespace

TEST(StructuredEngine, TwoHundredRandomSchemasAllFinishedOutputsValidate) {
  auto e = make_engine();
  SchemaGen g(2024);
  std::vector<json> schemas;
  for (int i = 0; i < 200; ++i) {
    schemas.push_back(g.top());
    SamplingParams p;
    p.temperature = 1.0f;
    p.seed = 1000 + i;
    p.max_tokens = 400;
    p.structured_output = StructuredOutputSpec::json_schema(schemas.back().dump());
    ASSERT_EQ(msg(e->add_request("s" + std::to_string(i), prompt("Once upon a time"), p)), "") << schemas.back().dump();
  }
  auto res = run_all(*e);
  const std::string path = ::testing::TempDir() + "kvik_structured_schemas.jsonl";
  std::ofstream out(path);
  for (int i = 0; i < 200; ++i) {
    const Result& r = res["s" + std::to_string(i)];
    EXPECT_NE(r.finish_reason, "error") << r.error;
    out << json{{"id", i},
                {"check", "json_schema"},
                {"schema", schemas[i]},
                {"text", r.text},
                {"finish_reason", r.finish_reason}}
               .dump(-1, ' ', false, json::error_handler_t::replace)
        << "\n";
  }
  out.close();
  run_validator(path, 190, "200 random schemas");
}

TEST(StructuredEngine, RegexAndGrammarOutputsAlwaysMatch) {
  auto e = make_engine();
  struct Case {
    std::string check;
    StructuredOutputSpec spec;
    std::string pattern;
  };
  const std::string date = R"(\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01]))";
  const std::string email = R"([a-z0-9._%+-]{1,12}@[a-z0-9-]{1,10}(\.[a-z0-9-]{1,8}){0,2}\.[a-z]{2,4})";
  const std::string arithmetic =
      "root ::= expr\nexpr ::= term ((\"+\" | \"-\") term){0,3}\n"
      "term ::= factor ((\"*\" | \"/\") factor){0,2}\n"
      "factor ::= number | \"(\" expr \")\" | \"-\" factor\nnumber ::= [0-9]{1,3} (\".\" [0-9]{1,2})?\n";
  const std::string json_gbnf = R"GBNF(root ::= object
value ::= object | array | string | number | ("true" | "false" | "null") ws
object ::= "{" ws ( string ":" ws value ("," ws string ":" ws value){0,3} )? "}" ws
array ::= "[" ws ( value ("," ws value){0,3} )? "]" ws
string ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4}) ){0,8} "\"" ws
number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]{1,4})? ([eE] [-+]? [1-9] [0-9]{0,1})? ws
ws ::= | " " | "\n" [ \t]{0,4}
)GBNF";
  std::vector<Case> cases = {
      {"regex", StructuredOutputSpec::regex(date), date},
      {"regex", StructuredOutputSpec::regex(email), email},
      {"regex", StructuredOutputSpec::regex("(yes|no)"), "(yes|no)"},
      {"arithmetic", StructuredOutputSpec::grammar(arithmetic), ""},
      {"json", StructuredOutputSpec::grammar(json_gbnf), ""},
      {"choice", StructuredOutputSpec::choice({"red", "green", "blue"}), ""},
  };
  const int per_case = 20;
  for (size_t c = 0; c < cases.size(); ++c)
    for (int k = 0; k < per_case; ++k) {
      SamplingParams p;
      p.temperature = 1.0f;
      p.seed = 77 + k;
      p.max_tokens = 300;
      p.structured_output = cases[c].spec;
      ASSERT_EQ(msg(e->add_request(fmt::format("c{}-{}", c, k), prompt("Lily"), p)), "");
    }
  auto res = run_all(*e);
  const std::string path = ::testing::TempDir() + "kvik_structured_grammars.jsonl";
  std::ofstream out(path);
  for (size_t c = 0; c < cases.size(); ++c)
    for (int k = 0; k < per_case; ++k) {
      const Result& r = res[fmt::format("c{}-{}", c, k)];
      json j = {{"id", fmt::format("c{}-{}", c, k)},
                {"check", cases[c].check},
                {"text", r.text},
                {"finish_reason", r.finish_reason}};
      if (cases[c].check == "regex") j["pattern"] = cases[c].pattern;
      if (cases[c].check == "choice") j["choices"] = cases[c].spec.choices;
      out << j.dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
    }
  out.close();
  run_validator(path, static_cast<int>(cases.size()) * per_case * 9 / 10, "regex and grammar cases");
}

TEST(StructuredEngine, MaxTokensCutsWithLengthAndBadSpecsAreRefusedByName) {
  auto e = make_engine();
  SamplingParams p;
  p.max_tokens = 3;
  p.structured_output = StructuredOutputSpec::json_schema(
      R"({"type":"object","properties":{"a":{"type":"string","minLength":20,"maxLength":30}},"required":["a"]})");
  ASSERT_EQ(msg(e->add_request("cut", prompt("Lily"), p)), "");
  p.structured_output = StructuredOutputSpec::json_schema(R"({"type":"object","properties":{"n":{"type":"integr"}}})");
  const std::string err = msg(e->add_request("bad", prompt("Lily"), p));
  EXPECT_NE(err.find("/properties/n"), std::string::npos) << err;
  EXPECT_NE(err.find("integr"), std::string::npos) << err;
  p.structured_output = StructuredOutputSpec::grammar("root ::= undefined-rule\n");
  EXPECT_NE(msg(e->add_request("bad2", prompt("Lily"), p)).find("'undefined-rule' is used but not defined"),
            std::string::npos);
  p.structured_output = StructuredOutputSpec::regex("(a");
  EXPECT_NE(msg(e->add_request("bad3", prompt("Lily"), p)).find("regex:"), std::string::npos);
  auto res = run_all(*e);
  ASSERT_EQ(res.size(), 1u);
  EXPECT_EQ(res["cut"].finish_reason, "length");
  EXPECT_EQ(res["cut"].ids.size(), 3u);
  EXPECT_EQ(res["cut"].text.rfind("{", 0), 0u) << res["cut"].text;
}

TEST(StructuredEngine, NoTokenCanContinueIsReportedNotSampled) {
  // A vocabulary without any token containing 'z': after "a" the grammar needs a 'z' that no token can
  // give, so the request must end with finish_reason "error" (not "stop", and never an invalid token).
  EngineConfig c;
  c.num_kv_blocks = 256;
  c.log_stats = false;
  EngineCore e(*fx().model, c, std::vector<int32_t>{fx().tok->eos_id()});
  auto bytes = structured::VocabTrie::token_bytes_of(*fx().tok);
  for (auto& b : bytes)
    if (b.find('z') != std::string::npos) b.clear();
  e.enable_structured_output(std::move(bytes));
  SamplingParams p;
  p.structured_output = StructuredOutputSpec::grammar("root ::= \"a\" \"z\"\n");
  ASSERT_EQ(msg(e.add_request("dead", prompt("Lily"), p)), "");
  auto res = run_all(e);
  EXPECT_EQ(res["dead"].finish_reason, "error");
  EXPECT_EQ(res["dead"].text, "a");
  EXPECT_NE(res["dead"].error.find("no token"), std::string::npos) << res["dead"].error;
}

// A seeded request gives the same tokens alone and inside a batch of 32 different requests (other
// prompts, temperatures, top-k/p, constrained and not).
TEST(StructuredEngine, SeededSamplingIsTheSameAloneAndInABatchOf32) {
  auto target_params = [] {
    SamplingParams p;
    p.temperature = 1.0f;
    p.top_p = 0.95f;
    p.seed = 12345;
    p.max_tokens = 60;
    return p;
  };
  for (bool constrained : {false, true}) {
    SamplingParams tp = target_params();
    if (constrained)
      tp.structured_output = StructuredOutputSpec::json_schema(
          R"({"type":"object","properties":{"name":{"type":"string","maxLength":12},"n":{"type":"integer"}},"required":["name"]})");
    auto alone = make_engine();
    ASSERT_EQ(msg(alone->add_request("t", prompt("Once upon a time"), tp)), "");
    const Result a = run_all(*alone)["t"];
    ASSERT_FALSE(a.ids.empty());

    auto batch = make_engine();
    SchemaGen g(9);
    for (int i = 0; i < 31; ++i) {
      SamplingParams p;
      p.temperature = 0.3f + 0.05f * i;
      p.top_k = i % 3 == 0 ? 20 : 0;
      p.min_p = i % 4 == 1 ? 0.05f : 0.0f;
      p.seed = 500 + i;
      p.max_tokens = 20 + i;
      if (i % 2 == 0) p.structured_output = StructuredOutputSpec::json_schema(g.top().dump());
      const std::string text = i % 3 == 0 ? "Lily and Tom" : i % 3 == 1 ? "The dog" : "One day, a little girl";
      ASSERT_EQ(msg(batch->add_request("o" + std::to_string(i), prompt(text), p)), "");
      if (i == 15) ASSERT_EQ(msg(batch->add_request("t", prompt("Once upon a time"), tp)), "");
    }
    const Result b = run_all(*batch)["t"];
    EXPECT_EQ(a.ids, b.ids) << "constrained=" << constrained << "\nalone: " << a.text << "\nbatch: " << b.text;
    EXPECT_EQ(a.finish_reason, b.finish_reason);
  }
}
