// Data parallelism's link to one replica (kvik serve --data-parallel-size): plain HTTP/1.1 over the loopback,
// blocking, one connection per request. A proxied request holds one thread that reads the replica's reply as it
// comes and hands it to the client's session unchanged (SSE chunks as they arrive) — the role of SGLang's router
// and llm-d's gateway in front of their engine processes.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "server/response_stream.h"
#include "server/routes.h"

namespace kvik::server {

struct UpstreamReply {
  int status = 0;
  std::string content_type;
  std::string body;
};

// GET `target` from 127.0.0.1:`port` within `timeout_s` (connect, send and read); throws kvik::Error naming what
// failed.
UpstreamReply upstream_get(int port, const std::string& target, const std::string& authorization, double timeout_s);

// A request forwarded to a replica, its reply streamed back. start() runs the exchange on a thread of its own; the
// session drains the body whenever `wake` fires. A replica that refuses or drops the connection ends the reply with
// an OpenAI-style error naming it: 502 before its head arrived, an SSE error event after a stream began (the
// openai clients raise it).
class ProxyBody : public ReplyBody, public std::enable_shared_from_this<ProxyBody> {
 public:
  // `on_done(ok)` runs once on the proxy's thread when the exchange ends; ok = the replica answered in full.
  ProxyBody(std::string replica_name, std::function<void()> wake, std::function<void(bool ok)> on_done);

  void start(int port, HttpRequest req);

  bool drain(std::string& out) override;
  void abort() override;  // the client is gone: the connection to the replica is shut, which aborts the request there
  bool streaming() const override;
  int status() const override;
  std::string content_type() const override;

 private:
  void run(int port, const HttpRequest& req);
  // Ends the body with the error `what` (502 before the head, an SSE error event after).
  void end_with_error(const std::string& what);
  void finish(bool ok);

  std::string replica_name_;
  std::function<void()> wake_;
  std::function<void(bool)> on_done_;
  mutable std::mutex mu_;
  bool head_ = false;  // the replica's status line and headers are in
  bool streaming_ = false;
  int status_ = 0;
  std::string content_type_;
  std::string pending_;  // body bytes not drained yet
  bool complete_ = false;
  bool aborted_ = false;
  int fd_ = -1;  // the connection to the replica while it is open (abort() shuts it)
};

}  // namespace kvik::server
