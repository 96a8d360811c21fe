// The HTTP edge: routes (/v1/models, /v1/completions, /v1/chat/completions, /health, /metrics, /tokenize,
// /detokenize), API-key auth, admission control (--max-waiting → 429), 503 until the model is loaded, and
// one error boundary that turns every failure into OpenAI's error shape.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "engine/async_engine.h"
#include "server/interventions.h"
#include "server/metrics.h"
#include "tokenizer/tokenizer.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace kvik::server {

struct ServerConfig {
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string served_model_name;
  std::string api_key;         // "" = no auth
  int64_t max_waiting = 1024;  // 429 beyond this many waiting requests
  size_t max_body_bytes = 8u << 20;
  int num_http_threads = 256;  // each streaming client holds one
};

// What the routes need once the model is loaded; all owned elsewhere and alive until stop() returns.
struct ModelContext {
  const Tokenizer* tokenizer = nullptr;
  AsyncEngine* engine = nullptr;
  ServerMetrics* metrics = nullptr;
  int64_t max_model_len = 0;
  const DirectionRegistry* directions = nullptr;  // --direction name=FILE, for "interventions"
};

class HttpServer {
 public:
  explicit HttpServer(ServerConfig config);
  ~HttpServer();

  // Binds the listening socket (throws kvik::Error naming host:port on failure); returns the port.
  int bind();
  // Serves until stop(); call bind() first. Returns when the listener is closed and handlers have finished.
  void listen();
  // Stops accepting; in-flight handlers finish (listen() returns when they have).
  void stop();
  // Marks the model loaded: from now on requests are served instead of 503.
  void set_ready(const ModelContext& ctx);

 private:
  void routes();
  bool authorized(const httplib::Request& req, httplib::Response& res) const;
  bool ready(httplib::Response& res) const;
  void handle_generate(const httplib::Request& req, httplib::Response& res, bool chat);
  void handle_tokenize(const httplib::Request& req, httplib::Response& res);
  void handle_detokenize(const httplib::Request& req, httplib::Response& res);

  ServerConfig config_;
  std::unique_ptr<httplib::Server> svr_;
  ModelContext ctx_;
  std::atomic<bool> ready_{false};
  std::mutex admission_mu_;  // check-then-add of the waiting limit
};

}  // namespace kvik::server
