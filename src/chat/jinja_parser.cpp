// Recursive descent over Jinja's precedence ladder (lowest first):
//   ternary `a if c else b` < or < and < not < comparisons/in < + - < ~ < * / // % < ** < unary - <
//   postfix: .attr [index] [a:b:c] (call) |filter `is` test
#include "chat/jinja_ast.h"

namespace kvik::jinja {

namespace {

// Nesting bound: a hostile template cannot overflow the stack, neither here nor when it renders. It bounds the
// parser's recursion (statements, parentheses, unary operators) and the height of every expression tree, which
// left-to-right chains (a.b.c..., 1+1+1..., x|f|f...) build without recursing.
constexpr int kMaxDepth = 200;

class Parser {
 public:
  explicit Parser(const std::vector<Token>& t) : t_(t) {}

  std::vector<NodePtr> run() {
    std::vector<NodePtr> out = block({});
    if (peek().kind != Token::Kind::kEnd) error(peek(), "unexpected tag");
    return out;
  }

 private:
  using K = Token::Kind;

  const Token& peek(size_t k = 0) const { return t_[std::min(p_ + k, t_.size() - 1)]; }
  const Token& next() { return t_[std::min(p_++, t_.size() - 1)]; }
  [[noreturn]] void error(const Token& t, const std::string& what) const {
    const std::string near = t.text.size() > 40 ? t.text.substr(0, 37) + "..." : t.text;
    throw TemplateError(what + (t.kind == K::kEnd ? " (at end of template)" : " near '" + near + "'"), t.line,
                        t.column);
  }
  bool is_op(const char* op, size_t k = 0) const { return peek(k).kind == K::kOp && peek(k).text == op; }
  bool is_name(const char* n, size_t k = 0) const { return peek(k).kind == K::kName && peek(k).text == n; }
  void expect_op(const char* op) {
    if (!is_op(op)) error(peek(), fmt::format("expected '{}'", op));
    ++p_;
  }
  void expect_name(const char* n) {
    if (!is_name(n)) error(peek(), fmt::format("expected '{}'", n));
    ++p_;
  }
  std::string name() {
    if (peek().kind != K::kName) error(peek(), "expected a name");
    return next().text;
  }
  void close_stmt() {
    if (peek().kind != K::kCloseStmt) error(peek(), "expected '%}'");
    ++p_;
  }
  // `n` with its height set from its operands; refused when the tree gets taller than kMaxDepth.
  NodePtr measured(NodePtr n) {
    int h = 0;
    for (const NodePtr& k : n->kids)
      if (k) h = std::max(h, k->height);
    for (const auto& [name, k] : n->kwargs) h = std::max(h, k->height);
    n->height = h + 1;
    if (n->height > kMaxDepth) {
      const Token at{Token::Kind::kOp, "", n->line, n->column};
      error(at, "expression nests too deep");
    }
    return n;
  }
  NodePtr node(Node::Kind k, const Token& at) {
    auto n = std::make_unique<Node>();
    n->kind = k;
    n->line = at.line;
    n->column = at.column;
    return n;
  }
  struct Depth {
    Parser& p;
    explicit Depth(Parser& p, const Token& t) : p(p) {
      if (++p.depth_ > kMaxDepth) p.error(t, "template nesting is too deep");
    }
    ~Depth() { --p.depth_; }
  };

  // Statements until one of `ends` ({% endfor %}, {% else %}...) is the next tag; that tag is not consumed.
  std::vector<NodePtr> block(std::initializer_list<const char*> ends) {
    std::vector<NodePtr> out;
    for (;;) {
      const Token& t = peek();
      if (t.kind == K::kEnd) {
        if (ends.size() > 0) error(t, fmt::format("missing '{{% {} %}}'", *ends.begin()));
        return out;
      }
      if (t.kind == K::kText) {
        auto n = node(Node::Kind::kText, t);
        n->str = next().text;
        out.push_back(std::move(n));
      } else if (t.kind == K::kOpenExpr) {
        ++p_;
        auto n = node(Node::Kind::kOutput, t);
        n->kids.push_back(expr());
        if (peek().kind != K::kCloseExpr) error(peek(), "expected '}}'");
        ++p_;
        out.push_back(std::move(n));
      } else if (t.kind == K::kOpenStmt) {
        for (const char* e : ends)
          if (is_name(e, 1)) return out;
        ++p_;
        out.push_back(statement());
      } else {
        error(t, "unexpected token");
      }
    }
  }

