#include <cctype>

#include "chat/jinja_ast.h"

namespace kvik::jinja {

namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

class Lexer {
 public:
  explicit Lexer(const std::string& src) : src_(src) {
    // HF (and @huggingface/jinja) drop one trailing newline of the template.
    if (src_.ends_with('\n')) src_.pop_back();
  }

  std::vector<Token> run() {
    while (pos_ < src_.size()) {
      lex_text();
      if (pos_ >= src_.size()) break;
      lex_tag();
    }
    push(Token::Kind::kEnd, "");
    return std::move(tokens_);
  }

 private:
  [[noreturn]] void error(const std::string& what) const { throw TemplateError(what, line_, col_); }

  void advance(size_t n = 1) {
    for (size_t k = 0; k < n && pos_ < src_.size(); ++k, ++pos_) {
      if (src_[pos_] == '\n') {
        ++line_;
        col_ = 1;
      } else {
        ++col_;
      }
    }
  }
  bool at(std::string_view s) const { return std::string_view(src_).substr(pos_).starts_with(s); }
  void push(Token::Kind k, std::string text, int line = 0, int col = 0) {
    tokens_.push_back({k, std::move(text), line ? line : line_, col ? col : col_});
  }

  void lex_text() {
    std::string text;
    if (strip_next_) {
      while (pos_ < src_.size() && is_space(src_[pos_])) advance();
      strip_next_ = false;
    }
    const int line = line_, col = col_;
    const size_t start = pos_;
    while (pos_ < src_.size() && !(src_[pos_] == '{' && pos_ + 1 < src_.size() &&
                                   (src_[pos_ + 1] == '{' || src_[pos_ + 1] == '%' || src_[pos_ + 1] == '#'))) {
      text += src_[pos_];
      advance();
    }
    if (pos_ < src_.size()) {
      const char kind = src_[pos_ + 1];
      const bool minus = pos_ + 2 < src_.size() && src_[pos_ + 2] == '-';
      if (minus) {
        while (!text.empty() && is_space(text.back())) text.pop_back();
      } else if (kind == '%' || kind == '#') {
        // lstrip_blocks: spaces and tabs between a line start and a block or comment tag go.
        size_t k = text.size();
        while (k > 0 && (text[k - 1] == ' ' || text[k - 1] == '\t')) --k;
        const bool line_start = k == 0 ? (start == 0 || src_[start - 1] == '\n') : text[k - 1] == '\n';
        if (line_start) text.resize(k);
      }
    }
    if (!text.empty()) push(Token::Kind::kText, std::move(text), line, col);
  }

  void lex_tag() {
    const char kind = src_[pos_ + 1];
    const int line = line_, col = col_;
    advance(2);
    if (pos_ < src_.size() && src_[pos_] == '-') advance();
    if (kind == '#') {
      while (pos_ < src_.size() && !at("#}")) advance();
      if (pos_ >= src_.size()) throw TemplateError("unterminated comment", line, col);
      const bool minus = pos_ > 0 && src_[pos_ - 1] == '-';
      advance(2);
      after_tag(minus, true);
      return;
    }
    push(kind == '{' ? Token::Kind::kOpenExpr : Token::Kind::kOpenStmt, kind == '{' ? "{{" : "{%", line, col);
    const std::string_view close = kind == '{' ? "}}" : "%}";
    for (;;) {
      while (pos_ < src_.size() && is_space(src_[pos_])) advance();
      if (pos_ >= src_.size()) throw TemplateError(fmt::format("missing '{}'", close), line, col);
      if (at(std::string("-") + std::string(close)) || at(close)) {
        const bool minus = src_[pos_] == '-';
        if (minus) advance();
        push(kind == '{' ? Token::Kind::kCloseExpr : Token::Kind::kCloseStmt, std::string(close));
        advance(2);
        after_tag(minus, kind == '%');
        return;
      }
      lex_token();
    }
  }

  void after_tag(bool minus, bool block) {
    // trim_blocks: the first newline after a block or comment tag goes.
    if (block && !minus && pos_ < src_.size() && src_[pos_] == '\n') advance();
    strip_next_ = minus;
  }

  void lex_token() {
    const int line = line_, col = col_;
    const char c = src_[pos_];
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      std::string s;
      while (pos_ < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_')) {
        s += src_[pos_];
        advance();
      }
      push(Token::Kind::kName, std::move(s), line, col);
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      std::string s;
      bool dot = false;
      while (pos_ < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[pos_])) ||
                                    (!dot && src_[pos_] == '.' && pos_ + 1 < src_.size() &&
                                     std::isdigit(static_cast<unsigned char>(src_[pos_ + 1]))))) {
        dot |= src_[pos_] == '.';
        s += src_[pos_];
        advance();
      }
      push(dot ? Token::Kind::kFloat : Token::Kind::kInt, std::move(s), line, col);
    } else if (c == '"' || c == '\'') {
      advance();
      std::string s;
      while (pos_ < src_.size() && src_[pos_] != c) {
        if (src_[pos_] == '\\' && pos_ + 1 < src_.size()) {
          advance();
          const char e = src_[pos_];
          switch (e) {
            case 'n': s += '\n'; break;
            case 't': s += '\t'; break;
            case 'r': s += '\r'; break;
            case 'b': s += '\b'; break;
            case 'f': s += '\f'; break;
            case '\\': s += '\\'; break;
            case '\'': s += '\''; break;
            case '"': s += '"'; break;
            default: s += '\\'; s += e;
          }
          advance();
          continue;
        }
        s += src_[pos_];
        advance();
      }
      if (pos_ >= src_.size()) throw TemplateError("unterminated string", line, col);
      advance();
      push(Token::Kind::kString, std::move(s), line, col);
    } else {
      static constexpr std::string_view kOps[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<",
                                                  ">",  "=",  ".",  ",",  ":",  "|",  "(", ")", "[", "]", "{", "}"};
      for (std::string_view op : kOps)
        if (at(op)) {
          advance(op.size());
          push(Token::Kind::kOp, std::string(op), line, col);
          return;
        }
      throw TemplateError(fmt::format("unexpected character '{}'", c), line, col);
    }
  }

  std::string src_;
  size_t pos_ = 0;
  int line_ = 1, col_ = 1;
  bool strip_next_ = false;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> lex(const std::string& source) { return Lexer(source).run(); }

}  // namespace kvik::jinja
