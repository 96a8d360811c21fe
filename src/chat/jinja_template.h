// A Jinja subset, enough for the chat templates of Llama 3.x, Qwen2/3 and Mistral (module 2 of the course:
// the prompt a chat model actually sees), rendering byte-identically to @huggingface/jinja (transformers.js):
//   statements  if/elif/else, for (with loop.*, `else`, inline `if`, tuple unpacking), set (incl. ns.attr and
//               block set), macro, call, break/continue; {# comments #}; {%- -%} whitespace control with HF's
//               trim_blocks + lstrip_blocks
//   expressions literals, lists, dicts, tuples, + - * / // % ** ~, comparisons, in / not in, and/or/not,
//               a if c else b, .attr, [index], [a:b:c] slices, calls, |filters, `is` tests
//   filters     trim length count default/d join selectattr rejectattr map upper lower replace first last
//               tojson list string int float abs capitalize title items reverse unique indent sum
//   methods     str: startswith endswith split strip lstrip rstrip upper lower replace title capitalize
//               format join ; dict: items keys values get ; list: append? (no: templates are read-only)
//   globals     namespace() range() raise_exception() dict()
// Known difference from @huggingface/jinja 0.5.11: str.strip/lstrip/rstrip(chars) strip `chars` as Python does;
// the JS engine ignores the argument and trims all whitespace (the test conversations avoid the case).
// Untrusted templates: loop iterations, macro recursion, nesting and output size are bounded, and errors
// carry the template's line and column.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "chat/jinja_ast.h"

namespace kvik::jinja {

struct Limits {
  size_t max_output_bytes = 8u << 20;
  int64_t max_loop_iterations = 1'000'000;  // all loops of one render together
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