  NodePtr statement() {
    const Token& t = peek();
    Depth d(*this, t);
    const std::string kw = name();
    if (kw == "if") return if_stmt(t);
    if (kw == "for") return for_stmt(t);
    if (kw == "set") return set_stmt(t);
    if (kw == "macro") {
      auto n = node(Node::Kind::kMacro, t);
      n->str = name();
      params(*n);
      body_until(*n, "endmacro");
      return n;
    }
    if (kw == "call") {
      auto n = node(Node::Kind::kCallBlock, t);
      if (is_op("(")) params(*n);
      n->kids.push_back(expr());
      body_until(*n, "endcall");
      return n;
    }
    if (kw == "break" || kw == "continue") {
      auto n = node(kw == "break" ? Node::Kind::kBreak : Node::Kind::kContinue, t);
      close_stmt();
      return n;
    }
    error(t, fmt::format("unknown statement '{}'", kw));
  }

  // The rest of the opening tag, the body, and the closing {% end %} tag.
  void body_until(Node& n, const char* end) {
    close_stmt();
    n.body = block({end});
    p_ += 2;
    close_stmt();
  }

  NodePtr for_stmt(const Token& t) {
    auto n = node(Node::Kind::kFor, t);
    n->names.push_back(name());
    while (is_op(",")) {
      ++p_;
      n->names.push_back(name());
    }
    expect_name("in");
    n->kids.push_back(ternary_free_or());
    if (is_name("if")) {
      ++p_;
      n->kids.push_back(expr());
    }
    close_stmt();
    n->body = block({"endfor", "else"});
    if (is_name("else", 1)) {
      p_ += 2;
      close_stmt();
      n->orelse = block({"endfor"});
    }
    p_ += 2;
    close_stmt();
    return n;
  }

  // {% set a = x %}, {% set a, b = x %}, {% set ns.attr = x %}, or the block form {% set a %}...{% endset %}.
  NodePtr set_stmt(const Token& t) {
    std::vector<std::string> targets{name()};
    std::string attr;
    if (is_op(".")) {
      ++p_;
      attr = name();
    }
    while (is_op(",")) {
      ++p_;
      targets.push_back(name());
    }
    const bool block_form = !is_op("=");
    auto n = node(block_form ? Node::Kind::kSetBlock : Node::Kind::kSet, t);
    n->names = targets;
    n->str = attr;
    if (block_form) {
      body_until(*n, "endset");
      return n;
    }
    ++p_;
    n->kids.push_back(expr());
    close_stmt();
    return n;
  }

  // `(a, b=default, ...)` for macros and call blocks: names in n.names, defaults in n.kwargs.
  void params(Node& n) {
    expect_op("(");
    while (!is_op(")")) {
      const std::string p = name();
      n.names.push_back(p);
      if (is_op("=")) {
        ++p_;
        n.kwargs.emplace_back(p, expr());
      }
      if (!is_op(",")) break;
      ++p_;
    }
    expect_op(")");
  }

  NodePtr if_stmt(const Token& t) {
    auto n = node(Node::Kind::kIf, t);
    n->kids.push_back(expr());
    close_stmt();
    n->body = block({"endif", "elif", "else"});
    if (is_name("elif", 1)) {
      const Token& at = peek(1);
      p_ += 2;
      n->orelse.push_back(if_stmt(at));
      return n;  // the nested if consumed {% endif %}
    }
    if (is_name("else", 1)) {
      p_ += 2;
      close_stmt();
      n->orelse = block({"endif"});
    }
    p_ += 2;
    close_stmt();
    return n;
  }

  // Expressions ---------------------------------------------------------------------------------------

  NodePtr expr() {
    Depth d(*this, peek());
    NodePtr e = ternary_free_or();
    if (is_name("if")) {
      const Token& t = next();
      auto n = node(Node::Kind::kTernary, t);
      NodePtr cond = ternary_free_or();
      NodePtr other;
      if (is_name("else")) {
        ++p_;
        other = expr();
      } else {
        other = node(Node::Kind::kLiteral, t);  // undefined
      }
      n->kids.push_back(std::move(cond));
      n->kids.push_back(std::move(e));
      n->kids.push_back(std::move(other));
      return measured(std::move(n));
    }
    return e;
  }

