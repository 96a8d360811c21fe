#include "server/openai_schema.h"

#include <fmt/format.h>
#include <cmath>
#include <limits>

#include <set>

#include "core/error.h"
#include "engine/sample/sampler.h"

namespace kvik::server {

namespace {

using nlohmann::json;

// Field readers: each throws ApiError naming the field on a wrong type or an out-of-range value.
class Fields {
 public:
  explicit Fields(const json& body) : body_(body) {}

  const json* get(const char* name) const {
    auto it = body_.find(name);
    if (it == body_.end() || it->is_null()) return nullptr;
    return &*it;
  }

  std::optional<double> number(const char* name, double lo, double hi, bool lo_open = false) const {
    const json* v = get(name);
    if (!v) return std::nullopt;
    if (!v->is_number()) throw ApiError::bad_request(fmt::format("'{}' must be a number", name), name);
    const double d = v->get<double>();
    if (!std::isfinite(d) || d < lo || d > hi || (lo_open && d == lo))
      throw ApiError::bad_request(
          fmt::format("'{}' must be in {}{}, {}], got {}", name, lo_open ? "(" : "[", lo, hi, d), name);
    return d;
  }

  std::optional<int64_t> integer(const char* name, int64_t lo, int64_t hi) const {
    const json* v = get(name);
    if (!v) return std::nullopt;
    return as_integer(*v, name, lo, hi);
  }

  static int64_t as_integer(const json& v, const std::string& name, int64_t lo, int64_t hi) {
    int64_t x;
    if (v.is_number_integer() && !v.is_number_unsigned()) {
      x = v.get<int64_t>();
    } else if (v.is_number_unsigned()) {
      const uint64_t u = v.get<uint64_t>();
      if (u > static_cast<uint64_t>(hi))
        throw ApiError::bad_request(fmt::format("'{}' must be in [{}, {}], got {}", name, lo, hi, u), name);
      x = static_cast<int64_t>(u);
    } else {
      throw ApiError::bad_request(fmt::format("'{}' must be an integer", name), name);
    }
    if (x < lo || x > hi)
      throw ApiError::bad_request(fmt::format("'{}' must be in [{}, {}], got {}", name, lo, hi, x), name);
    return x;
  }

  std::optional<bool> boolean(const char* name) const {
    const json* v = get(name);
    if (!v) return std::nullopt;
    if (!v->is_boolean()) throw ApiError::bad_request(fmt::format("'{}' must be a boolean", name), name);
    return v->get<bool>();
  }

  std::optional<std::string> string(const char* name) const {
    const json* v = get(name);
    if (!v) return std::nullopt;
    if (!v->is_string()) throw ApiError::bad_request(fmt::format("'{}' must be a string", name), name);
    return v->get<std::string>();
  }

