// One client connection of the HttpServer (see http_server.h). Plain TCP or TLS; every handler of one
// connection runs on its own strand, so a session needs no lock.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <memory>

namespace kvik::server {

class HttpServer;

class SessionBase : public std::enable_shared_from_this<SessionBase> {
 public:
  virtual ~SessionBase() = default;
  // Posted by the server on shutdown: close when idle, or after the current response; `force`: now.
  virtual void on_server_stop(bool force) = 0;
};

// Starts serving an accepted socket (whose executor is a strand). `over_limit`: answer its request with 503.
void start_session(HttpServer& server, boost::asio::ip::tcp::socket socket, boost::asio::ssl::context* tls,
                   bool over_limit);

}  // namespace kvik::server