  NodePtr binary(NodePtr l, const Token& op, NodePtr r) {
    auto n = node(Node::Kind::kBinary, op);
    n->str = op.text;
    n->kids.push_back(std::move(l));
    n->kids.push_back(std::move(r));
    return measured(std::move(n));
  }

  NodePtr ternary_free_or() {
    NodePtr l = and_expr();
    while (is_name("or")) {
      const Token& op = next();
      l = binary(std::move(l), op, and_expr());
    }
    return l;
  }
  NodePtr and_expr() {
    NodePtr l = not_expr();
    while (is_name("and")) {
      const Token& op = next();
      l = binary(std::move(l), op, not_expr());
    }
    return l;
  }
  NodePtr not_expr() {
    if (is_name("not")) {
      const Token& t = next();
      Depth d(*this, t);
      auto n = node(Node::Kind::kUnary, t);
      n->str = "not";
      n->kids.push_back(not_expr());
      return measured(std::move(n));
    }
    return compare();
  }
  NodePtr compare() {
    NodePtr l = additive();
    for (;;) {
      const Token& t = peek();
      if (t.kind == K::kOp &&
          (t.text == "==" || t.text == "!=" || t.text == "<" || t.text == ">" || t.text == "<=" || t.text == ">=")) {
        ++p_;
        l = binary(std::move(l), t, additive());
      } else if (is_name("in")) {
        ++p_;
        l = binary(std::move(l), t, additive());
      } else if (is_name("not") && is_name("in", 1)) {
        p_ += 2;
        auto n = binary(std::move(l), t, additive());
        n->str = "not in";
        l = std::move(n);
      } else {
        return l;
      }
    }
  }
  NodePtr additive() {
    NodePtr l = concat();
    while (is_op("+") || is_op("-")) {
      const Token& op = next();
      l = binary(std::move(l), op, concat());
    }
    return l;
  }
  NodePtr concat() {
    NodePtr l = multiplicative();
    while (is_op("~")) {
      const Token& op = next();
      l = binary(std::move(l), op, multiplicative());
    }
    return l;
  }
  NodePtr multiplicative() {
    NodePtr l = power();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& op = next();
      l = binary(std::move(l), op, power());
    }
    return l;
  }
  NodePtr power() {
    NodePtr l = unary();
    while (is_op("**")) {
      const Token& op = next();
      l = binary(std::move(l), op, unary());
    }
    return l;
  }
  NodePtr unary() {
    if (is_op("-") || is_op("+")) {
      const Token& t = next();
      Depth d(*this, t);
      auto n = node(Node::Kind::kUnary, t);
      n->str = t.text;
      n->kids.push_back(unary());
      return postfix_filters(measured(std::move(n)));
    }
    return postfix_filters(postfix(primary()));
  }

  // Call arguments after '(' : positional, then name=value.
  void call_args(Node& n) {
    expect_op("(");
    while (!is_op(")")) {
      if (peek().kind == K::kName && is_op("=", 1)) {
        const std::string k = next().text;
        ++p_;
        n.kwargs.emplace_back(k, expr());
      } else {
        n.kids.push_back(expr());
      }
      if (!is_op(",")) break;
      ++p_;
    }
    expect_op(")");
  }

  NodePtr postfix(NodePtr e) {
    for (;;) {
      const Token& t = peek();
      if (is_op(".")) {
        ++p_;
        auto n = node(Node::Kind::kAttr, t);
        n->str = name();
        n->kids.push_back(std::move(e));
        e = measured(std::move(n));
      } else if (is_op("[")) {
        ++p_;
        NodePtr idx[3];
        bool slice = false;
        for (int k = 0; k < 3; ++k) {
          if (!is_op(":") && !is_op("]")) idx[k] = expr();
          if (k < 2 && is_op(":")) {
            ++p_;
            slice = true;
          } else {
            break;
          }
        }
        expect_op("]");
        auto n = node(slice ? Node::Kind::kSlice : Node::Kind::kIndex, t);
        n->kids.push_back(std::move(e));
        for (auto& i : idx) n->kids.push_back(i ? std::move(i) : nullptr);
        if (!slice) n->kids.resize(2);
        if (!slice && !n->kids[1]) error(t, "empty subscript");
        e = measured(std::move(n));
      } else if (is_op("(")) {
        auto n = node(Node::Kind::kCall, t);
        n->kids.push_back(std::move(e));
        call_args(*n);
        e = measured(std::move(n));
      } else {
        return e;
      }
    }
  }

