#include "server/openai_schema.h"

#include <fmt/format.h>
#include <cmath>
#include <limits>

#include <set>

#include "core/error.h"
#include "engine/sample/sampler.h"

namespace kvik::server {

using json = nlohmann::ordered_json;

namespace {

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

// OpenAI's function names: 1..64 of [a-zA-Z0-9_-].
bool valid_function_name(const std::string& s) {
  if (s.empty() || s.size() > 64) return false;
  for (char c : s)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
      return false;
  return true;
}

}  // namespace

// tools: [{"type": "function", "function": {"name", "description"?, "parameters"?, "strict"?}}]; parameters must be
// a JSON Schema object (compiled where its grammar is built).
void validate_tools(const json& tools, const std::string& field) {
  if (!tools.is_array())
    throw ApiError::bad_request(fmt::format("'{}' must be a list of tool definitions", field), field);
  if (tools.size() > kMaxTools)
    throw ApiError::bad_request(
        fmt::format("'{}' holds {} tools; at most {} are allowed", field, tools.size(), kMaxTools), field);
  std::set<std::string> names;
  for (size_t i = 0; i < tools.size(); ++i) {
    const json& t = tools[i];
    const std::string where = fmt::format("{}[{}]", field, i);
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
      const std::string params = where + ".function.parameters";
      if (!f["parameters"].is_object()) throw ApiError::bad_request(params + " must be a JSON Schema object", params);
    }
  }
}

void parse_tool_choice(const json* tc, ChatRequest& r) {
  const bool has_tools = r.tools.is_array() && !r.tools.empty();
  r.tool_choice = has_tools ? ToolChoice::kAuto : ToolChoice::kNone;
  if (tc) {
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
    if (!has_tools && (r.tool_choice == ToolChoice::kRequired || r.tool_choice == ToolChoice::kNamed))
      throw ApiError::bad_request("'tool_choice' requires 'tools'", "tool_choice");
    if (!has_tools && r.tool_choice == ToolChoice::kAuto) r.tool_choice = ToolChoice::kNone;
  }
  if (r.tool_choice == ToolChoice::kNamed) {
    bool found = false;
    for (const json& t : r.tools) found |= t["function"]["name"] == r.tool_choice_name;
    if (!found)
      throw ApiError::bad_request(
          fmt::format("'tool_choice' names the function '{}', which is not in 'tools'", r.tool_choice_name),
          "tool_choice");
  }
}

std::string parse_reasoning_effort(const json* effort, const std::string& field) {
  if (!effort) return "";
  if (effort->is_string()) {
    const std::string e = effort->get<std::string>();
    for (const char* known : {"none", "minimal", "low", "medium", "high"})
      if (e == known) return e;
  }
  throw ApiError::bad_request(
      fmt::format("'{}' must be one of none, minimal, low, medium, high, got {}", field, effort->dump()), field);
}