 private:
  const json& body_;
};

std::vector<int32_t> token_ids(const json& v, const std::string& name) {
  std::vector<int32_t> ids;
  ids.reserve(v.size());
  for (const json& t : v)
    ids.push_back(static_cast<int32_t>(Fields::as_integer(t, name, 0, std::numeric_limits<int32_t>::max())));
  return ids;
}

bool is_token_list(const json& v) { return v.is_array() && !v.empty() && v[0].is_number(); }

std::vector<Prompt> parse_prompt(const json& v) {
  const char* kField = "prompt";
  std::vector<Prompt> prompts;
  if (v.is_string()) {
    prompts.emplace_back(v.get<std::string>());
  } else if (is_token_list(v)) {
    prompts.emplace_back(token_ids(v, kField));
  } else if (v.is_array() && !v.empty()) {
    if (v.size() > kMaxPrompts)
      throw ApiError::bad_request(
          fmt::format("'prompt' holds {} prompts; at most {} are allowed", v.size(), kMaxPrompts), kField);
    for (const json& p : v) {
      if (p.is_string())
        prompts.emplace_back(p.get<std::string>());
      else if (is_token_list(p))
        prompts.emplace_back(token_ids(p, kField));
      else
        throw ApiError::bad_request(
            "'prompt' must be a string, a list of strings, a list of token ids or a list of lists of token ids",
            kField);
    }
  } else {
    throw ApiError::bad_request(
        "'prompt' must be a string, a list of strings, a list of token ids or a list of lists of token ids", kField);
  }
  return prompts;
}

// An assistant turn's tool_calls: [{"id"?, "type": "function", "function": {"name": str, "arguments": str|object}}].
void validate_tool_calls(const json& v, const std::string& where) {
  if (!v.is_array()) throw ApiError::bad_request(where + " must be a list", where);
  for (size_t i = 0; i < v.size(); ++i) {
    const json& c = v[i];
    const std::string at = fmt::format("{}[{}]", where, i);
    if (!c.is_object() || !c.contains("function") || !c["function"].is_object())
      throw ApiError::bad_request(at + " must be an object with a 'function'", at);
    const json& f = c["function"];
    if (!f.contains("name") || !f["name"].is_string())
      throw ApiError::bad_request(at + ".function.name must be a string", at + ".function.name");
    if (f.contains("arguments") && !f["arguments"].is_string() && !f["arguments"].is_object())
      throw ApiError::bad_request(at + ".function.arguments must be a JSON string", at + ".function.arguments");
    if (c.contains("id") && !c["id"].is_string() && !c["id"].is_null())
      throw ApiError::bad_request(at + ".id must be a string", at + ".id");
  }
}

void validate_messages(const json& v) {
  const char* kField = "messages";
  if (!v.is_array() || v.empty()) throw ApiError::bad_request("'messages' must be a non-empty list", kField);
  for (size_t i = 0; i < v.size(); ++i) {
    const json& m = v[i];
    const std::string where = fmt::format("messages[{}]", i);
    if (!m.is_object()) throw ApiError::bad_request(where + " must be an object", where);
    auto role = m.find("role");
    if (role == m.end() || !role->is_string())
      throw ApiError::bad_request(where + ".role must be a string", where + ".role");
    if (auto tc = m.find("tool_calls"); tc != m.end() && !tc->is_null())
      validate_tool_calls(*tc, where + ".tool_calls");
    if (auto id = m.find("tool_call_id"); id != m.end() && !id->is_null() && !id->is_string())
      throw ApiError::bad_request(where + ".tool_call_id must be a string", where + ".tool_call_id");
    auto content = m.find("content");
    if (content == m.end() || content->is_null()) continue;  // e.g. an assistant turn with tool calls only
    if (content->is_string()) continue;
    if (!content->is_array())
      throw ApiError::bad_request(where + ".content must be a string or a list of parts", where + ".content");
    for (const json& part : *content) {
      if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
        throw ApiError::bad_request(where + ".content parts must be objects with a 'type'", where + ".content");
      if (part["type"] != "text")
        throw ApiError::bad_request(fmt::format("{}.content: part type '{}' is not supported (only 'text')", where,
                                                part["type"].get<std::string>()),
                                    where + ".content");
      if (!part.contains("text") || !part["text"].is_string())
        throw ApiError::bad_request(where + ".content text parts need a string 'text'", where + ".content");
    }
  }
}

// OpenAI's function names: 1..64 of [a-zA-Z0-9_-].
bool valid_function_name(const std::string& s) {
  if (s.empty() || s.size() > 64) return false;
  for (char c : s)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
      return false;
  return true;
}

// tools: [{"type": "function", "function": {"name", "description"?, "parameters"?, "strict"?}}]; parameters must be
// a JSON Schema object.
void validate_tools(const json& tools) {
  if (!tools.is_array()) throw ApiError::bad_request("'tools' must be a list of tool definitions", "tools");
  if (tools.size() > kMaxTools)
    throw ApiError::bad_request(fmt::format("'tools' holds {} tools; at most {} are allowed", tools.size(), kMaxTools),
                                "tools");
  std::set<std::string> names;
  for (size_t i = 0; i < tools.size(); ++i) {
    const json& t = tools[i];
    const std::string where = fmt::format("tools[{}]", i);
    if (!t.is_object()) throw ApiError::bad_request(where + " must be an object", where);
    if (!t.contains("type") || t["type"] != "function")
      throw ApiError::bad_request(where + ".type must be \"function\"", where + ".type");
    if (!t.contains("function") || !t["function"].is_object())
      throw ApiError::bad_request(where + ".function must be an object", where + ".function");
    const json& f = t["function"];
    if (!f.contains("name") || !f["name"].is_string() || !valid_function_name(f["name"].get<std::string>()))
      throw ApiError::bad_request(where + ".function.name must be 1 to 64 letters, digits, '_' or '-'",
                                  where + ".function.name");
    const std::string name = f["name"].get<std::string>();
    if (!names.insert(name).second)
      throw ApiError::bad_request(
          fmt::format("{}.function.name: the name '{}' is used by an earlier tool", where, name),
          where + ".function.name");
    if (f.contains("description") && !f["description"].is_string() && !f["description"].is_null())
      throw ApiError::bad_request(where + ".function.description must be a string", where + ".function.description");
    if (f.contains("strict") && !f["strict"].is_boolean() && !f["strict"].is_null())
      throw ApiError::bad_request(where + ".function.strict must be a boolean", where + ".function.strict");
    // The schema is compiled where its grammar is built (tool_grammar.h): under "auto" one that cannot be
    // compiled falls back to any JSON object instead of failing the request.
    if (f.contains("parameters") && !f["parameters"].is_null()) {
      const std::string field = where + ".function.parameters";
      if (!f["parameters"].is_object()) throw ApiError::bad_request(field + " must be a JSON Schema object", field);
    }
  }
}

// tools, tool_choice, parallel_tool_calls and chat_template_kwargs (chat only).
void parse_tools(const Fields& f, GenerateRequest& r) {
  const json* tools = f.get("tools");
  if (tools) {
    validate_tools(*tools);
    if (!tools->empty()) r.tools = *tools;
  }
  r.tool_choice = r.tools.is_null() ? ToolChoice::kNone : ToolChoice::kAuto;
  if (const json* tc = f.get("tool_choice")) {
    if (tc->is_string()) {
      const std::string s = tc->get<std::string>();
      if (s == "none")
        r.tool_choice = ToolChoice::kNone;
      else if (s == "auto")
        r.tool_choice = ToolChoice::kAuto;
      else if (s == "required")
        r.tool_choice = ToolChoice::kRequired;
      else
        throw ApiError::bad_request(
            fmt::format("'tool_choice' '{}' is not one of none, auto, required or a function", s), "tool_choice");
    } else if (tc->is_object() && tc->contains("type") && (*tc)["type"] == "function" && tc->contains("function") &&
               (*tc)["function"].is_object() && (*tc)["function"].contains("name") &&
               (*tc)["function"]["name"].is_string()) {
      r.tool_choice = ToolChoice::kNamed;
      r.tool_choice_name = (*tc)["function"]["name"].get<std::string>();
    } else {
      throw ApiError::bad_request(
          "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": "
          "{\"name\": ...}}",
          "tool_choice");
    }
    if (r.tools.is_null() && (r.tool_choice == ToolChoice::kRequired || r.tool_choice == ToolChoice::kNamed))
      throw ApiError::bad_request("'tool_choice' requires 'tools'", "tool_choice");
    if (r.tools.is_null() && r.tool_choice == ToolChoice::kAuto) r.tool_choice = ToolChoice::kNone;
  }
  if (r.tool_choice == ToolChoice::kNamed) {
    bool found = false;
    for (const json& t : r.tools) found |= t["function"]["name"] == r.tool_choice_name;
    if (!found)
      throw ApiError::bad_request(
          fmt::format("'tool_choice' names the function '{}', which is not in 'tools'", r.tool_choice_name),
          "tool_choice");
  }
  if (auto v = f.boolean("parallel_tool_calls")) r.parallel_tool_calls = *v;
  if (const json* kw = f.get("chat_template_kwargs")) {
    if (!kw->is_object())
      throw ApiError::bad_request("'chat_template_kwargs' must be an object of template variables",
                                  "chat_template_kwargs");
    r.chat_template_kwargs = *kw;
  }
}

// OpenAI's response_format and vLLM's guided_* fields → SamplingParams::structured_output (at most one).
void parse_structured_output(const Fields& f, SamplingParams& sp) {
  int given = 0;
  auto set = [&](StructuredOutputSpec spec, const char* field) {
    if (++given > 1)
      throw ApiError::bad_request(fmt::format("'{}': only one of response_format, guided_json, guided_regex, "
                                              "guided_grammar and guided_choice may be given",
                                              field),
                                  field);
    spec.source = field;
    sp.structured_output = std::move(spec);
  };
  if (const json* rf = f.get("response_format")) {
    if (!rf->is_object() || !rf->contains("type") || !(*rf)["type"].is_string())
      throw ApiError::bad_request("'response_format' must be an object with a string 'type'", "response_format");
    const std::string type = (*rf)["type"].get<std::string>();
    if (type == "json_object") {
      set(StructuredOutputSpec::json_object(), "response_format");
    } else if (type == "json_schema") {
      const auto js = rf->find("json_schema");
      if (js == rf->end() || !js->is_object() || !js->contains("schema") || !(*js)["schema"].is_object())
        throw ApiError::bad_request("'response_format.json_schema.schema' must be a JSON Schema object",
                                    "response_format.json_schema");
      set(StructuredOutputSpec::json_schema((*js)["schema"].dump()), "response_format");
    } else if (type != "text") {
      throw ApiError::bad_request(
          fmt::format("'response_format.type' '{}' is not one of text, json_object, json_schema", type),
          "response_format.type");
    }
  }
  if (const json* g = f.get("guided_json")) {
    if (g->is_string())
      set(StructuredOutputSpec::json_schema(g->get<std::string>()), "guided_json");
    else if (g->is_object())
      set(StructuredOutputSpec::json_schema(g->dump()), "guided_json");
    else
      throw ApiError::bad_request("'guided_json' must be a JSON Schema (object or string)", "guided_json");
  }
  for (const char* name : {"guided_regex", "guided_grammar"}) {
    if (const json* g = f.get(name)) {
      if (!g->is_string() || g->get<std::string>().empty())
        throw ApiError::bad_request(fmt::format("'{}' must be a non-empty string", name), name);
      set(std::string(name) == "guided_regex" ? StructuredOutputSpec::regex(g->get<std::string>())
                                              : StructuredOutputSpec::grammar(g->get<std::string>()),
          name);
    }
  }
  if (const json* g = f.get("guided_choice")) {
    if (!g->is_array() || g->empty())
      throw ApiError::bad_request("'guided_choice' must be a non-empty list of strings", "guided_choice");
    std::vector<std::string> choices;
    for (const json& c : *g) {
      if (!c.is_string())
        throw ApiError::bad_request("'guided_choice' must be a non-empty list of strings", "guided_choice");
      choices.push_back(c.get<std::string>());
    }
    set(StructuredOutputSpec::choice(std::move(choices)), "guided_choice");
  }
}

// The sampling fields: lengths, temperature and filters, penalties, seed, n, logprobs (chat and completions
// spell logprobs differently).
void parse_sampling(Fields& f, GenerateRequest& r, bool chat) {
  SamplingParams& sp = r.params;
  constexpr int64_t kIntMax = std::numeric_limits<int32_t>::max();
  // max_completion_tokens is the newer name of max_tokens in the chat API.
  for (const char* name : {"max_tokens", "max_completion_tokens"})
    if (auto v = f.integer(name, 1, kIntMax)) {
      sp.max_tokens = static_cast<int32_t>(*v);
      r.max_tokens_given = true;
    }
  if (auto v = f.number("temperature", 0, 1e6)) sp.temperature = static_cast<float>(*v);
  if (auto v = f.number("top_p", 0, 1, /*lo_open=*/true)) sp.top_p = static_cast<float>(*v);
  if (auto v = f.integer("top_k", -1, kIntMax)) sp.top_k = static_cast<int32_t>(*v);
  if (auto v = f.number("min_p", 0, 1)) sp.min_p = static_cast<float>(*v);
  if (auto v = f.number("presence_penalty", -2, 2)) sp.presence_penalty = static_cast<float>(*v);
  if (auto v = f.number("frequency_penalty", -2, 2)) sp.frequency_penalty = static_cast<float>(*v);
  if (auto v = f.number("repetition_penalty", 0, 1e6, /*lo_open=*/true)) sp.repetition_penalty = static_cast<float>(*v);
  if (auto v = f.integer("seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()))
    sp.seed = static_cast<uint64_t>(*v);
  if (auto v = f.boolean("ignore_eos")) sp.ignore_eos = *v;
  if (auto v = f.integer("n", 1, kMaxN)) r.n = static_cast<int32_t>(*v);
  if (chat) {
    const bool want = f.boolean("logprobs").value_or(false);
    const auto top = f.integer("top_logprobs", 0, kMaxLogprobs);
    if (top && !want) throw ApiError::bad_request("'top_logprobs' needs 'logprobs': true", "top_logprobs");
    if (want) sp.logprobs = static_cast<int32_t>(top.value_or(0));
  } else {
    if (auto v = f.integer("logprobs", 0, kMaxLogprobs)) sp.logprobs = static_cast<int32_t>(*v);
    if (auto v = f.boolean("echo")) r.echo = *v;
    if (r.echo) throw ApiError::bad_request("'echo' is not supported", "echo");
  }
  if (auto v = f.integer("min_tokens", 0, kIntMax)) sp.min_tokens = static_cast<int32_t>(*v);
}

void parse_stop(Fields& f, GenerateRequest& r) {
  const json* s = f.get("stop");
  if (!s) return;
  if (s->is_string()) {
    r.stop.push_back(s->get<std::string>());
  } else if (s->is_array()) {
    if (s->size() > kMaxStopStrings)
      throw ApiError::bad_request(
          fmt::format("'stop' holds {} strings; at most {} are allowed", s->size(), kMaxStopStrings), "stop");
    for (const json& x : *s) {
      if (!x.is_string()) throw ApiError::bad_request("'stop' must be a string or a list of strings", "stop");
      r.stop.push_back(x.get<std::string>());
    }
  } else {
    throw ApiError::bad_request("'stop' must be a string or a list of strings", "stop");
  }
  for (const std::string& x : r.stop)
    if (x.empty()) throw ApiError::bad_request("'stop' strings must not be empty", "stop");
}

// logit_bias (token id → bias) and stop_token_ids.
void parse_token_ids(Fields& f, SamplingParams& sp) {
  constexpr int64_t kIntMax = std::numeric_limits<int32_t>::max();
  if (const json* lb = f.get("logit_bias")) {
    if (!lb->is_object())
      throw ApiError::bad_request("'logit_bias' must be an object of token id → bias", "logit_bias");
    if (lb->size() > 1024) throw ApiError::bad_request("'logit_bias' has more than 1024 entries", "logit_bias");
    for (auto it = lb->begin(); it != lb->end(); ++it) {
      int64_t id = -1;
      try {
        size_t used = 0;
        id = std::stoll(it.key(), &used);
        if (used != it.key().size()) id = -1;
      } catch (const std::exception&) {
      }
      if (id < 0 || id > kIntMax)
        throw ApiError::bad_request(fmt::format("'logit_bias' key '{}' is not a token id", it.key()), "logit_bias");
      if (!it->is_number() || !std::isfinite(it->get<double>()) || it->get<double>() < -100 || it->get<double>() > 100)
        throw ApiError::bad_request("'logit_bias' values must be numbers in [-100, 100]", "logit_bias");
      sp.logit_bias.emplace_back(static_cast<int32_t>(id), it->get<float>());
    }
  }
  if (const json* st = f.get("stop_token_ids")) {
    if (!st->is_array() || st->size() > 64)
      throw ApiError::bad_request("'stop_token_ids' must be a list of at most 64 token ids", "stop_token_ids");
    for (const json& x : *st)
      sp.stop_token_ids.push_back(static_cast<int32_t>(Fields::as_integer(x, "stop_token_ids", 0, kIntMax)));
  }
}

void parse_stream(Fields& f, GenerateRequest& r) {
  if (auto v = f.boolean("stream")) r.stream = *v;
  if (const json* so = f.get("stream_options")) {
    if (!so->is_object()) throw ApiError::bad_request("'stream_options' must be an object", "stream_options");
    if (!r.stream)
      throw ApiError::bad_request("'stream_options' is only allowed with 'stream': true", "stream_options");
    if (auto it = so->find("include_usage"); it != so->end() && !it->is_null()) {
      if (!it->is_boolean())
        throw ApiError::bad_request("'stream_options.include_usage' must be a boolean", "stream_options.include_usage");
      r.include_usage = it->get<bool>();
    }
  }
}

GenerateRequest parse(const json& body, bool chat) {
  if (!body.is_object()) throw ApiError::bad_request("the request body must be a JSON object");
  Fields f(body);
  GenerateRequest r;
  r.chat = chat;
  if (auto m = f.string("model")) r.model = *m;
  if (chat) {
    const json* m = f.get("messages");
    if (!m) throw ApiError::bad_request("'messages' is required", "messages");
    validate_messages(*m);
    r.messages = *m;
    parse_tools(f, r);
  } else {
    const json* p = f.get("prompt");
    if (!p) throw ApiError::bad_request("'prompt' is required", "prompt");
    r.prompts = parse_prompt(*p);
  }
  SamplingParams& sp = r.params;
  parse_sampling(f, r, chat);
  parse_stop(f, r);
  parse_structured_output(f, sp);
  parse_token_ids(f, sp);
  if (const json* iv = f.get("interventions")) r.interventions = parse_interventions(*iv);
  parse_stream(f, r);
  if (auto err = sp.validate()) throw ApiError::bad_request(err->message, err->param);
  return r;
}

}  // namespace

std::variant<GenerateRequest, ApiError> parse_generate_request(const nlohmann::json& body, bool chat) {
  try {
    return parse(body, chat);
  } catch (const ApiError& e) {
    return e;
  } catch (const nlohmann::json::exception& e) {
    return ApiError::bad_request(fmt::format("invalid request: {}", e.what()));
  }
}

std::variant<TokenizeRequest, ApiError> parse_tokenize_request(const nlohmann::json& body) {
  try {
    if (!body.is_object()) throw ApiError::bad_request("the request body must be a JSON object");
    Fields f(body);
    TokenizeRequest r;
    if (const json* m = f.get("messages")) {
      validate_messages(*m);
      r.messages = *m;
    } else {
      r.prompt = f.string("prompt");
      if (!r.prompt) throw ApiError::bad_request("'prompt' (a string) or 'messages' is required", "prompt");
    }
    if (auto v = f.boolean("add_special_tokens")) r.add_special_tokens = *v;
    return r;
  } catch (const ApiError& e) {
    return e;
  }
}

std::variant<std::vector<int32_t>, ApiError> parse_detokenize_request(const nlohmann::json& body) {
  try {
    if (!body.is_object()) throw ApiError::bad_request("the request body must be a JSON object");
    auto it = body.find("tokens");
    if (it == body.end() || !it->is_array())
      throw ApiError::bad_request("'tokens' (a list of token ids) is required", "tokens");
    return token_ids(*it, "tokens");
  } catch (const ApiError& e) {
    return e;
  }
}

}  // namespace kvik::server
