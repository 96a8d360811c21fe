// Mutation driver for fuzz_jinja.cpp (see driver_common.h), so the Jinja fuzz target is also a plain ctest:
//   fuzz_jinja_driver [--iterations N] [--seed S] [FILE...]
// A FILE is a template, or a tokenizer_config.json whose chat_template is taken (ctest passes the real Llama 3,
// Llama 3.1, Qwen3 and Mistral-Nemo ones from tests/tokenizer_ref). Built-in seeds cover the rest of the language
// and the hostile shapes (deep nesting, recursion, big loops and strings, a namespace stored in itself).
// Mutations: Jinja syntax pieces and boundary numbers inserted or swapped in, ranges repeated (nesting, long
// chains), pieces spliced in from another seed, and structure-blind byte edits.
#include <nlohmann/json.hpp>

#include "driver_common.h"

namespace {

using namespace kvik::fuzz;

std::vector<uint8_t> load(const std::string& path, std::vector<uint8_t> file) {
  if (!path.ends_with(".json")) return file;
  const auto j = nlohmann::json::parse(file.begin(), file.end(), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("chat_template")) {
    std::fprintf(stderr, "%s: no chat_template, used as a template as is\n", path.c_str());
    return file;
  }
  const auto& t = j["chat_template"];
  if (t.is_string()) return bytes_of(t.get<std::string>());
  if (t.is_array() && !t.empty() && t[0].contains("template")) return bytes_of(t[0]["template"].get<std::string>());
  return file;
}

std::vector<Seed> builtin_seeds() {
  static constexpr const char* kTemplates[] = {
      "{% for m in messages %}{{ m.role | upper }}: {{ m.content | trim }}{% if not loop.last %}\n{% endif %}{% endfor "
      "%}",
      "{%- set ns = namespace(n=0, last='') -%}{%- for m in messages[::-1] if m.role != 'tool' -%}"
      "{%- set ns.n = ns.n + 1 -%}{%- set ns.last = m.role ~ ns.n -%}{%- endfor -%}{{ ns.last }} {{ ns.n // 2 }}",
      "{% macro show(x, depth=0) %}{% if x is mapping %}{% for k, v in x.items() %}{{ k }}={{ show(v, depth + 1) }};"
      "{% endfor %}{% elif x is string %}'{{ x }}'{% else %}{{ x | tojson }}{% endif %}{% endmacro %}{{ show(tools) }}",
      "{% macro w(a, b='B') %}<{{ caller() }}|{{ a }}{{ b }}>{% endmacro %}{% call w(1) %}body{% endcall %}",
      "{{ (messages | selectattr('role', 'equalto', 'user') | list | length) * 3 % 7 ** 2 }} {{ 7 / 2 }} {{ -3 // 2 }}",
      "{{ messages[1].content.split(' ')[1:-1] | join('+') }} {{ 'abc'[::-1] }} {{ 'x' in 'xyz' }} {{ [1, 2] + [3] }}",
      "{{ {'a': [1, 2.5, none, true], 'b': {'c': 'd'}} | tojson(indent=2) }} {{ dict(x=1).get('x', 2) }}",
      "{% set t %}{% for i in range(3) %}{{ i }}{% if i == 1 %}{% break %}{% endif %}{% endfor %}{% endset %}{{ t }}",
      "{{ messages | map(attribute='role') | unique | list }} {{ messages | rejectattr('tool_calls', 'undefined') | "
      "list }}",
      "{%- if messages[0].role == 'system' %}{{ raise_exception('system: ' ~ messages[0].content) }}{% endif %}",
      "{{ tools[0].function.parameters.properties.unit.enum | first | capitalize }} {{ 'a b'.title() }} {{ '%' }}",
      "{{ x.y.z }}{{ none.a }}{{ (1, 2)[0] }}{{ 'a' * 3 }}{{ 1 if true }}{{ '5' | int + '1.5' | float }}{{ -5 | abs }}",
      // Hostile shapes, all of which must end in a TemplateError or a bounded rendering.
      "{% for i in range(1000) %}{% for j in range(1000) %}{{ i }}{% endfor %}{% endfor %}",
      "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
      "{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s | "
      "length }}",
      "{% set ns = namespace(l=[1]) %}{% for i in range(64) %}{% set ns.l = ns.l + ns.l %}{% endfor %}{{ ns.l | length "
      "}}",
      "{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}",
      "{% for i in range(100000) %}{% set x = [x] %}{% endfor %}{{ x }}",
      "{{ 9223372036854775807 + 1 }}{{ -9223372036854775807 - 2 }}{{ 3037000500 * 3037000500 }}{{ 2 ** 64 }}",
      "{{ [1, 2, 3][1:9223372036854775807:9223372036854775807] }}{{ range(9223372036854775807, 0, "
      "-4611686018427387904) }}",
      "{{ 'x' | indent(1000000000) }}{{ 'ab'.replace('a', 'x' * 1000) }}{{ 1e308 * 10 }}",
  };
  std::vector<Seed> s;
  for (const char* t : kTemplates) s.push_back({"<builtin>", bytes_of(t), {}});
  return s;
}

std::vector<uint8_t> mutate(const std::vector<Seed>& seeds, size_t which, Rng& r) {
  static constexpr const char* kPieces[] = {"{{",
                                            "}}",
                                            "{%",
                                            "%}",
                                            "{#",
                                            "#}",
                                            "{{-",
                                            "-}}",
                                            "{%-",
                                            "-%}",
                                            "(",
                                            ")",
                                            "[",
                                            "]",
                                            "{",
                                            "}",
                                            ",",
                                            ":",
                                            ".",
                                            "|",
                                            "~",
                                            "+",
                                            "-",
                                            "*",
                                            "/",
                                            "//",
                                            "%",
                                            "**",
                                            "==",
                                            "!=",
                                            "<",
                                            ">=",
                                            "=",
                                            "'",
                                            "\"",
                                            "\\",
                                            " if ",
                                            " else ",
                                            " and ",
                                            " or ",
                                            " not ",
                                            " in ",
                                            " is ",
                                            " is not ",
                                            "for x in messages",
                                            "endfor",
                                            "if true",
                                            "elif",
                                            "else",
                                            "endif",
                                            "set ns.x = ",
                                            "set x = ",
                                            "endset",
                                            "macro m(a, b=1)",
                                            "endmacro",
                                            "call m(1)",
                                            "endcall",
                                            "caller()",
                                            "break",
                                            "continue",
                                            "loop.index0",
                                            "loop.last",
                                            "loop.previtem",
                                            "namespace(",
                                            "range(",
                                            "raise_exception(",
                                            "dict(",
                                            "messages",
                                            "messages[0]",
                                            "tools",
                                            "none",
                                            "true",
                                            "False",
                                            "x.items()",
                                            ".get('a', 1)",
                                            ".split()",
                                            ".strip('x')",
                                            ".startswith('a')",
                                            "|tojson",
                                            "|length",
                                            "|join(',')",
                                            "|selectattr('role')",
                                            "|map(attribute='role')",
                                            "|map('upper')",
                                            "|list",
                                            "|first",
                                            "|unique",
                                            "|indent(4, true)",
                                            "|int",
                                            "|float",
                                            "|string",
                                            "|items",
                                            "|default('d', true)",
                                            "|replace('a', 'bb')",
                                            "|sum",
                                            "|reverse",
                                            "|trim",
                                            "[::-1]",
                                            "[1:]",
                                            "[-1]",
                                            "0",
                                            "1",
                                            "-1",
                                            "2.5",
                                            "1e",
                                            "9223372036854775807",
                                            "9223372036854775808",
                                            "-9223372036854775808",
                                            "4611686018427387904",
                                            "99999999999999999999.5",
                                            "\n",
                                            " ",
                                            "\xc3\xa5",
                                            "\xff",
                                            "\xf0\x9f\xa6\x99"};
  std::vector<uint8_t> b = seeds[which].bytes;
  const int n = 1 + static_cast<int>(r.below(4));
  for (int k = 0; k < n; ++k) {
    switch (r.below(5)) {
      case 0: {  // insert a piece
        const std::string_view p = kPieces[r.below(std::size(kPieces))];
        b.insert(b.begin() + static_cast<std::ptrdiff_t>(r.below(b.size() + 1)), p.begin(), p.end());
        break;
      }
      case 1: {  // replace a short range by a piece
        if (b.empty()) break;
        const size_t at = r.below(b.size()), len = std::min(b.size() - at, 1 + r.below(8));
        const std::string_view p = kPieces[r.below(std::size(kPieces))];
        b.erase(b.begin() + static_cast<std::ptrdiff_t>(at), b.begin() + static_cast<std::ptrdiff_t>(at + len));
        b.insert(b.begin() + static_cast<std::ptrdiff_t>(at), p.begin(), p.end());
        break;
      }
      case 2: {  // repeat a range many times (deep nesting, long operator chains)
        if (b.empty()) break;
        const size_t at = r.below(b.size()), len = std::min(b.size() - at, 1 + r.below(12));
        const std::vector<uint8_t> piece(b.begin() + static_cast<std::ptrdiff_t>(at),
                                         b.begin() + static_cast<std::ptrdiff_t>(at + len));
        const size_t times = r.chance(4) ? 1000 + r.below(30000) : 1 + r.below(8);
        std::vector<uint8_t> rep;
        for (size_t t = 0; t < times && rep.size() < (1u << 20); ++t) rep.insert(rep.end(), piece.begin(), piece.end());
        b.insert(b.begin() + static_cast<std::ptrdiff_t>(at), rep.begin(), rep.end());
        break;
      }
      case 3: {  // splice in a range of another seed
        const Seed& o = seeds[r.below(seeds.size())];
        if (o.bytes.empty()) break;
        const size_t from = r.below(o.bytes.size()), len = std::min(o.bytes.size() - from, 1 + r.below(200));
        b.insert(b.begin() + static_cast<std::ptrdiff_t>(r.below(b.size() + 1)),
                 o.bytes.begin() + static_cast<std::ptrdiff_t>(from),
                 o.bytes.begin() + static_cast<std::ptrdiff_t>(from + len));
        break;
      }
      case 4: blind_mutation(b, b.size(), r); break;
    }
  }
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  return run_driver(
      argc, argv,
      {.name = "fuzz_jinja_driver", .load = load, .builtin = builtin_seeds(), .prepare = nullptr, .mutate = mutate});
}