namespace {

// The chat conversation: messages, tools, tool_choice, parallel_tool_calls, chat_template_kwargs, reasoning_effort.
void parse_chat(const Fields& f, ChatRequest& r) {
  const json* m = f.get("messages");
  if (!m) throw ApiError::bad_request("'messages' is required", "messages");
  r.messages = parse_chat_messages(*m);
  if (const json* tools = f.get("tools")) {
    validate_tools(*tools);
    if (!tools->empty()) r.tools = *tools;
  }
  parse_tool_choice(f.get("tool_choice"), r);
  if (auto v = f.boolean("parallel_tool_calls")) r.parallel_tool_calls = *v;
  if (const json* kw = f.get("chat_template_kwargs")) {
    if (!kw->is_object())
      throw ApiError::bad_request("'chat_template_kwargs' must be an object of template variables",
                                  "chat_template_kwargs");
    r.template_kwargs = *kw;
  }
  r.reasoning_effort = parse_reasoning_effort(f.get("reasoning_effort"), "reasoning_effort");
}

// OpenAI's response_format and vLLM's guided_* fields → SamplingParams::structured_output (at most one).
void parse_structured_output(const Fields& f, SamplingParams& sp, bool response_format) {
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
  if (const json* rf = response_format ? f.get("response_format") : nullptr) {
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

// The sampling fields: lengths, temperature and filters, penalties, seed, n, logprobs (each API spells the length
// and logprobs its own way; the Responses API has one output and reads its top_logprobs itself).
void parse_sampling(Fields& f, GenerateRequest& r, GenerationApi api) {
  SamplingParams& sp = r.params;
  constexpr int64_t kIntMax = std::numeric_limits<int32_t>::max();
  // max_completion_tokens is the newer name of max_tokens in the chat API; the Responses API says max_output_tokens.
  const std::vector<const char*> lengths = api == GenerationApi::kResponses
                                               ? std::vector<const char*>{"max_output_tokens"}
                                               : std::vector<const char*>{"max_tokens", "max_completion_tokens"};
  for (const char* name : lengths)
    if (auto v = f.integer(name, 1, kIntMax)) {
      sp.max_tokens = static_cast<int32_t>(*v);
      r.max_tokens_given = true;
      r.max_tokens_field = name;
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
  if (api != GenerationApi::kResponses)
    if (auto v = f.integer("n", 1, kMaxN)) r.n = static_cast<int32_t>(*v);
  if (api == GenerationApi::kChat) {
    const bool want = f.boolean("logprobs").value_or(false);
    const auto top = f.integer("top_logprobs", 0, kMaxLogprobs);
    if (top && !want) throw ApiError::bad_request("'top_logprobs' needs 'logprobs': true", "top_logprobs");
    if (want) sp.logprobs = static_cast<int32_t>(top.value_or(0));
  } else if (api == GenerationApi::kCompletions) {
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
  if (chat) {
    parse_chat(f, r.chat_request);
  } else {
    const json* p = f.get("prompt");
    if (!p) throw ApiError::bad_request("'prompt' is required", "prompt");
    r.prompts = parse_prompt(*p);
  }
  parse_generation_fields(body, chat ? GenerationApi::kChat : GenerationApi::kCompletions, r);
  return r;
}

template <typename Json>
std::variant<GenerateRequest, ApiError> parse_caught(const Json& body, bool chat) {
  try {
    return parse(body, chat);
  } catch (const ApiError& e) {
    return e;
  } catch (const nlohmann::json::exception& e) {
    return ApiError::bad_request(fmt::format("invalid request: {}", e.what()));
  }
}

}  // namespace

void parse_generation_fields(const json& body, GenerationApi api, GenerateRequest& r) {
  Fields f(body);
  if (auto m = f.string("model")) r.model = *m;
  SamplingParams& sp = r.params;
  parse_sampling(f, r, api);
  parse_stop(f, r);
  // The Responses API says text.format (parsed with the rest of its fields); vLLM's guided_* serve every API.
  parse_structured_output(f, sp, api != GenerationApi::kResponses);
  parse_token_ids(f, sp);
  if (const json* iv = f.get("interventions")) r.interventions = parse_interventions(nlohmann::json(*iv));
  parse_stream(f, r);
  if (auto err = sp.validate()) throw ApiError::bad_request(err->message, err->param);
}

std::variant<GenerateRequest, ApiError> parse_generate_request(const json& body, bool chat) {
  return parse_caught(body, chat);
}

std::variant<GenerateRequest, ApiError> parse_generate_request(const nlohmann::json& body, bool chat) {
  return parse_caught(json(body), chat);
}

std::variant<TokenizeRequest, ApiError> parse_tokenize_request(const json& body) {
  try {
    if (!body.is_object()) throw ApiError::bad_request("the request body must be a JSON object");
    Fields f(body);
    TokenizeRequest r;
    if (const json* m = f.get("messages")) {
      r.chat_request.messages = parse_chat_messages(*m);
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
