// The HTTP/1.1 edge, event-driven (Boost.Asio + Boost.Beast): a fixed, small pool of I/O threads serves
// every connection, however many there are. The listener's backlog is the system's maximum; each
// connection reads its request under header/body deadlines, answers through the Router, and streams a
// generation as the engine produces it, with a bounded output buffer (a client that stops reading has its
// request aborted). Connections beyond --max-connections get 503. Optional TLS (OpenSSL).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "server/routes.h"

namespace kvik::server {

class SessionBase;

class HttpServer {
 public:
  explicit HttpServer(ServerConfig config);
  ~HttpServer();

  // Binds the listening socket (throws kvik::Error naming host:port on failure); returns the port.
  int bind();
  // Serves until stop(); call bind() first. Returns when the listener is closed and every connection is done.
  void listen();
  // Starts the drain before a shutdown: every new request (on a new or a kept-alive connection, /health too) gets
  // 503 "the server is draining" and its connection is closed; idle connections close; in-flight requests go on.
  // The listener stays open, so a client sees 503 rather than a refused connection until stop().
  void drain();
  // Drains (when drain() was not called) and stops accepting; listen() returns when the in-flight requests are done.
  void stop();
  // Closes every connection now (after the shutdown grace period).
  void close_all();
  // Marks the model loaded: from now on requests are served instead of 503.
  void set_ready(const ModelContext& ctx) { router_.set_ready(ctx); }

  // For sessions.
  const ServerConfig& config() const { return config_; }
  Router& router() { return router_; }
  bool stopping() const { return stopping_; }
  uint64_t add_session(std::weak_ptr<SessionBase> s);
  void remove_session(uint64_t id);
  int64_t num_connections() const { return num_connections_; }

 private:
  struct Impl;
  void accept();
  void notify_sessions(bool force);

  ServerConfig config_;
  Router router_;
  std::unique_ptr<Impl> impl_;
  std::atomic<bool> stopping_{false};  // draining: new requests get 503
  std::atomic<bool> closed_{false};    // the listener is closed
  std::atomic<int64_t> num_connections_{0};
  std::mutex sessions_mu_;
  uint64_t next_session_id_ = 0;
  std::unordered_map<uint64_t, std::weak_ptr<SessionBase>> sessions_;
};

}  // namespace kvik::server
