#include "server/routes.h"

#include <fmt/format.h>
#include <ctime>

#include "core/error.h"
#include "core/json_scan.h"
#include "core/log.h"
#include "server/chat_prompt.h"
#include "server/generation.h"
#include "server/generation_config.h"
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

template <typename Json = ordered_json>
std::variant<Json, ApiError> parse_body(const std::string& text) {
  if (json_depth(text) > kMaxJsonDepth)
    return ApiError::bad_request(fmt::format("the JSON body nests deeper than {} levels", kMaxJsonDepth));
  Json body = Json::parse(text, nullptr, /*allow_exceptions=*/false);
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

// Prompts → token ids; a chat template failure is the client's 400.
std::variant<std::vector<std::vector<int32_t>>, ApiError> prompt_ids(const Tokenizer& tok, const GenerateRequest& r,
                                                                     const ChatTemplateStyle& style,
                                                                     const std::string& prompt_field) {
  std::vector<std::vector<int32_t>> prompts;
  if (r.chat) {
    try {
      prompts.push_back(chat_prompt_ids(tok, r.chat_request, style));
    } catch (const Error& e) {
      return ApiError::bad_request(fmt::format("chat template: {}", e.what()), prompt_field);
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
                                      GenerateRequest& r, const std::string& prompt_field, int64_t max_model_len) {
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
    r.params.max_tokens = static_cast<int32_t>(r.chat ? room : std::min<int64_t>(16, room));
  } else if (r.params.max_tokens > room) {
    return ApiError::bad_request(fmt::format("max_tokens is {}, but the prompt has {} tokens and max_model_len is {}: "
                                             "at most {} tokens can be generated",
                                             r.params.max_tokens, longest, max_model_len, room),
                                 r.max_tokens_field);
  }
  return std::nullopt;
}

}  // namespace

std::variant<json, ApiError> parse_json_object(const std::string& text) { return parse_body<json>(text); }
std::variant<ordered_json, ApiError> parse_ordered_json_object(const std::string& text) { return parse_body(text); }

namespace {

// The style of the served template, settled once (the front of --data-parallel-size asks on every request).
ChatTemplateStyle style_of(const Tokenizer& tok, const ServerConfig& config) {
  static std::mutex mu;
  static std::string cached_template;
  static std::optional<ContentFormat> cached_forced;
  static ChatTemplateStyle cached = ChatTemplateStyle::of("");
  std::lock_guard<std::mutex> lock(mu);
  if (tok.chat_template() != cached_template || config.chat_template_content_format != cached_forced) {
    cached = ChatTemplateStyle::of(tok.chat_template(), config.chat_template_content_format);
    cached_template = tok.chat_template();
    cached_forced = config.chat_template_content_format;
  }
  return cached;
}

}  // namespace

std::optional<std::vector<int32_t>> routing_prompt_ids(const Tokenizer& tok, const ServerConfig& config, bool chat,
                                                       const std::string& body_text) {
  auto body = parse_body(body_text);
  auto* fields = std::get_if<ordered_json>(&body);
  if (!fields) return std::nullopt;
  auto parsed = parse_generate_request(*fields, chat);
  auto* r = std::get_if<GenerateRequest>(&parsed);
  if (!r || (!r->model.empty() && r->model != config.served_model_name) || !r->interventions.empty())
    return std::nullopt;
  if (!chat && r->prompts.size() != 1) return std::nullopt;
  auto prompts = prompt_ids(tok, *r, style_of(tok, config), "");
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
  template_style_ = ChatTemplateStyle::of(ctx.tokenizer->chat_template(), config_.chat_template_content_format);
  log_info("Chat template content format: {} ({}; --chat-template-content-format overrides)",
           content_format_name(template_style_.content_format),
           config_.chat_template_content_format ? "given" : "detected from the template");
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
    reply.headers.emplace_back("Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS");
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

const std::vector<Router::Route>& Router::routes() {
  using C = RouteCall;
  static const std::vector<Route> table = {
      {"GET", "/health", false, true, [](Router& r, C&) { return r.health(); }},
      {"GET", "/metrics", false, true, [](Router& r, C&) { return r.metrics_text(); }},
      {"GET", "/v1/models", true, true, [](Router& r, C&) { return r.models(); }},
      {"POST", "/v1/completions", true, true,
       [](Router& r, C& c) { return r.generate(c.req, false, std::move(c.on_engine_output)); }},
      {"POST", "/v1/chat/completions", true, true,
       [](Router& r, C& c) { return r.generate(c.req, true, std::move(c.on_engine_output)); }},
      {"POST", "/v1/responses", true, true,
       [](Router& r, C& c) { return r.create_response(c.req, std::move(c.on_engine_output)); }},
      {"GET", "/v1/responses/{}", true, true, [](Router& r, C& c) { return r.get_response(c.req, c.arg); }},
      {"DELETE", "/v1/responses/{}", true, true, [](Router& r, C& c) { return r.delete_response(c.req, c.arg); }},
      {"POST", "/tokenize", true, true, [](Router& r, C& c) { return r.tokenize(c.req); }},
      {"POST", "/detokenize", true, true, [](Router& r, C& c) { return r.detokenize(c.req); }},
      {"POST", "/v1/load_lora_adapter", true, true, [](Router& r, C& c) { return r.lora_admin(c.req, true); }},
      {"POST", "/v1/unload_lora_adapter", true, true, [](Router& r, C& c) { return r.lora_admin(c.req, false); }},
      {"GET", "/v1/engine/state", true, true, [](Router& r, C&) { return r.engine_state(); }},
      {"GET", "/v1/engine/prefix_summary", true, true, [](Router& r, C&) { return r.prefix_summary(); }},
      {"POST", "/v1/engine/trace", true, true,
       [](Router& r, C& c) { return r.engine_trace(c.req, std::move(c.on_engine_output)); }},
      // The web pages hold no data (what they show comes from the routes above, behind the key).
      {"GET", "/", false, false, [](Router& r, C&) { return r.web_page("/"); }},
      {"GET", "/index.html", false, false, [](Router& r, C&) { return r.web_page("/index.html"); }},
      {"GET", "/dashboard", false, false, [](Router& r, C&) { return r.web_page("/dashboard"); }},
      {"GET", "/trace", false, false, [](Router& r, C&) { return r.web_page("/trace"); }},
      {"GET", "/web/{}", false, false, [](Router& r, C& c) { return r.web_page("/web/" + c.arg); }},
  };
  return table;
}

namespace {

// `pattern` against `path`: equal, or equal up to a trailing "{}" that matches one non-empty path segment (`arg`).
bool path_matches(std::string_view pattern, std::string_view path, std::string& arg) {
  const size_t hole = pattern.find("{}");
  if (hole == std::string_view::npos) return pattern == path;
  if (path.size() <= hole || path.substr(0, hole) != pattern.substr(0, hole)) return false;
  const std::string_view rest = path.substr(hole);
  if (rest.find('/') != std::string_view::npos) return false;
  arg = std::string(rest);
  return true;
}

bool method_matches(std::string_view route, std::string_view method) {
  return route == method || (route == "GET" && method == "HEAD");
}

}  // namespace

HttpReply Router::route(const HttpRequest& req, std::function<void()>& on_engine_output) {
  const std::string path = path_of(req.target);
  HttpReply reply;
  if (req.method == "OPTIONS" && !req.origin.empty()) {  // a CORS preflight
    reply.status = 204;
    reply.content_type.clear();
    return reply;
  }
  if (handler_) return handler_(req, std::move(on_engine_output));
  for (const Route& route : routes()) {
    std::string arg;
    if (!method_matches(route.method, req.method) || !path_matches(route.path, path, arg)) continue;
    if (route.needs_key && !authorized(req, reply)) return reply;
    if (route.needs_model && !is_ready(reply)) return reply;
    RouteCall call{req, std::move(arg), std::move(on_engine_output)};
    return route.handler(*this, call);
  }
  return error({404, fmt::format("no route for {} {}", req.method, path), "", ""});
}

HttpReply Router::health() const {
  HttpReply reply;
  reply.content_type = "text/plain";
  return reply;
}

HttpReply Router::metrics_text() const {
  HttpReply reply;
  reply.content_type = "text/plain; version=0.0.4; charset=utf-8";
  reply.body = ctx_.metrics->render();
  return reply;
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
  const ordered_json& j = std::get<ordered_json>(body);
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
  auto parsed = parse_tokenize_request(std::get<ordered_json>(body));
  if (auto* e = std::get_if<ApiError>(&parsed)) return error(*e);
  const TokenizeRequest& r = std::get<TokenizeRequest>(parsed);
  const Tokenizer& tok = *ctx_.tokenizer;
  std::vector<int32_t> ids;
  try {
    ids = r.prompt ? tok.encode(*r.prompt, r.add_special_tokens && tok.add_bos(), false)
                   : chat_prompt_ids(tok, r.chat_request, template_style_);
  } catch (const Error& e) {
    return error(ApiError::bad_request(fmt::format("chat template: {}", e.what()), "messages"));
  }
  return json_reply(200, {{"tokens", ids}, {"count", ids.size()}, {"max_model_len", ctx_.max_model_len}});
}

HttpReply Router::detokenize(const HttpRequest& req) {
  auto body = parse_body(req.body);
  if (auto* e = std::get_if<ApiError>(&body)) return error(*e);
  auto parsed = parse_detokenize_request(std::get<ordered_json>(body));
  if (auto* e = std::get_if<ApiError>(&parsed)) return error(*e);
  const auto& ids = std::get<std::vector<int32_t>>(parsed);
  for (int32_t id : ids)
    if (id < 0 || id >= ctx_.tokenizer->vocab_size())
      return error(ApiError::bad_request(
          fmt::format("token id {} is outside the vocabulary (0..{})", id, ctx_.tokenizer->vocab_size() - 1),
          "tokens"));
  return json_reply(200, {{"prompt", ctx_.tokenizer->decode(ids, true)}});
}

std::optional<ApiError> Router::apply_tools(const ChatRequest& r, SamplingParams& params) const {
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
    params.structured_output = tool_calls_spec(r.tools, o, *ctx_.tokenizer);
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

std::optional<ApiError> Router::prepare(GenerateRequest& r, const std::string& prompt_field,
                                        std::vector<std::vector<int32_t>>& prompts, ChatOutputOptions& output) const {
  if (!r.model.empty() && r.model != config_.served_model_name) {
    r.params.lora = ctx_.loras ? ctx_.loras->find(r.model) : nullptr;  // "model": an adapter's name
    if (!r.params.lora)
      return ApiError{404,
                      fmt::format("The model `{}` does not exist (this server serves `{}`{})", r.model,
                                  config_.served_model_name, ctx_.loras ? " and the LoRA adapters of /v1/models" : ""),
                      "model", "NotFoundError"};
  }
  if (r.params.logprobs > config_.max_logprobs)
    return ApiError::bad_request(
        fmt::format("at most {} logprobs per token are served (--max-logprobs)", config_.max_logprobs),
        r.chat ? "top_logprobs" : "logprobs");
  const bool tools = r.chat && r.chat_request.tool_choice != ToolChoice::kNone;
  if (tools)
    if (auto e = apply_tools(r.chat_request, r.params)) return e;
  auto ids = prompt_ids(*ctx_.tokenizer, r, template_style_, prompt_field);
  if (auto* e = std::get_if<ApiError>(&ids)) return *e;
  prompts = std::move(std::get<std::vector<std::vector<int32_t>>>(ids));
  if (auto e = check_lengths(*ctx_.tokenizer, prompts, r, prompt_field, ctx_.max_model_len)) return e;
  try {
    r.params.interventions = resolve_interventions(r.interventions, ctx_.directions);
  } catch (const ApiError& e) {
    return e;
  }
  output = {};
  if (r.chat && !config_.reasoning_parser.empty())
    output.reasoning = reasoning_format_from_name(config_.reasoning_parser);
  if (tools) output.tools = tool_format_;
  // Calls made under the tool grammar (not beside a response_format's) stream their arguments in fragments.
  output.tool_grammar =
      tools && r.params.structured_output &&
      (r.params.structured_output->source == "tools" || r.params.structured_output->source == "tool_choice");
  return std::nullopt;
}

std::optional<ApiError> Router::admit(GenerationJob& job) {
  std::lock_guard<std::mutex> lock(admission_mu_);
  const int64_t waiting = ctx_.engine->num_waiting();
  if (waiting + static_cast<int64_t>(job.num_choices()) > config_.max_waiting)
    return ApiError{429,
                    fmt::format("the server is overloaded: {} requests are waiting (--max-waiting {}); retry later",
                                waiting, config_.max_waiting),
                    "", ""};
  return job.start();
}

HttpReply Router::generate(const HttpRequest& req, bool chat, std::function<void()> on_engine_output) {
  auto body = parse_body(req.body);
  if (auto* e = std::get_if<ApiError>(&body)) return error(*e);
  ordered_json& fields = std::get<ordered_json>(body);
  if (chat)
    apply_generation_defaults(fields, config_.generation_defaults, {"max_tokens", "max_completion_tokens"});
  else
    apply_generation_defaults(fields, config_.generation_defaults, {"max_tokens"});
  auto parsed = parse_generate_request(fields, chat);
  if (auto* e = std::get_if<ApiError>(&parsed)) return error(*e);
  GenerateRequest& r = std::get<GenerateRequest>(parsed);
  std::vector<std::vector<int32_t>> ids;
  ChatOutputOptions output;
  if (auto e = prepare(r, chat ? "messages" : "prompt", ids, output)) return error(*e);
  const Tokenizer& tok = *ctx_.tokenizer;
  auto job = std::make_shared<GenerationJob>(*ctx_.engine, tok, std::move(ids), r.params, r.n, r.stop,
                                             /*skip_special_tokens=*/output.tools != ToolCallFormat::kMistral);
  job->set_on_output(std::move(on_engine_output));
  if (auto e = admit(*job)) return error(*e);
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

std::string Router::api_key_of(const HttpRequest& req) const {
  if (config_.api_key.empty()) return "";
  const std::string prefix = "Bearer ";
  return req.authorization.compare(0, prefix.size(), prefix) == 0 ? req.authorization.substr(prefix.size()) : "";
}

}  // namespace kvik::server
