#include "server/http_server.h"

#include <httplib.h>

#include <ctime>
#include <fmt/format.h>

#include "core/error.h"
#include "core/log.h"
#include "server/chat_prompt.h"
#include "server/generation.h"
#include "server/openai_responses.h"
#include "server/openai_schema.h"

namespace kvik::server {

using nlohmann::json;

namespace {

constexpr int kMaxJsonDepth = 64;
constexpr auto kPollInterval = std::chrono::milliseconds(100);
constexpr int kKeepAliveEveryPolls = 10;  // an SSE comment after ~1 s without output, to notice a gone client

void send_json(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(dump(body), "application/json");
}

void send_error(httplib::Response& res, const ApiError& e) {
  if (e.status == 429) res.set_header("Retry-After", "1");
  send_json(res, e.status, e.to_json());
}

// Nesting depth of a JSON text, counted outside strings; a bound before parsing keeps hostile bodies cheap.
int json_depth(const std::string& s) {
  int depth = 0, max_depth = 0;
  bool in_string = false, escaped = false;
  for (char c : s) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      max_depth = std::max(max_depth, ++depth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return max_depth;
}

std::variant<json, ApiError> parse_body(const httplib::Request& req) {
  if (json_depth(req.body) > kMaxJsonDepth)
    return ApiError::bad_request(fmt::format("the JSON body nests deeper than {} levels", kMaxJsonDepth));
  json body = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
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

std::string sse(const json& j) { return "data: " + dump(j) + "\n\n"; }

}  // namespace

HttpServer::HttpServer(ServerConfig config) : config_(std::move(config)), svr_(std::make_unique<httplib::Server>()) {
  const int threads = config_.num_http_threads;
  svr_->new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  svr_->set_payload_max_length(config_.max_body_bytes);
  svr_->set_keep_alive_max_count(1000);
  svr_->set_read_timeout(30);
  svr_->set_write_timeout(30);
  routes();
}

HttpServer::~HttpServer() = default;

int HttpServer::bind() {
  if (!svr_->bind_to_port(config_.host, config_.port))
    fail("cannot listen on {}:{} (in use, or not an address of this machine): choose another --host/--port",
         config_.host, config_.port);
  return config_.port;
}

void HttpServer::listen() { svr_->listen_after_bind(); }

void HttpServer::stop() { svr_->stop(); }

void HttpServer::set_ready(const ModelContext& ctx) {
  ctx_ = ctx;
  ready_ = true;
}

bool HttpServer::ready(httplib::Response& res) const {
  if (ready_) return true;
  send_error(res, {503, "the model is still loading", "", ""});
  return false;
}

bool HttpServer::authorized(const httplib::Request& req, httplib::Response& res) const {
  if (config_.api_key.empty()) return true;
  const std::string auth = req.get_header_value("Authorization");
  const std::string prefix = "Bearer ";
  if (auth.size() > prefix.size() && auth.compare(0, prefix.size(), prefix) == 0 &&
      constant_time_equal(auth.substr(prefix.size()), config_.api_key))
    return true;
  send_error(res, {401, auth.empty() ? "missing API key: send 'Authorization: Bearer <key>'" : "invalid API key", "", ""});
  return false;
}

void HttpServer::routes() {
  svr_->set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown error";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    send_error(res, {500, "internal error: " + what, "", ""});
  });
  svr_->set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 404) send_error(res, {404, fmt::format("no route for {} {}", req.method, req.path), "", ""});
    else if (res.status == 413) send_error(res, {413, "the request body is too large", "", ""});
    else send_error(res, {res.status, fmt::format("HTTP {}", res.status), "", ""});
  });

  svr_->Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    if (!ready(res)) return;
    res.status = 200;
    res.set_content("", "text/plain");
  });
  svr_->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    if (!ready(res)) return;
    res.set_content(ctx_.metrics->render(), "text/plain; version=0.0.4; charset=utf-8");
  });
  svr_->Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
    if (!authorized(req, res) || !ready(res)) return;
    json model = {{"id", config_.served_model_name},
                  {"object", "model"},
                  {"created", static_cast<int64_t>(std::time(nullptr))},
                  {"owned_by", "kvik"},
                  {"max_model_len", ctx_.max_model_len}};
    send_json(res, 200, {{"object", "list"}, {"data", json::array({model})}});
  });
  svr_->Post("/v1/completions",
             [this](const httplib::Request& req, httplib::Response& res) { handle_generate(req, res, false); });
  svr_->Post("/v1/chat/completions",
             [this](const httplib::Request& req, httplib::Response& res) { handle_generate(req, res, true); });
  svr_->Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) { handle_tokenize(req, res); });
  svr_->Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) { handle_detokenize(req, res); });
}

