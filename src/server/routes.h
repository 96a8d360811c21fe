// The OpenAI API behind the HTTP transport: one table of routes (method, path, handler, whether the API key is
// needed and whether the model must be loaded), API-key auth, CORS, admission (--max-waiting → 429), 503 until
// the model is loaded, and the one place where an ApiError becomes a response. Transport-free: a parsed request in,
// a reply (a whole body, or a ReplyBody the session drains) out.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "chat/tool_parsers.h"
#include "engine/async_engine.h"
#include "server/api_error.h"
#include "server/interventions.h"
#include "server/lora_registry.h"
#include "server/metrics.h"
#include "server/openai_schema.h"
#include "server/response_store.h"
#include "server/response_stream.h"
#include "tokenizer/tokenizer.h"

namespace kvik::server {

struct ServerConfig {
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string served_model_name;
  std::string api_key;         // "" = no auth
  int64_t max_waiting = 1024;  // 429 beyond this many waiting requests
  size_t max_body_bytes = 8u << 20;
  int num_http_threads = 2;                          // I/O threads, independent of the number of clients
  int64_t max_connections = 16384;                   // 503 beyond (lowered to fit the open-file limit)
  double header_timeout_s = 10;                      // whole request line + headers (slow-loris)
  double body_timeout_s = 60;                        // whole body once the headers are in
  double keep_alive_timeout_s = 5;                   // idle time between requests on one connection
  double write_timeout_s = 30;                       // one write to a client that does not read
  size_t max_stream_buffer = 1u << 20;               // bytes queued for one slow client before its request is aborted
  std::vector<std::string> allowed_origins = {"*"};  // CORS; empty = no CORS headers
  std::string ssl_keyfile, ssl_certfile;             // both set = HTTPS
  bool log_requests = true;                          // one access-log line per request
  int32_t max_logprobs = 20;
  nlohmann::json generation_defaults = nlohmann::json::object();  // generation_config.json, as request fields
  std::string tool_call_parser;          // --tool-call-parser (vLLM's names); "" = from the chat template
  bool enable_auto_tool_choice = false;  // --enable-auto-tool-choice: tool_choice "auto" parses calls
  std::string reasoning_parser;          // --reasoning-parser qwen3|deepseek_r1; "" = none
  // --chat-template-content-format: nullopt = auto (detected from the template, as vLLM does).
  std::optional<ContentFormat> chat_template_content_format;
  ResponseStoreLimits response_store;  // /v1/responses kept for previous_response_id and GET
};

// What the routes need once the model is loaded; all owned elsewhere and alive until the server stops.
struct ModelContext {
  const Tokenizer* tokenizer = nullptr;
  AsyncEngine* engine = nullptr;
  ServerMetrics* metrics = nullptr;
  int64_t max_model_len = 0;
  const DirectionRegistry* directions = nullptr;  // --direction name=FILE, for "interventions"
  LoraRegistry* loras = nullptr;                  // --enable-lora: adapters by name; null = LoRA off
};

struct HttpRequest {
  std::string method;
  std::string target;  // path and query
  std::string body;
  std::string authorization;  // the Authorization header
  std::string origin;
  std::string access_control_request_headers;
};

struct HttpReply {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  std::shared_ptr<ReplyBody> stream;  // set: the body comes later (the engine's output), drained on each wake-up
};

// A request body as a JSON object (nesting bounded before parsing), or the 400 saying what is wrong with it. The
// ordered form keeps the client's key order (what a chat template may show).
std::variant<nlohmann::json, ApiError> parse_json_object(const std::string& text);
std::variant<nlohmann::ordered_json, ApiError> parse_ordered_json_object(const std::string& text);

// Data parallelism's router (server/dp_router.h) hashes the prompt a replica will see: the first prompt's token ids
// exactly as generate() makes them (chat template, tools, BOS), or nullopt when the request is malformed (the
// replica answers its 400), batched, or under a LoRA adapter or an intervention (their KV hashes carry keys only
// the replica knows).
std::optional<std::vector<int32_t>> routing_prompt_ids(const Tokenizer& tok, const ServerConfig& config, bool chat,
                                                       const std::string& body_text);

class Router {
 public:
  explicit Router(const ServerConfig& config)
      : config_(config), responses_(std::make_shared<ResponseStore>(config.response_store)) {}
  void set_ready(const ModelContext& ctx);
  // kvik serve --data-parallel-size: every request but a CORS preflight goes to `handler` (the front process has
  // no engine); CORS headers are still added here. Set before the server listens.
  using Handler = std::function<HttpReply(const HttpRequest&, std::function<void()>)>;
  void set_handler(Handler handler) { handler_ = std::move(handler); }
  bool ready() const { return ready_; }