  NodePtr postfix_filters(NodePtr e) {
    for (;;) {
      const Token& t = peek();
      if (is_op("|")) {
        ++p_;
        auto n = node(Node::Kind::kFilter, t);
        n->str = name();
        n->kids.push_back(std::move(e));
        if (is_op("(")) call_args(*n);
        e = postfix(measured(std::move(n)));
      } else if (is_name("is")) {
        ++p_;
        auto n = node(Node::Kind::kTest, t);
        if (is_name("not")) {
          ++p_;
          n->negated = true;
        }
        // Tests named like keywords: none, true, false.
        n->str = name();
        n->kids.push_back(std::move(e));
        if (is_op("(")) {
          call_args(*n);
        } else if (peek().kind == K::kString || peek().kind == K::kInt || peek().kind == K::kFloat || is_op("[") ||
                   is_op("{") ||
                   (peek().kind == K::kName && !is_name("and") && !is_name("or") && !is_name("else") &&
                    !is_name("if") && !is_name("in") && !is_name("not") && !is_name("is"))) {
          n->kids.push_back(primary());  // `x is divisibleby 3`, `x is sameas y`, `x is in [1, 2]`
        }
        e = measured(std::move(n));
      } else {
        return e;
      }
    }
  }

  NodePtr primary() {
    const Token& t = peek();
    Depth d(*this, t);
    switch (t.kind) {
      case K::kString: {
        auto n = node(Node::Kind::kLiteral, t);
        std::string s = next().text;
        while (peek().kind == K::kString) s += next().text;  // adjacent literals concatenate
        n->value = Value::string(std::move(s));
        return n;
      }
      case K::kInt: {
        auto n = node(Node::Kind::kLiteral, t);
        try {
          n->value = Value::integer(std::stoll(next().text));
        } catch (const std::exception&) {
          error(t, "integer literal out of range");
        }
        return n;
      }
      case K::kFloat: {
        auto n = node(Node::Kind::kLiteral, t);
        n->value = Value::number(std::strtod(next().text.c_str(), nullptr));  // out of range: inf, as Python
        return n;
      }
      case K::kName: {
        ++p_;
        auto n = node(Node::Kind::kLiteral, t);
        if (t.text == "true" || t.text == "True")
          n->value = Value::boolean(true);
        else if (t.text == "false" || t.text == "False")
          n->value = Value::boolean(false);
        else if (t.text == "none" || t.text == "None")
          n->value = Value::none();
        else {
          n->kind = Node::Kind::kName;
          n->str = t.text;
        }
        return n;
      }
      case K::kOp:
        if (t.text == "(") return parenthesized(t);
        if (t.text == "[" || t.text == "{") return list_or_dict(t);
        break;
      default: break;
    }
    error(t, "expected an expression");
  }

  // (x) or a tuple (a, b, ...).
  NodePtr parenthesized(const Token& t) {
    ++p_;
    NodePtr first = expr();
    if (!is_op(",")) {
      expect_op(")");
      return first;
    }
    auto n = node(Node::Kind::kTuple, t);
    n->kids.push_back(std::move(first));
    while (is_op(",")) {
      ++p_;
      if (is_op(")")) break;
      n->kids.push_back(expr());
    }
    expect_op(")");
    return measured(std::move(n));
  }

  // [a, b, ...] or {k: v, ...}; kids alternate keys and values for a dict.
  NodePtr list_or_dict(const Token& t) {
    const bool dict = t.text == "{";
    const char* close = dict ? "}" : "]";
    ++p_;
    auto n = node(dict ? Node::Kind::kDict : Node::Kind::kList, t);
    while (!is_op(close)) {
      n->kids.push_back(expr());
      if (dict) {
        expect_op(":");
        n->kids.push_back(expr());
      }
      if (!is_op(",")) break;
      ++p_;
    }
    expect_op(close);
    return measured(std::move(n));
  }

  const std::vector<Token>& t_;
  size_t p_ = 0;
  int depth_ = 0;
};

}  // namespace

std::vector<NodePtr> parse(const std::vector<Token>& tokens) { return Parser(tokens).run(); }

}  // namespace kvik::jinja
