// Tokens and syntax tree of the Jinja subset (see jinja_template.h for the supported language).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "chat/jinja_value.h"
#include "core/error.h"

namespace kvik::jinja {

// A template error: the message carries "line L, column C" of the template source.
class TemplateError : public Error {
 public:
  TemplateError(const std::string& what, int line, int column)
      : Error(fmt::format("chat template: line {}, column {}: {}", line, column, what)), line_(line), column_(column) {}
  int line() const { return line_; }
  int column() const { return column_; }

 private:
  int line_, column_;
};

struct Token {
  enum class Kind { kText, kOpenExpr, kCloseExpr, kOpenStmt, kCloseStmt, kName, kString, kInt, kFloat, kOp, kEnd };
  Kind kind;
  std::string text;
  int line = 1, column = 1;
};

// Tokenizes with HF's settings: trim_blocks and lstrip_blocks on, one trailing newline of the template
// dropped, `{%-`/`-%}` (and `{{-`, `{#-`) strip the whitespace beside the tag.
std::vector<Token> lex(const std::string& source);

struct Node;
using NodePtr = std::unique_ptr<Node>;

struct Node {
  enum class Kind {
    // statements
    kText,
    kOutput,
    kIf,
    kFor,
    kSet,
    kSetBlock,
    kMacro,
    kCallBlock,
    kBreak,
    kContinue,
    // expressions
    kLiteral,
    kName,
    kAttr,
    kIndex,
    kSlice,
    kCall,
    kFilter,
    kTest,
    kUnary,
    kBinary,
    kTernary,
    kList,
    kDict,
    kTuple,
  };
  Kind kind;
  int line = 1, column = 1;
  std::string str;            // text, name, operator, attribute, filter/test name
  Value value;                // literal
  std::vector<NodePtr> kids;  // operands / positional args / list items / dict keys+values alternating
  std::vector<std::pair<std::string, NodePtr>> kwargs;
  std::vector<std::string> names;  // for-loop targets, macro params, set targets
  std::vector<NodePtr> body, orelse;
  bool negated = false;  // `is not`
  int height = 1;        // of an expression's tree: evaluating it recurses this deep
};

// Parses the token stream into statements; throws TemplateError at the offending token.
std::vector<NodePtr> parse(const std::vector<Token>& tokens);

}  // namespace kvik::jinja
