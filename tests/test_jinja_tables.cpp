// The Jinja renderer's filter and test tables: `x is name` and the filters that apply tests by name
// (selectattr, rejectattr, select, reject) use one test table, so they agree on every test and every value.
#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "chat/jinja_renderer.h"
#include "chat/jinja_template.h"

namespace kvik::jinja {
namespace {

// The rendering, or nullopt when the template raises an error.
std::optional<std::string> try_render(const std::string& tmpl) {
  try {
    return Template(tmpl).render(Value::object());
  } catch (const TemplateError&) {
    return std::nullopt;
  }
}

bool is_identifier(std::string_view s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  for (char c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  return true;
}

// Values of every kind, as template expressions (`nothing` is undefined, `m` a macro: callable).
const char* const kValues[] = {"nothing", "none",  "true",  "false", "0",      "1",        "2", "-3",
                               "1.5",     "'abc'", "'ABC'", "''",    "[1, 2]", "{'k': 1}", "m"};
const char* const kArgs[] = {"1", "'abc'", "[1, 2]", "none", "{'k': 1}"};

// For one test and value (and argument): `is`, selectattr, rejectattr, select and reject must agree, or all fail.
void expect_agreement(const std::string& name, const std::string& value, const char* arg) {
  const std::string prelude = "{% macro m() %}{% endmacro %}{% set v = " + value + " %}";
  const std::string a = arg ? std::string(", ") + arg : std::string();
  const auto count = [&](const std::string& filter) {
    return try_render(prelude + "{{ " + filter + " | list | length }}");
  };
  const auto selectattr = count("[{'a': v}] | selectattr('a', '" + name + "'" + a + ")");
  const auto rejectattr = count("[{'a': v}] | rejectattr('a', '" + name + "'" + a + ")");
  const auto select = count("[v] | select('" + name + "'" + a + ")");
  const auto reject = count("[v] | reject('" + name + "'" + a + ")");
  const std::string where = name + " on " + value + (arg ? std::string(" with ") + arg : "");
  ASSERT_EQ(selectattr.has_value(), select.has_value()) << where;
  ASSERT_EQ(rejectattr.has_value(), select.has_value()) << where;
  ASSERT_EQ(reject.has_value(), select.has_value()) << where;
  if (select) {
    EXPECT_EQ(*selectattr, *select) << where;
    EXPECT_EQ(*rejectattr, *select == "1" ? "0" : "1") << where;
    EXPECT_EQ(*reject, *rejectattr) << where;
  }
  if (!is_identifier(name)) return;  // `x is ==` is not syntax; == and != are reached through the filters only
  const auto is = try_render(prelude + "{{ v is " + name + (arg ? std::string("(") + arg + ")" : "") + " }}");
  ASSERT_EQ(is.has_value(), select.has_value()) << where << ": `is` " << (is ? *is : "raised");
  if (is) EXPECT_EQ(*is, *select == "1" ? "true" : "false") << where;
}

TEST(JinjaTables, IsAndSelectattrAgreeForEveryTestName) {
  const std::vector<std::string_view> names = test_names();
  ASSERT_GE(names.size(), 20u);
  for (std::string_view n : names) {
    const TestDef* t = find_test(n);
    ASSERT_NE(t, nullptr) << n;
    for (const char* v : kValues) {
      if (!t->needs_arg)
        expect_agreement(std::string(n), v, nullptr);
      else
        for (const char* a : kArgs) expect_agreement(std::string(n), v, a);
    }
  }
}

TEST(JinjaTables, SelectAndRejectApplyTestsToTheItems) {
  EXPECT_EQ(try_render("{{ [1, 2, 3, 4] | select('odd') | join(',') }}"), "1,3");
  EXPECT_EQ(try_render("{{ [1, 2, 3, 4] | reject('odd') | join(',') }}"), "2,4");
  EXPECT_EQ(try_render("{{ [0, 1, '', 'a'] | select | list | length }}"), "2");
  EXPECT_EQ(try_render("{{ [1, 2, 3] | select('in', [2, 3]) | join(',') }}"), "2,3");
  EXPECT_EQ(try_render("{{ [{'r': 'u'}, {'r': 's'}] | rejectattr('r', 'eq', 's') | map(attribute='r') | join }}"), "u");
  EXPECT_EQ(try_render("{{ 2 is ne 3 }} {{ 2 is in [1, 2] }} {{ 'b' is in 'abc' }}"), "true true true");
  // A test that needs a value says so in both places; an unknown test is an error in both.
  EXPECT_EQ(try_render("{{ 1 is equalto }}"), std::nullopt);
  EXPECT_EQ(try_render("{{ [{'a': 1}] | selectattr('a', 'equalto') | list }}"), std::nullopt);
  EXPECT_EQ(try_render("{{ 1 is frobnicated }}"), std::nullopt);
  EXPECT_EQ(try_render("{{ [1] | select('frobnicated') | list }}"), std::nullopt);
}

TEST(JinjaTables, EveryFilterNameIsInTheTable) {
  for (const char* f :
       {"trim",  "length", "count",      "default", "d",     "join",    "selectattr", "rejectattr", "select", "reject",
        "map",   "upper",  "lower",      "replace", "first", "last",    "tojson",     "list",       "string", "int",
        "float", "abs",    "capitalize", "title",   "items", "reverse", "unique",     "indent",     "sum"})
    EXPECT_NE(find_filter(f), nullptr) << f;
  EXPECT_EQ(find_filter("frobnicate"), nullptr);
  EXPECT_EQ(try_render("{{ ['a', 'b'] | map('upper') | join }}"), "AB");
  EXPECT_EQ(try_render("{{ ['a'] | map('frobnicate') | list }}"), std::nullopt);
}

}  // namespace
}  // namespace kvik::jinja