  // `on_engine_output` is called on the engine thread whenever a generation started here has new output.
  HttpReply handle(const HttpRequest& req, std::function<void()> on_engine_output);
  // Every error response is made here: OpenAI's error body, Retry-After on 429 and 503.
  static HttpReply error(const ApiError& e);

 private:
  // One route: its method ("GET" also answers HEAD), its path ("{}" matches one path segment, handed to the
  // handler as `arg`), whether it needs the API key and the loaded model, and its handler.
  struct RouteCall {
    const HttpRequest& req;
    std::string arg;
    std::function<void()> on_engine_output;
  };
  struct Route {
    const char* method;
    const char* path;
    bool needs_key;
    bool needs_model;
    HttpReply (*handler)(Router&, RouteCall&);
  };
  static const std::vector<Route>& routes();

  HttpReply route(const HttpRequest& req, std::function<void()>& on_engine_output);
  void add_cors(const HttpRequest& req, HttpReply& reply) const;
  bool authorized(const HttpRequest& req, HttpReply& reply) const;
  bool is_ready(HttpReply& reply) const;
  HttpReply health() const;
  HttpReply metrics_text() const;
  HttpReply models() const;
  HttpReply generate(const HttpRequest& req, bool chat, std::function<void()> on_engine_output);
  HttpReply tokenize(const HttpRequest& req);
  HttpReply detokenize(const HttpRequest& req);
  // The web pages (GET /, /dashboard, /trace and their /web/ files; no key needed: they hold no data) and the
  // engine endpoints they read (engine_routes.cpp).
  HttpReply web_page(const std::string& path) const;
  HttpReply engine_state();
  // GET /v1/engine/prefix_summary: what data parallelism's router polls (engine_routes.h).
  HttpReply prefix_summary();
  HttpReply engine_trace(const HttpRequest& req, std::function<void()> on_engine_output);
  // POST /v1/load_lora_adapter {"lora_name", "lora_path"} and /v1/unload_lora_adapter {"lora_name"}.
  HttpReply lora_admin(const HttpRequest& req, bool load);
  // POST /v1/responses, GET and DELETE /v1/responses/{id} (responses_routes.cpp).
  HttpReply create_response(const HttpRequest& req, std::function<void()> on_engine_output);
  HttpReply get_response(const HttpRequest& req, const std::string& id);
  HttpReply delete_response(const HttpRequest& req, const std::string& id);

  // A parsed generation request made ready for the engine: the adapter its model names, logprobs within
  // --max-logprobs, the tool grammar, its prompts' token ids (the chat template for a chat request) within
  // max_model_len, its interventions; `output` says how a chat choice's text is parsed. `prompt_field` names the
  // prompt in errors.
  std::optional<ApiError> prepare(GenerateRequest& r, const std::string& prompt_field,
                                  std::vector<std::vector<int32_t>>& prompts, ChatOutputOptions& output) const;
  // Queues the job in the engine unless --max-waiting requests already wait (429) or the engine refuses it.
  std::optional<ApiError> admit(GenerationJob& job);
  // Tools of a chat request: the grammar when tool_choice asks for one.
  std::optional<ApiError> apply_tools(const ChatRequest& r, SamplingParams& params) const;
  // The key the request presented ("" without --api-key): responses are stored per key.
  std::string api_key_of(const HttpRequest& req) const;

  const ServerConfig& config_;
  Handler handler_;
  ModelContext ctx_;
  ToolCallFormat tool_format_ = ToolCallFormat::kHermes;  // --tool-call-parser, else the template's, else hermes
  ChatTemplateStyle template_style_;                      // what the model's template expects of the messages
  std::shared_ptr<ResponseStore> responses_;              // shared with the streams that store what they finish
  std::atomic<bool> ready_{false};
  std::mutex admission_mu_;  // check-then-add of the waiting limit
  std::mutex state_json_mu_;
  uint64_t state_json_sequence_ = 0;  // the snapshot state_json_ was written from
  std::string state_json_;
};

}  // namespace kvik::server
