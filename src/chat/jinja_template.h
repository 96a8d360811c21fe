// A Jinja subset, enough for the chat templates of Llama 3.x, Qwen2/3 and Mistral (what turns messages into
// the prompt a chat model actually sees), rendering byte-identically to @huggingface/jinja (transformers.js):
//   statements  if/elif/else, for (with loop.*, `else`, inline `if`, tuple unpacking), set (incl. ns.attr and
//               block set), macro, call, break/continue; {# comments #}; {%- -%} whitespace control with HF's
//               trim_blocks + lstrip_blocks
//   expressions literals, lists, dicts, tuples, + - * / // % ** ~, comparisons, in / not in, and/or/not,
//               a if c else b, .attr, [index], [a:b:c] slices, calls, |filters, `is` tests
//   filters     trim length count default/d join selectattr rejectattr select reject map upper lower replace
//               first last tojson list string int float abs capitalize title items reverse unique indent sum
//   tests       defined undefined none string number integer float boolean true false mapping iterable
//               sequence callable odd even lower upper equalto/eq/==/sameas ne/!= in (one table for `is`
//               and for selectattr/rejectattr/select/reject)
//   methods     str: startswith endswith split strip lstrip rstrip upper lower replace title capitalize
//               join ; dict: items keys values get ; lists have no methods (templates are read-only)
//   globals     namespace() range() raise_exception() dict()
// Where @huggingface/jinja 0.5.11 and Python's Jinja2 (transformers, vLLM) differ, kvik follows Jinja2 (the test
// conversations avoid these cases or state Jinja2's result):
//   - str.strip/lstrip/rstrip(chars) strip `chars`; the JS engine ignores the argument;
//   - selectattr/rejectattr apply their test to a missing attribute (undefined); the JS engine counts it as false,
//     so Mistral's selectattr("tool_calls", "undefined") selects nothing there;
//   - == compares lists and dicts by value; the JS engine compares them by identity.
// Untrusted templates (a model file's): the parser bounds nesting; a render bounds its loop iterations, macro
// recursion, recursion depth, output, string and value sizes, and the bytes it builds in all (so its time); a
// namespace cannot be stored inside itself. Errors carry the template's line and column.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "chat/jinja_ast.h"

namespace kvik::jinja {

struct Limits {
  size_t max_output_bytes = 8u << 20;       // the rendering; also the longest string a render may build
  int64_t max_loop_iterations = 1'000'000;  // all loops of one render together, and the elements range() makes
  int64_t max_work_bytes = 1ll << 30;       // all strings and lists one render builds or copies: bounds its time
  int max_call_depth = 64;                  // macro recursion
};

class Template {
 public:
  // Throws TemplateError (line, column) on a syntax error.
  explicit Template(const std::string& source, Limits limits = {});
  ~Template();
  Template(Template&&) noexcept;

  // `context`: a dict of top-level variables (messages, bos_token, ...). Throws TemplateError.
  std::string render(const Value& context) const;

 private:
  std::vector<NodePtr> program_;
  Limits limits_;
};

}  // namespace kvik::jinja
