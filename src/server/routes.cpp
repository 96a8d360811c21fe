#include "server/routes.h"

#include <fmt/format.h>
#include <ctime>

#include "core/error.h"
#include "core/json_scan.h"
#include "server/chat_prompt.h"
#include "server/generation.h"
#include "server/openai_responses.h"
#include "server/openai_schema.h"
#include "server/tool_grammar.h"

namespace kvik::server {

using nlohmann::json;
using nlohmann::ordered_json;

namespace {

constexpr int kMaxJsonDepth = 64;

HttpReply json_reply(int status, const json& body) {
  HttpReply r;
  r.status = status;
  r.body = dump(body);
  return r;
}

// Nesting depth of a JSON text, counted outside strings; a bound before parsing keeps hostile bodies cheap.
int json_depth(const std::string& s) {
  JsonBracketScan scan;
  int max_depth = 0;
  for (char c : s)
    if (scan.step(c) > 0) max_depth = std::max(max_depth, scan.depth);
  return max_depth;
}

std::variant<json, ApiError> parse_body(const std::string& text) {
  if (json_depth(text) > kMaxJsonDepth)
    return ApiError::bad_request(fmt::format("the JSON body nests deeper than {} levels", kMaxJsonDepth));
  json body = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) return ApiError::bad_request("the request body is not valid JSON");
  if (!body.is_object()) return ApiError::bad_request("the request body must be a JSON object");
  return body;
}

bool constant_time_equal(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

std::string path_of(const std::string& target) { return target.substr(0, target.find('?')); }

// generation_config.json defaults fill the sampling fields a request leaves out (vLLM's --generation-config).
void apply_defaults(json& body, const json& defaults, bool chat) {
  for (const auto& [key, value] : defaults.items()) {
    if (key == "max_tokens" && chat && body.contains("max_completion_tokens")) continue;
    if (!body.contains(key)) body[key] = value;
  }
}

// A chat request's messages and template variables in the client's key order (a template's `tojson` of the
// tools shows it). Assistant tool_calls arguments given as JSON text become objects, as templates expect
// (vLLM does the same); chat_template_kwargs and the tools are the template's further variables.
struct ChatInputs {
  ordered_json messages;
  ordered_json extra = ordered_json::object();
  ordered_json tools;
};

ChatInputs chat_inputs(const std::string& body_text) {
  const ordered_json body = ordered_json::parse(body_text, nullptr, /*allow_exceptions=*/false);
  ChatInputs in;
  if (!body.is_object()) return in;
  if (auto m = body.find("messages"); m != body.end()) in.messages = *m;
  for (ordered_json& m : in.messages) {
    // A null content (an assistant turn with tool calls only) is "" to the template, as vLLM passes it: templates
    // concatenate it.
    if (auto c = m.find("content"); c != m.end() && c->is_null()) *c = "";
    auto calls = m.find("tool_calls");
    if (calls == m.end() || !calls->is_array()) continue;
    for (ordered_json& c : *calls) {
      ordered_json& f = c["function"];
      if (!f.contains("arguments") || !f["arguments"].is_string()) continue;
      ordered_json args = ordered_json::parse(f["arguments"].get<std::string>(), nullptr, false);
      if (args.is_object()) f["arguments"] = std::move(args);
    }
  }
  if (auto kw = body.find("chat_template_kwargs"); kw != body.end() && kw->is_object())
    for (auto it = kw->begin(); it != kw->end(); ++it)
      if (it.key() != "messages") in.extra[it.key()] = it.value();
  if (auto t = body.find("tools"); t != body.end() && t->is_array() && !t->empty()) {
    in.tools = *t;
    in.extra["tools"] = *t;
  }
  return in;
}

// Prompts → token ids; a chat template failure is the client's 400.
std::variant<std::vector<std::vector<int32_t>>, ApiError> prompt_ids(const Tokenizer& tok, const GenerateRequest& r,
                                                                     const ChatInputs* chat) {
  std::vector<std::vector<int32_t>> prompts;
  if (chat) {
    try {
      prompts.push_back(chat_prompt_ids(tok, chat->messages, true, chat->extra));
    } catch (const Error& e) {
      return ApiError::bad_request(fmt::format("chat template: {}", e.what()), "messages");
    }
    return prompts;
  }
  for (const Prompt& p : r.prompts) {
    if (const auto* text = std::get_if<std::string>(&p))
      prompts.push_back(tok.encode(*text, tok.add_bos(), false));
    else
      prompts.push_back(std::get<std::vector<int32_t>>(p));
  }
  return prompts;
}

// Checks the prompts against the vocabulary and max_model_len and settles max_tokens.
std::optional<ApiError> check_lengths(const Tokenizer& tok, const std::vector<std::vector<int32_t>>& prompts,
                                      GenerateRequest& r, bool chat, int64_t max_model_len, bool max_completion) {
  const char* prompt_field = chat ? "messages" : "prompt";
  int64_t longest = 0;
  for (const auto& ids : prompts) {
    if (ids.empty()) return ApiError::bad_request("the prompt is empty", prompt_field);
    for (int32_t id : ids)
      if (id < 0 || id >= tok.vocab_size())
        return ApiError::bad_request(
            fmt::format("token id {} is outside the vocabulary (0..{})", id, tok.vocab_size() - 1), prompt_field);
    longest = std::max<int64_t>(longest, static_cast<int64_t>(ids.size()));
  }
  if (longest >= max_model_len)
    return ApiError::bad_request(fmt::format("the prompt has {} tokens, but max_model_len is {}: shorten the prompt "
                                             "(no room is left to generate)",
                                             longest, max_model_len),
                                 prompt_field);
  const int64_t room = max_model_len - longest;
  if (!r.max_tokens_given) {
    r.params.max_tokens = static_cast<int32_t>(chat ? room : std::min<int64_t>(16, room));
  } else if (r.params.max_tokens > room) {
    return ApiError::bad_request(fmt::format("max_tokens is {}, but the prompt has {} tokens and max_model_len is {}: "
                                             "at most {} tokens can be generated",
                                             r.params.max_tokens, longest, max_model_len, room),
                                 max_completion ? "max_completion_tokens" : "max_tokens");
  }
  return std::nullopt;
}

}  // namespace

std::variant<json, ApiError> parse_json_object(const std::string& text) { return parse_body(text); }

std::optional<std::vector<int32_t>> routing_prompt_ids(const Tokenizer& tok, const ServerConfig& config, bool chat,
                                                       const std::string& body_text) {
  auto body = parse_body(body_text);
  auto* fields = std::get_if<json>(&body);
  if (!fields) return std::nullopt;
  auto parsed = parse_generate_request(*fields, chat);
  auto* r = std::get_if<GenerateRequest>(&parsed);
  if (!r || (!r->model.empty() && r->model != config.served_model_name) || !r->interventions.empty())
    return std::nullopt;
  if (!chat && r->prompts.size() != 1) return std::nullopt;
  ChatInputs inputs;
  if (chat) inputs = chat_inputs(body_text);
  auto prompts = prompt_ids(tok, *r, chat ? &inputs : nullptr);
  auto* ids = std::get_if<std::vector<std::vector<int32_t>>>(&prompts);
  if (!ids || ids->empty()) return std::nullopt;
  return std::move(ids->front());
}

HttpReply Router::error(const ApiError& e) {
  HttpReply r = json_reply(e.status, e.to_json());
  if (e.status == 429 || e.status == 503) r.headers.emplace_back("Retry-After", "1");
  return r;
}

void Router::set_ready(const ModelContext& ctx) {
  ctx_ = ctx;
  if (auto f = tool_call_format_from_name(config_.tool_call_parser))
    tool_format_ = *f;
  else if (auto d = detect_tool_call_format(ctx.tokenizer->chat_template()))
    tool_format_ = *d;
  ready_ = true;
}

bool Router::is_ready(HttpReply& reply) const {
  if (ready_) return true;
  reply = error({503, "the model is still loading", "", ""});
  return false;
}

bool Router::authorized(const HttpRequest& req, HttpReply& reply) const {
  if (config_.api_key.empty()) return true;
  const std::string& auth = req.authorization;
  const std::string prefix = "Bearer ";
  if (auth.size() > prefix.size() && auth.compare(0, prefix.size(), prefix) == 0 &&
      constant_time_equal(auth.substr(prefix.size()), config_.api_key))
    return true;
  reply =
      error({401, auth.empty() ? "missing API key: send 'Authorization: Bearer <key>'" : "invalid API key", "", ""});
  return false;
}

void Router::add_cors(const HttpRequest& req, HttpReply& reply) const {
  if (req.origin.empty() || config_.allowed_origins.empty()) return;
  bool any = false, listed = false;
  for (const std::string& o : config_.allowed_origins) {
    any |= o == "*";
    listed |= o == req.origin;
  }
  if (!any && !listed) return;
  reply.headers.emplace_back("Access-Control-Allow-Origin", any ? "*" : req.origin);
  if (!any) reply.headers.emplace_back("Vary", "Origin");
  if (req.method == "OPTIONS") {
    reply.headers.emplace_back("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
    reply.headers.emplace_back("Access-Control-Allow-Headers", req.access_control_request_headers.empty()
                                                                   ? "Authorization, Content-Type"
                                                                   : req.access_control_request_headers);
    reply.headers.emplace_back("Access-Control-Max-Age", "600");
  }
}

HttpReply Router::handle(const HttpRequest& req, std::function<void()> on_engine_output) {
  HttpReply reply;
  try {
    reply = route(req, on_engine_output);
  } catch (const std::exception& e) {
    reply = error({500, std::string("internal error: ") + e.what(), "", ""});
  }
  add_cors(req, reply);
  return reply;
}

HttpReply Router::route(const HttpRequest& req, std::function<void()>& on_engine_output) {
  const std::string path = path_of(req.target);
  const bool get = req.method == "GET" || req.method == "HEAD", post = req.method == "POST";
  HttpReply reply;
  if (req.method == "OPTIONS" && !req.origin.empty()) {  // a CORS preflight
    reply.status = 204;
    reply.content_type.clear();
    return reply;
  }
  if (handler_) return handler_(req, std::move(on_engine_output));
  if (get && path == "/health") {
    if (!is_ready(reply)) return reply;
    reply.content_type = "text/plain";
    return reply;
  }
  if (get && path == "/metrics") {
    if (!is_ready(reply)) return reply;
    reply.content_type = "text/plain; version=0.0.4; charset=utf-8";
    reply.body = ctx_.metrics->render();
    return reply;
  }
  const bool known =
      (get && (path == "/v1/models" || path == "/v1/engine/state" || path == "/v1/engine/prefix_summary")) ||
      (post &&
       (path == "/v1/completions" || path == "/v1/chat/completions" || path == "/tokenize" || path == "/detokenize" ||
        path == "/v1/load_lora_adapter" || path == "/v1/unload_lora_adapter" || path == "/v1/engine/trace"));
  if (!known && get && path.rfind("/v1/", 0) != 0) return web_page(path);
  if (!known) return error({404, fmt::format("no route for {} {}", req.method, path), "", ""});
  if (!authorized(req, reply) || !is_ready(reply)) return reply;
  if (path == "/v1/models") return models();
  if (path == "/v1/engine/state") return engine_state();
  if (path == "/v1/engine/prefix_summary") return prefix_summary();
  if (path == "/v1/engine/trace") return engine_trace(req, std::move(on_engine_output));
  if (path == "/tokenize") return tokenize(req);
  if (path == "/detokenize") return detokenize(req);
  if (path == "/v1/load_lora_adapter" || path == "/v1/unload_lora_adapter")
    return lora_admin(req, path == "/v1/load_lora_adapter");
  return generate(req, path == "/v1/chat/completions", std::move(on_engine_output));
}

HttpReply Router::models() const {
  const auto now = static_cast<int64_t>(std::time(nullptr));
  json model = {{"id", config_.served_model_name},
                {"object", "model"},
                {"created", now},
                {"owned_by", "kvik"},
                {"root", nullptr},
                {"parent", nullptr},
                {"max_model_len", ctx_.max_model_len}};
  json data = json::array({model});
  if (ctx_.loras)
    for (const auto& a : ctx_.loras->list())
      data.push_back({{"id", a->name},
                      {"object", "model"},
                      {"created", now},
                      {"owned_by", "kvik"},
                      {"root", a->path},
                      {"parent", config_.served_model_name},
                      {"max_model_len", ctx_.max_model_len}});
  return json_reply(200, {{"object", "list"}, {"data", data}});
}

HttpReply Router::lora_admin(const HttpRequest& req, bool load) {
  if (!ctx_.loras)
    return error(ApiError::bad_request("LoRA adapters are off: start the server with --enable-lora", "lora_name"));
  auto body = parse_body(req.body);
  if (auto* e = std::get_if<ApiError>(&body)) return error(*e);
  const json& j = std::get<json>(body);
  const auto field = [&](const char* key) -> std::variant<std::string, ApiError> {
    if (!j.contains(key) || !j[key].is_string())
      return ApiError::bad_request(fmt::format("'{}' is required and must be a string", key), key);
    return j[key].get<std::string>();
  };
  auto name = field("lora_name");
  if (auto* e = std::get_if<ApiError>(&name)) return error(*e);
  const std::string& n = std::get<std::string>(name);
  std::optional<ApiError> err;
  if (load) {
    auto path = field("lora_path");
    if (auto* e = std::get_if<ApiError>(&path)) return error(*e);
    err = ctx_.loras->load(n, std::get<std::string>(path));
  } else {
    err = ctx_.loras->unload(n);
  }
  if (err) return error(*err);
  HttpReply reply;
  reply.content_type = "text/plain";
  reply.body = fmt::format("Success: LoRA adapter '{}' {} successfully.", n, load ? "added" : "removed");
  return reply;
}

HttpReply Router::tokenize(const HttpRequest& req) {
  auto body = parse_body(req.body);
  if (auto* e = std::get_if<ApiError>(&body)) return error(*e);
  auto parsed = parse_tokenize_request(std::get<json>(body));
  if (auto* e = std::get_if<ApiError>(&parsed)) return error(*e);
  const TokenizeRequest& r = std::get<TokenizeRequest>(parsed);
  const Tokenizer& tok = *ctx_.tokenizer;
  std::vector<int32_t> ids;
  try {
    ids = r.prompt ? tok.encode(*r.prompt, r.add_special_tokens && tok.add_bos(), false)
                   : chat_prompt_ids(tok, r.messages, true);
  } catch (const Error& e) {
    return error(ApiError::bad_request(fmt::format("chat template: {}", e.what()), "messages"));
  }
  return json_reply(200, {{"tokens", ids}, {"count", ids.size()}, {"max_model_len", ctx_.max_model_len}});
}

HttpReply Router::detokenize(const HttpRequest& req) {
  auto body = parse_body(req.body);
  if (auto* e = std::get_if<ApiError>(&body)) return error(*e);
  auto parsed = parse_detokenize_request(std::get<json>(body));
  if (auto* e = std::get_if<ApiError>(&parsed)) return error(*e);
  const auto& ids = std::get<std::vector<int32_t>>(parsed);
  for (int32_t id : ids)
    if (id < 0 || id >= ctx_.tokenizer->vocab_size())
      return error(ApiError::bad_request(
          fmt::format("token id {} is outside the vocabulary (0..{})", id, ctx_.tokenizer->vocab_size() - 1),
          "tokens"));
  return json_reply(200, {{"prompt", ctx_.tokenizer->decode(ids, true)}});
}

std::optional<ApiError> Router::apply_tools(const GenerateRequest& r, const ordered_json& tools,
                                            SamplingParams& params) const {
  const bool forced = r.tool_choice == ToolChoice::kRequired || r.tool_choice == ToolChoice::kNamed;
  if (r.tool_choice == ToolChoice::kAuto && !config_.enable_auto_tool_choice)
    return ApiError::bad_request(
        "\"auto\" tool choice requires the server to run with --enable-auto-tool-choice (and, unless the chat "
        "template shows the model's call syntax, --tool-call-parser)",
        "tool_choice");
  if (params.structured_output) {
    if (forced)
      return ApiError::bad_request(
          fmt::format("'tool_choice' cannot be combined with '{}'", params.structured_output->source), "tool_choice");
    return std::nullopt;  // auto beside response_format: calls are parsed, the format's grammar holds
  }
  ToolGrammarOptions o;
  o.format = tool_format_;
  o.only_name = r.tool_choice == ToolChoice::kNamed ? r.tool_choice_name : "";
  o.parallel = r.parallel_tool_calls && r.tool_choice != ToolChoice::kNamed;
  o.lazy = !forced;
  try {
    params.structured_output = tool_calls_spec(tools, o, *ctx_.tokenizer);
    if (o.lazy && !config_.reasoning_parser.empty()) {  // no call is triggered inside the thinking
      params.structured_output->think_open = "<think>";
      params.structured_output->think_close = "</think>";
      params.structured_output->think_always = config_.reasoning_parser == "deepseek_r1";
    }
  } catch (const Error& e) {
    // "tools[2].function.parameters: json_schema: ..." names its field; other messages start with "tools:".
    const std::string what = e.what();
    const size_t colon = what.find(':');
    const std::string field =
        what.rfind("tools[", 0) == 0 && colon != std::string::npos ? what.substr(0, colon) : "tools";
    return ApiError::bad_request(what.rfind("tools", 0) == 0 ? what : "tools: " + what, field);
  }
  return std::nullopt;
}

HttpReply Router::generate(const HttpRequest& req, bool chat, std::function<void()> on_engine_output) {
  auto body = parse_body(req.body);
  if (auto* e = std::get_if<ApiError>(&body)) return error(*e);
  json& fields = std::get<json>(body);
  apply_defaults(fields, config_.generation_defaults, chat);
  auto parsed = parse_generate_request(fields, chat);
  if (auto* e = std::get_if<ApiError>(&parsed)) return error(*e);
  GenerateRequest& r = std::get<GenerateRequest>(parsed);
  if (!r.model.empty() && r.model != config_.served_model_name) {
    r.params.lora = ctx_.loras ? ctx_.loras->find(r.model) : nullptr;  // "model": an adapter's name
    if (!r.params.lora)
      return error({404,
                    fmt::format("The model `{}` does not exist (this server serves `{}`{})", r.model,
                                config_.served_model_name, ctx_.loras ? " and the LoRA adapters of /v1/models" : ""),
                    "model", "NotFoundError"});
  }
  if (r.params.logprobs > config_.max_logprobs)
    return error(ApiError::bad_request(
        fmt::format("at most {} logprobs per token are served (--max-logprobs)", config_.max_logprobs),
        chat ? "top_logprobs" : "logprobs"));
  const Tokenizer& tok = *ctx_.tokenizer;
  ChatInputs inputs;
  if (chat) inputs = chat_inputs(req.body);
  const bool tools = chat && r.tool_choice != ToolChoice::kNone;
  if (tools)
    if (auto e = apply_tools(r, inputs.tools, r.params)) return error(*e);
  auto prompts = prompt_ids(tok, r, chat ? &inputs : nullptr);
  if (auto* e = std::get_if<ApiError>(&prompts)) return error(*e);
  auto& ids = std::get<std::vector<std::vector<int32_t>>>(prompts);
  if (auto e = check_lengths(tok, ids, r, chat, ctx_.max_model_len, chat && fields.contains("max_completion_tokens")))
    return error(*e);
  try {
    r.params.interventions = resolve_interventions(r.interventions, ctx_.directions);
  } catch (const ApiError& e) {
    return error(e);
  }

  ChatOutputOptions output;
  if (chat && !config_.reasoning_parser.empty())
    output.reasoning = reasoning_format_from_name(config_.reasoning_parser);
  if (tools) output.tools = tool_format_;
  // Calls made under the tool grammar (not beside a response_format's) stream their arguments in fragments.
  output.tool_grammar =
      tools && r.params.structured_output &&
      (r.params.structured_output->source == "tools" || r.params.structured_output->source == "tool_choice");
  auto job = std::make_shared<GenerationJob>(*ctx_.engine, tok, std::move(ids), r.params, r.n, r.stop,
                                             /*skip_special_tokens=*/output.tools != ToolCallFormat::kMistral);
  job->set_on_output(std::move(on_engine_output));
  {
    std::lock_guard<std::mutex> lock(admission_mu_);
    const int64_t waiting = ctx_.engine->num_waiting();
    if (waiting + static_cast<int64_t>(job->num_choices()) > config_.max_waiting)
      return error({429,
                    fmt::format("the server is overloaded: {} requests are waiting (--max-waiting {}); retry later",
                                waiting, config_.max_waiting),
                    "", ""});
    if (auto err = job->start()) return error(*err);
  }
  ResponseMeta meta;
  meta.chat = chat;
  meta.id = (chat ? "chatcmpl-" : "cmpl-") + next_request_id();
  meta.created = static_cast<int64_t>(std::time(nullptr));
  meta.model = r.params.lora ? r.model : config_.served_model_name;
  meta.logprobs = r.params.logprobs >= 0;
  meta.output = output;
  HttpReply reply;
  reply.stream = std::make_shared<ResponseStream>(std::move(job), std::move(meta), tok, r.stream, r.include_usage);
  if (r.stream) {
    reply.content_type = "text/event-stream";
    reply.headers.emplace_back("Cache-Control", "no-cache");
  }
  return reply;
}

}  // namespace kvik::server