void HttpServer::handle_tokenize(const httplib::Request& req, httplib::Response& res) {
  if (!authorized(req, res) || !ready(res)) return;
  auto body = parse_body(req);
  if (auto* e = std::get_if<ApiError>(&body)) return send_error(res, *e);
  auto parsed = parse_tokenize_request(std::get<json>(body));
  if (auto* e = std::get_if<ApiError>(&parsed)) return send_error(res, *e);
  const TokenizeRequest& r = std::get<TokenizeRequest>(parsed);
  const Tokenizer& tok = *ctx_.tokenizer;
  std::vector<int32_t> ids;
  try {
    ids = r.prompt ? tok.encode(*r.prompt, r.add_special_tokens && tok.add_bos(), false)
                   : chat_prompt_ids(tok, r.messages, true);
  } catch (const Error& e) {
    return send_error(res, ApiError::bad_request(fmt::format("chat template: {}", e.what()), "messages"));
  }
  send_json(res, 200, {{"tokens", ids}, {"count", ids.size()}, {"max_model_len", ctx_.max_model_len}});
}

void HttpServer::handle_detokenize(const httplib::Request& req, httplib::Response& res) {
  if (!authorized(req, res) || !ready(res)) return;
  auto body = parse_body(req);
  if (auto* e = std::get_if<ApiError>(&body)) return send_error(res, *e);
  auto parsed = parse_detokenize_request(std::get<json>(body));
  if (auto* e = std::get_if<ApiError>(&parsed)) return send_error(res, *e);
  const auto& ids = std::get<std::vector<int32_t>>(parsed);
  for (int32_t id : ids)
    if (id < 0 || id >= ctx_.tokenizer->vocab_size())
      return send_error(res, ApiError::bad_request(
                                 fmt::format("token id {} is outside the vocabulary (0..{})", id, ctx_.tokenizer->vocab_size() - 1),
                                 "tokens"));
  send_json(res, 200, {{"prompt", ctx_.tokenizer->decode(ids, true)}});
}

namespace {

// The request's prompts as token ids, checked against the vocabulary and max_model_len; max_tokens defaults to the
// room left (chat) or 16, and a given one must fit.
std::optional<ApiError> prompt_ids(GenerateRequest& r, const json& body, bool chat, const Tokenizer& tok,
                                   int64_t max_model_len, std::vector<std::vector<int32_t>>& prompts) {
  if (chat) {
    try {
      prompts.push_back(chat_prompt_ids(tok, r.messages, true));
    } catch (const Error& e) {
      return ApiError::bad_request(fmt::format("chat template: {}", e.what()), "messages");
    }
  } else {
    for (const Prompt& p : r.prompts) {
      if (const auto* text = std::get_if<std::string>(&p)) prompts.push_back(tok.encode(*text, tok.add_bos(), false));
      else prompts.push_back(std::get<std::vector<int32_t>>(p));
    }
  }
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
    return ApiError::bad_request(fmt::format("the prompt has {} tokens, but max_model_len is {}: "
                                             "shorten the prompt (no room is left to generate)",
                                             longest, max_model_len),
                                 prompt_field);
  const int64_t room = max_model_len - longest;
  if (!r.max_tokens_given) {
    r.params.max_tokens = static_cast<int32_t>(chat ? room : std::min<int64_t>(16, room));
  } else if (r.params.max_tokens > room) {
    return ApiError::bad_request(
        fmt::format("max_tokens is {}, but the prompt has {} tokens and max_model_len is {}: at "
                    "most {} tokens can be generated",
                    r.params.max_tokens, longest, max_model_len, room),
        chat && body.contains("max_completion_tokens") ? "max_completion_tokens" : "max_tokens");
  }
  return std::nullopt;
}

// Streaming: one SSE chunk per engine output (one engine step of one choice), keep-alive comments while idle.
void stream_response(httplib::Response& res, std::shared_ptr<GenerationJob> job, const ResponseMeta& meta,
                     bool include_usage, const Tokenizer& tok) {
  struct StreamState {
    std::vector<bool> sent_first;
    std::vector<size_t> text_offset;
  };
  auto state = std::make_shared<StreamState>();
  state->sent_first.assign(job->num_choices(), false);
  state->text_offset.assign(job->num_choices(), 0);
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [job, state, meta, include_usage, tokp = &tok](size_t, httplib::DataSink& sink) {
        const Tokenizer& tok = *tokp;
        int idle_polls = 0;
        while (!job->done()) {
          std::vector<ChoiceDelta> deltas = job->next(kPollInterval);
          if (deltas.empty()) {
            if (++idle_polls < kKeepAliveEveryPolls) continue;
            idle_polls = 0;
            if (!sink.write(": keep-alive\n\n", 14)) return false;  // the destructor aborts the job
            continue;
          }
          idle_polls = 0;
          for (ChoiceDelta& d : deltas) {
            const bool first = !state->sent_first[d.index];
            state->sent_first[d.index] = true;
            const std::string chunk = sse(chunk_json(meta, tok, d, first, state->text_offset[d.index], include_usage));
            for (const auto& lp : d.logprobs) state->text_offset[d.index] += tok.token_to_piece(lp.token).size();
            if (!sink.write(chunk.data(), chunk.size())) {
              job->abort();
              return false;
            }
          }
        }
        std::string tail;
        if (include_usage) tail += sse(usage_chunk_json(meta, job->usage()));
        tail += "data: [DONE]\n\n";
        if (!sink.write(tail.data(), tail.size())) return false;
        sink.done();
        return true;
      },
      [job](bool success) {
        if (!success) job->abort();
      });
}

}  // namespace

