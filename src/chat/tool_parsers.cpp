#include "chat/tool_parsers.h"

#include <nlohmann/json.hpp>
#include <random>

namespace kvik {

namespace {

using ojson = nlohmann::ordered_json;

constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kMistralOpen = "[TOOL_CALLS]";
constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr size_t kNpos = std::string::npos;

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

size_t skip_ws(std::string_view s, size_t i) {
  while (i < s.size() && is_ws(s[i])) ++i;
  return i;
}

// The length of the longest suffix of `s` that is a proper prefix of `tag` (text to hold back: the tag may
// be arriving).
size_t partial_suffix(std::string_view s, std::string_view tag) {
  for (size_t n = std::min(s.size(), tag.size() - 1); n > 0; --n)
    if (s.substr(s.size() - n) == tag.substr(0, n)) return n;
  return 0;
}

// The end (one past) of the JSON object or array that starts at s[i], by bracket depth outside strings;
// kNpos when it has not ended yet.
size_t json_value_end(std::string_view s, size_t i) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (--depth == 0) return i + 1;
    }
  }
  return kNpos;
}

bool is_mistral_id(const std::string& s) {
  if (s.size() != 9) return false;
  for (char c : s)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))) return false;
  return true;
}

// {"name": str, "arguments" | "parameters": object (or a string holding one), "id"?} → a call.
std::optional<ToolCall> call_from_json(const ojson& j) {
  if (!j.is_object()) return std::nullopt;
  auto name = j.find("name");
  if (name == j.end() || !name->is_string() || name->get<std::string>().empty()) return std::nullopt;
  ToolCall call;
  call.name = name->get<std::string>();
  auto args = j.find("arguments");
  if (args == j.end()) args = j.find("parameters");
  if (args == j.end()) {
    call.arguments = "{}";
  } else if (args->is_object()) {
    call.arguments = args->dump(-1, ' ', false, ojson::error_handler_t::replace);
  } else if (args->is_string()) {
    ojson inner = ojson::parse(args->get<std::string>(), nullptr, /*allow_exceptions=*/false);
    if (inner.is_discarded() || !inner.is_object()) return std::nullopt;
    call.arguments = inner.dump(-1, ' ', false, ojson::error_handler_t::replace);
  } else {
    return std::nullopt;
  }
  if (auto id = j.find("id"); id != j.end() && id->is_string() && is_mistral_id(id->get<std::string>()))
    call.id = id->get<std::string>();
  return call;
}

// One call object, or (mistral) an array of them; nullopt unless every element is a call.
std::optional<std::vector<ToolCall>> calls_from_text(std::string_view text, bool allow_array) {
  const ojson j = ojson::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return std::nullopt;
  std::vector<ToolCall> calls;
  if (j.is_array() && allow_array) {
    if (j.empty()) return std::nullopt;
    for (const ojson& e : j) {
      auto c = call_from_json(e);
      if (!c) return std::nullopt;
      calls.push_back(std::move(*c));
    }
    return calls;
  }
  auto c = call_from_json(j);
  if (!c) return std::nullopt;
  calls.push_back(std::move(*c));
  return calls;
}

}  // namespace

std::optional<ToolCallFormat> tool_call_format_from_name(std::string_view name) {
  if (name == "hermes") return ToolCallFormat::kHermes;
  if (name == "llama3_json") return ToolCallFormat::kLlama3Json;
  if (name == "mistral") return ToolCallFormat::kMistral;
  return std::nullopt;
}

const char* tool_call_format_name(ToolCallFormat f) {
  switch (f) {
    case ToolCallFormat::kHermes: return "hermes";
    case ToolCallFormat::kLlama3Json: return "llama3_json";
    case ToolCallFormat::kMistral: return "mistral";
  }
  return "?";
}

const char* tool_call_trigger(ToolCallFormat f) {
  switch (f) {
    case ToolCallFormat::kHermes: return "<tool_call>";
    case ToolCallFormat::kLlama3Json: return "<|python_tag|>";
    case ToolCallFormat::kMistral: return "[TOOL_CALLS]";
  }
  return "";
}

std::optional<ToolCallFormat> detect_tool_call_format(std::string_view t) {
  if (t.find(kHermesOpen) != std::string_view::npos) return ToolCallFormat::kHermes;
  if (t.find(kMistralOpen) != std::string_view::npos) return ToolCallFormat::kMistral;
  if (t.find(kPythonTag) != std::string_view::npos ||
      (t.find("\"parameters\"") != std::string_view::npos && t.find("ipython") != std::string_view::npos))
    return ToolCallFormat::kLlama3Json;
  return std::nullopt;
}

std::string ToolCallParser::new_id() {
  static constexpr char kAlnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  const bool mistral = format_ == ToolCallFormat::kMistral;
  std::string id = mistral ? "" : "call_";
  for (int i = 0; i < (mistral ? 9 : 24); ++i) id += kAlnum[rng() % 62];
  return id;
}

void ToolCallParser::emit_content(std::string_view s, ToolCallDelta& out) {
  if (after_call_) {  // whitespace right after a call is no content
    size_t first = 0;
    while (first < s.size() && is_ws(s[first])) ++first;
    s.remove_prefix(first);
    if (s.empty()) return;
    after_call_ = false;
  }
  size_t last = s.size();
  while (last > 0 && is_ws(s[last - 1])) --last;
  if (last == 0) {
    held_ws_ += s;
    return;
  }
  out.content += held_ws_;
  held_ws_.clear();
  out.content += s.substr(0, last);
  held_ws_ = std::string(s.substr(last));
}

