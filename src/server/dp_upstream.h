// Data parallelism's link to one replica (kvik serve --data-parallel-size): plain HTTP/1.1 over the loopback,
// blocking, one connection per request. A proxied request holds one thread that reads the replica's reply as it
// comes and hands it to the client's session unchanged (SSE chunks as they arrive) — the role of SGLang's router
// and llm-d's gateway in front of their engine processes.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

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

struct ProxyTarget {
  size_t replica = 0;
  int port = 0;
  std::string name;  // "data-parallel replica 1 (pid 4242, port 39123)", for errors
};

struct ProxyHooks {
  // The replica refused the connection (its process has ended; nothing was sent): the replica to try next, its
  // accounting moved there, or nullopt when none is left.
  std::function<std::optional<ProxyTarget>(size_t refused)> retarget;
  // Once, on the proxy's thread, when the exchange ends: the replica that had it; ok = it answered in full.
  std::function<void(size_t replica, bool ok)> done;
};

// A request forwarded to a replica, its reply streamed back. start() runs the exchange on a thread of its own; the
// session drains the body whenever `wake` fires. A refused connection moves the request to another replica
// (ProxyHooks::retarget); a replica that drops the connection, or no replica left, ends the reply with an
// OpenAI-style error naming it: 502 before its head arrived, an SSE error event after a stream began (the openai
// clients raise it). The reply carries X-Kvik-Replica (the replica that served it) and the replica's Retry-After.
class ProxyBody : public ReplyBody, public std::enable_shared_from_this<ProxyBody> {
 public:
  ProxyBody(ProxyTarget target, std::function<void()> wake, ProxyHooks hooks);

  void start(HttpRequest req);

  bool drain(std::string& out) override;
  void abort() override;  // the client is gone: the connection to the replica is shut, which aborts the request there
  bool streaming() const override;
  int status() const override;
  std::string content_type() const override;
  std::vector<std::pair<std::string, std::string>> headers() const override;

 private:
  void run(const HttpRequest& req);
  // Connects `s` to the target, moving to the next replica while one refuses; false when none is left.
  template <class Socket>
  bool connect(Socket& s);
  // Ends the body with the error `what` (502 before the head, an SSE error event after).
  void end_with_error(const std::string& what);
  void finish(bool ok);

  std::function<void()> wake_;
  ProxyHooks hooks_;
  mutable std::mutex mu_;
  ProxyTarget target_;  // changes only before the head arrives (a refused connection)
  bool head_ = false;   // the replica's status line and headers are in
  bool streaming_ = false;
  int status_ = 0;
  std::string content_type_;
  std::string retry_after_;
  std::string pending_;  // body bytes not drained yet
  bool complete_ = false;
  bool aborted_ = false;
  int fd_ = -1;  // the connection to the replica while it is open (abort() shuts it)
};

}  // namespace kvik::server
