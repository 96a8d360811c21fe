#include "chat/content_format.h"

#include <algorithm>
#include <set>
#include <vector>

#include "chat/jinja_ast.h"

namespace kvik {

namespace {

using jinja::Node;
using Kind = jinja::Node::Kind;

// Every statement of the program, nested ones included (if/for bodies and else branches, macros, call blocks,
// block sets), in source order.
void collect_statements(const std::vector<jinja::NodePtr>& block, std::vector<const Node*>& out) {
  for (const jinja::NodePtr& n : block) {
    if (!n) continue;
    out.push_back(n.get());
    collect_statements(n->body, out);
    collect_statements(n->orelse, out);
  }
}

bool is_name(const Node* n, const std::string& var) { return n && n->kind == Kind::kName && n->str == var; }

// `var.key` or `var['key']`.
bool is_key_access(const Node* n, const std::string& var, const std::string& key) {
  if (!n || n->kids.empty()) return false;
  if (n->kind == Kind::kAttr) return n->str == key && is_name(n->kids[0].get(), var);
  if (n->kind == Kind::kIndex && n->kids.size() == 2 && n->kids[1] && n->kids[1]->kind == Kind::kLiteral)
    return n->kids[1]->value.is_string() && n->kids[1]->value.str() == key && is_name(n->kids[0].get(), var);
  return false;
}

// An access to `var` (or to `var[key]` when key is given), possibly through filters, tests and slices:
// `messages`, `messages[1:]`, `messages | selectattr(...)`, `message['content'] | list`.
bool accesses(const Node* n, const std::string& var, const std::string& key) {
  while (n && (n->kind == Kind::kFilter || n->kind == Kind::kTest || n->kind == Kind::kSlice) && !n->kids.empty())
    n = n->kids[0].get();
  return key.empty() ? is_name(n, var) : is_key_access(n, var, key);
}

// `messages` and the names set from it (`{% set loop_messages = messages[1:] %}`), transitively.
std::vector<std::string> message_list_names(const std::vector<const Node*>& statements) {
  std::vector<std::string> names{"messages"};
  for (size_t i = 0; i < names.size(); ++i)
    for (const Node* s : statements)
      if (s->kind == Kind::kSet && s->names.size() == 1 && s->str.empty() && !s->kids.empty() &&
          accesses(s->kids[0].get(), names[i], "") && std::find(names.begin(), names.end(), s->names[0]) == names.end())
        names.push_back(s->names[0]);
  return names;
}

// The targets of loops over any of `lists` (`{% for message in loop_messages %}`), or over `key` of any of them.
std::set<std::string> loop_targets(const std::vector<const Node*>& statements, const std::vector<std::string>& lists,
                                   const std::string& key) {
  std::set<std::string> targets;
  for (const Node* s : statements) {
    if (s->kind != Kind::kFor || s->kids.empty() || s->names.size() != 1) continue;
    for (const std::string& v : lists)
      if (accesses(s->kids[0].get(), v, key)) targets.insert(s->names[0]);
  }
  return targets;
}

}  // namespace

ContentFormat detect_content_format(const std::string& chat_template) {
  if (chat_template.empty()) return ContentFormat::kString;
  std::vector<jinja::NodePtr> program;
  try {
    program = jinja::parse(jinja::lex(chat_template));
  } catch (const Error&) {
    return ContentFormat::kString;
  }
  std::vector<const Node*> statements;
  collect_statements(program, statements);
  const std::set<std::string> messages = loop_targets(statements, message_list_names(statements), "");
  const std::vector<std::string> message_names(messages.begin(), messages.end());
  return loop_targets(statements, message_names, "content").empty() ? ContentFormat::kString : ContentFormat::kOpenAI;
}

std::optional<ContentFormat> content_format_from_name(std::string_view name) {
  if (name == "string") return ContentFormat::kString;
  if (name == "openai") return ContentFormat::kOpenAI;
  return std::nullopt;
}

const char* content_format_name(ContentFormat f) { return f == ContentFormat::kOpenAI ? "openai" : "string"; }

}  // namespace kvik