void ToolCallParser::emit_call(ToolCall call, ToolCallDelta& out) {
  if (call.id.empty()) call.id = new_id();
  held_ws_.clear();  // nor is whitespace right before one
  after_call_ = true;
  out.calls.push_back(std::move(call));
  ++num_calls_;
}

// <tool_call>…</tool_call> or [TOOL_CALLS][…]: content up to the tag, then the call region once it is whole.
// Returns true when it consumed something and should run again.
bool ToolCallParser::step_tagged(bool final, ToolCallDelta& out) {
  const bool hermes = format_ == ToolCallFormat::kHermes;
  const std::string_view open = hermes ? kHermesOpen : kMistralOpen;
  const size_t t = buf_.find(open);
  if (t == kNpos) {
    const size_t keep = final ? 0 : partial_suffix(buf_, open);
    emit_content(std::string_view(buf_).substr(0, buf_.size() - keep), out);
    buf_.erase(0, buf_.size() - keep);
    return false;
  }
  emit_content(std::string_view(buf_).substr(0, t), out);
  buf_.erase(0, t);
  // The region: hermes up to the closing tag; mistral the JSON value after the tag.
  size_t end = kNpos, body = open.size(), body_end = kNpos;
  if (hermes) {
    const size_t close = buf_.find(kHermesClose, body);
    if (close != kNpos) body_end = close, end = close + kHermesClose.size();
  } else {
    body = skip_ws(buf_, body);
    if (body < buf_.size() && buf_[body] != '[' && buf_[body] != '{') {
      end = body;  // a bare tag: content
    } else if (body < buf_.size()) {
      body_end = json_value_end(buf_, body);
      end = body_end;
    }
  }
  if (end == kNpos) {
    if (!final) return false;
    emit_content(buf_, out);  // truncated: content
    buf_.clear();
    return false;
  }
  std::optional<std::vector<ToolCall>> calls;
  if (body_end != kNpos) calls = calls_from_text(std::string_view(buf_).substr(body, body_end - body), !hermes);
  if (calls) {
    for (ToolCall& c : *calls) emit_call(std::move(c), out);
  } else {
    emit_content(std::string_view(buf_).substr(0, end), out);
  }
  buf_.erase(0, end);
  return true;
}

// Llama 3: the output opens with the calls ([<|python_tag|>] {call} [; {call}]...); anything else is content.
bool ToolCallParser::step_llama3(bool final, ToolCallDelta& out) {
  if (llama3_content_) {
    emit_content(buf_, out);
    buf_.clear();
    return false;
  }
  size_t i = skip_ws(buf_, 0);
  if (!llama3_started_) {
    const std::string_view rest = std::string_view(buf_).substr(i);
    if (rest.size() < kPythonTag.size() && kPythonTag.substr(0, rest.size()) == rest && !final) return false;
    if (rest.substr(0, kPythonTag.size()) == kPythonTag) i = skip_ws(buf_, i + kPythonTag.size());
  } else if (i < buf_.size() && buf_[i] == ';') {
    i = skip_ws(buf_, i + 1);
  } else if (i < buf_.size()) {
    llama3_content_ = true;  // after a call, neither ';' nor the end
    return true;
  }
  if (i == buf_.size()) {
    if (final) {
      emit_content(buf_, out);
      buf_.clear();
    }
    return false;
  }
  if (buf_[i] != '{') {
    llama3_content_ = true;
    return true;
  }
  const size_t end = json_value_end(buf_, i);
  if (end == kNpos && !final) return false;
  std::optional<std::vector<ToolCall>> calls;
  if (end != kNpos) calls = calls_from_text(std::string_view(buf_).substr(i, end - i), false);
  if (!calls) {
    llama3_content_ = true;
    return true;
  }
  llama3_started_ = true;
  emit_call(std::move(calls->front()), out);
  buf_.erase(0, end);
  return true;
}

void ToolCallParser::step(bool final, ToolCallDelta& out) {
  if (format_ == ToolCallFormat::kLlama3Json) {
    while (step_llama3(final, out)) {
    }
  } else {
    while (step_tagged(final, out)) {
    }
  }
}

ToolCallDelta ToolCallParser::push(std::string_view text) {
  ToolCallDelta out;
  if (finished_) return out;
  buf_ += text;
  step(false, out);
  return out;
}

ToolCallDelta ToolCallParser::finish() {
  ToolCallDelta out;
  if (finished_) return out;
  step(true, out);
  finished_ = true;
  if (num_calls_ == 0) out.content += held_ws_;
  held_ws_.clear();
  return out;
}

ParsedToolCalls parse_tool_calls(ToolCallFormat format, std::string_view text) {
  ToolCallParser p(format);
  ToolCallDelta a = p.push(text);
  ToolCallDelta b = p.finish();
  ParsedToolCalls r;
  r.content = a.content + b.content;
  r.calls = std::move(a.calls);
  for (ToolCall& c : b.calls) r.calls.push_back(std::move(c));
  return r;
}

}  // namespace kvik