void HttpServer::handle_generate(const httplib::Request& req, httplib::Response& res, bool chat) {
  if (!authorized(req, res) || !ready(res)) return;
  auto body = parse_body(req);
  if (auto* e = std::get_if<ApiError>(&body)) return send_error(res, *e);
  auto parsed = parse_generate_request(std::get<json>(body), chat);
  if (auto* e = std::get_if<ApiError>(&parsed)) return send_error(res, *e);
  GenerateRequest& r = std::get<GenerateRequest>(parsed);
  if (!r.model.empty() && r.model != config_.served_model_name)
    return send_error(res, {404, fmt::format("The model `{}` does not exist (this server serves `{}`)", r.model,
                                             config_.served_model_name),
                            "model", "NotFoundError"});
  const Tokenizer& tok = *ctx_.tokenizer;
  std::vector<std::vector<int32_t>> prompts;
  if (auto err = prompt_ids(r, std::get<json>(body), chat, tok, ctx_.max_model_len, prompts))
    return send_error(res, *err);
  try {
    r.params.interventions = resolve_interventions(r.interventions, ctx_.directions);
  } catch (const ApiError& e) {
    return send_error(res, e);
  }

  auto job = std::make_shared<GenerationJob>(*ctx_.engine, tok, std::move(prompts), r.params, r.n, r.stop);
  {
    std::lock_guard<std::mutex> lock(admission_mu_);
    const int64_t waiting = ctx_.engine->num_waiting();
    if (waiting + static_cast<int64_t>(job->num_choices()) > config_.max_waiting)
      return send_error(res, {429, fmt::format("the server is overloaded: {} requests are waiting (--max-waiting {}); "
                                               "retry later", waiting, config_.max_waiting), "", ""});
    if (auto err = job->start()) return send_error(res, *err);
  }

  ResponseMeta meta;
  meta.chat = chat;
  meta.id = (chat ? "chatcmpl-" : "cmpl-") + next_request_id();
  meta.created = static_cast<int64_t>(std::time(nullptr));
  meta.model = config_.served_model_name;
  meta.logprobs = r.params.logprobs >= 0;
  if (r.stream) return stream_response(res, job, meta, r.include_usage, tok);

  std::vector<ChoiceResult> results(job->num_choices());
  while (!job->done())
    for (ChoiceDelta& d : job->next(kPollInterval)) {
      ChoiceResult& c = results[d.index];
      c.text += d.text;
      c.logprobs.insert(c.logprobs.end(), d.logprobs.begin(), d.logprobs.end());
      if (d.finish_reason) c.finish_reason = *d.finish_reason;
    }
  send_json(res, 200, response_json(meta, tok, results, job->usage()));
}

}  // namespace kvik::server
