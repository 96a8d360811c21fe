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
  JsonBracketScan scan;
  for (; i < s.size(); ++i)
    if (scan.step(s[i]) < 0 && scan.depth == 0) return i + 1;
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

// The number of bytes at the end of `s` that begin a UTF-8 character without finishing it.
size_t partial_utf8(std::string_view s) {
  for (size_t back = 1; back <= std::min<size_t>(3, s.size()); ++back) {
    const auto c = static_cast<unsigned char>(s[s.size() - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    const size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return len > back ? back : 0;
  }
  return 0;
}

// The header of the call object at s[i]: {"name": "NAME", "arguments"|"parameters": { — its name and where the
// arguments' "{" is. Decided by the text up to that "{" alone, so any split of the output decides the same. Only
// the call grammar's own shape counts (at most one space between tokens): a header written otherwise was not
// generated under the grammar (a lazy trigger the grammar did not take), so its call is parsed whole.
enum class Header { kYes, kNo, kNeed };

struct HeaderScan {
  std::string_view s;
  size_t i;
  void space() {
    if (i < s.size() && s[i] == ' ') ++i;
  }
  Header lit(std::string_view l) {  // a space, then `l`
    space();
    const size_t n = std::min(l.size(), s.size() - i);
    if (s.substr(i, n) != l.substr(0, n)) return Header::kNo;
    if (n < l.size()) return Header::kNeed;
    i += n;
    return Header::kYes;
  }
  Header name(std::string& out) {  // a JSON string, not empty
    space();
    if (i == s.size()) return Header::kNeed;
    if (s[i] != '"') return Header::kNo;
    bool escaped = false;
    for (size_t j = i + 1; j < s.size(); ++j) {
      if (escaped) {
        escaped = false;
      } else if (s[j] == '\\') {
        escaped = true;
      } else if (s[j] == '"') {
        const ojson v = ojson::parse(s.substr(i, j + 1 - i), nullptr, /*allow_exceptions=*/false);
        if (!v.is_string() || v.get<std::string>().empty()) return Header::kNo;
        out = v.get<std::string>();
        i = j + 1;
        return Header::kYes;
      }
    }
    return Header::kNeed;
  }
};

Header call_header(std::string_view s, size_t i, std::string& name, size_t& args) {
  HeaderScan h{s, i};
  Header r = Header::kYes;
  auto ok = [&r](Header x) {
    r = x;
    return x == Header::kYes;
  };
  if (!(ok(h.lit("{")) && ok(h.lit("\"name\"")) && ok(h.lit(":")) && ok(h.name(name)) && ok(h.lit(",")))) return r;
  const size_t key = h.i;
  if (!ok(h.lit("\"arguments\""))) {
    const Header arguments = r;
    h.i = key;
    if (!ok(h.lit("\"parameters\""))) return arguments == Header::kNeed || r == Header::kNeed ? Header::kNeed : r;
  }
  if (!(ok(h.lit(":")) && ok(h.lit("{")))) return r;
  args = h.i - 1;
  return Header::kYes;
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
  held_ws_.clear();  // nor is whitespace right before one
  after_call_ = true;
  ToolCallFragment f;
  f.index = num_calls_++;
  f.id = call.id.empty() ? new_id() : std::move(call.id);
  f.name = std::move(call.name);
  f.arguments = std::move(call.arguments);
  out.fragments.push_back(std::move(f));
}

void ToolCallParser::emit_args(std::string_view s, ToolCallDelta& out) {
  if (s.empty()) return;
  if (out.fragments.empty() || out.fragments.back().index + 1 != num_calls_) {
    out.fragments.emplace_back();
    out.fragments.back().index = num_calls_ - 1;
  }
  out.fragments.back().arguments += s;
}

int ToolCallParser::try_commit(size_t i, bool final, ToolCallDelta& out) {
  std::string name;
  size_t args = 0;
  const Header h = call_header(buf_, i, name, args);
  if (h == Header::kNeed) return final ? 0 : -1;
  if (h == Header::kNo) return 0;
  emit_call({"", std::move(name), ""}, out);
  buf_.erase(0, args);  // the markup before the arguments' "{" (buf_ holds no content before the call)
  stream_ = Stream::kArgs;
  scan_ = {};
  return 1;
}

// A committed call: its arguments up to their closing brace (passed on as they come), then the rest of the call
// object, then what follows it in the format's syntax. Returns true when it should run again.
bool ToolCallParser::step_committed(bool final, ToolCallDelta& out) {
  if (stream_ == Stream::kMistralNext) return step_mistral_next(final, out);
  if (stream_ == Stream::kAfter) return step_after(final);
  const bool args = stream_ == Stream::kArgs;
  const size_t n = buf_.size() - (args && !final ? partial_utf8(buf_) : 0);
  size_t end = kNpos;
  for (size_t j = 0; j < n && end == kNpos; ++j)
    if (scan_.step(buf_[j]) < 0 && scan_.depth == 0) end = j + 1;
  const size_t upto = end == kNpos ? n : end;
  if (args) emit_args(std::string_view(buf_).substr(0, upto), out);
  buf_.erase(0, upto);
  if (end == kNpos) {
    if (final) buf_.clear(), stream_ = Stream::kNone;  // cut short: the call ends with the output
    return false;
  }
  if (args) {
    stream_ = Stream::kTail;  // the rest of the call object, inside its braces
    scan_.depth = 1;
  } else {
    stream_ = Stream::kAfter;
  }
  return true;
}

// After a committed call's object: hermes its "</tool_call>", mistral ", {call}" or "]"; Llama 3's ";" is
// step_llama3's. Text that is not the syntax's is content again.
bool ToolCallParser::step_after(bool final) {
  if (format_ != ToolCallFormat::kHermes) {
    stream_ = format_ == ToolCallFormat::kMistral ? Stream::kMistralNext : Stream::kNone;
    return true;
  }
  const size_t i = skip_ws(buf_, 0);
  const std::string_view rest = std::string_view(buf_).substr(i);
  if (rest.size() < kHermesClose.size() && kHermesClose.substr(0, rest.size()) == rest) {
    if (!final) return false;
    buf_.clear();  // the output ends in the closing tag
  } else if (rest.substr(0, kHermesClose.size()) == kHermesClose) {
    buf_.erase(0, i + kHermesClose.size());
  }
  stream_ = Stream::kNone;
  return true;
}

bool ToolCallParser::step_mistral_next(bool final, ToolCallDelta& out) {
  size_t i = skip_ws(buf_, 0);
  if (i < buf_.size() && buf_[i] == ',') i = skip_ws(buf_, i + 1);
  if (i == buf_.size()) {
    if (!final) return false;
    buf_.clear();
  } else if (buf_[i] == ']') {
    buf_.erase(0, i + 1);
  } else if (buf_[i] == '{' && buf_.find(',') < i) {
    const int r = try_commit(i, final, out);
    if (r != 0) return r > 0;
  }
  stream_ = Stream::kNone;  // the array ends, or what follows is content
  return true;
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
  if (grammar_) {  // the call object's header commits the call
    size_t i = skip_ws(buf_, open.size());
    if (!hermes && i < buf_.size() && buf_[i] == '[') i = skip_ws(buf_, i + 1);
    if (i == buf_.size() && !final) return false;
    if (i < buf_.size() && buf_[i] == '{') {
      const int r = try_commit(i, final, out);
      if (r != 0) return r > 0;
    }
  }
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
  if (grammar_) {
    const int r = try_commit(i, final, out);
    if (r != 0) {
      llama3_started_ = llama3_started_ || r > 0;
      return r > 0;
    }
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
  for (bool more = true; more;) {
    if (stream_ != Stream::kNone)
      more = step_committed(final, out) || (final && stream_ == Stream::kNone && !buf_.empty());
    else if (format_ == ToolCallFormat::kLlama3Json)
      more = step_llama3(final, out);
    else
      more = step_tagged(final, out);
  }
}

void append_fragments(std::vector<ToolCall>& calls, const std::vector<ToolCallFragment>& fragments) {
  for (const ToolCallFragment& f : fragments) {
    if (!f.id.empty()) calls.push_back({f.id, f.name, ""});
    if (f.index < calls.size()) calls[f.index].arguments += f.arguments;
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

ParsedToolCalls parse_tool_calls(ToolCallFormat format, std::string_view text, bool grammar) {
  ToolCallParser p(format, grammar);
  ToolCallDelta a = p.push(text);
  ToolCallDelta b = p.finish();
  ParsedToolCalls r;
  r.content = a.content + b.content;
  append_fragments(r.calls, a.fragments);
  append_fragments(r.calls, b.fragments);
  return r;
}

}  // namespace kvik
