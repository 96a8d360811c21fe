#include "server/http_server.h"

#include <sys/resource.h>
#include <sys/socket.h>

#include <fmt/format.h>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <optional>

#include "core/error.h"
#include "core/log.h"
#include "server/http_session.h"

namespace kvik::server {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using error_code = boost::system::error_code;

namespace {

constexpr int64_t kReservedFds = 128;  // model files, logs, the engine's own

// Raises the open-file limit to its hard maximum and returns it: every connection is one descriptor.
int64_t raise_fd_limit() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return 1024;
  if (rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
    getrlimit(RLIMIT_NOFILE, &rl);
  }
  return rl.rlim_cur == RLIM_INFINITY ? (1 << 20) : static_cast<int64_t>(rl.rlim_cur);
}

std::unique_ptr<asio::ssl::context> make_tls(const ServerConfig& c) {
  if (c.ssl_keyfile.empty() != c.ssl_certfile.empty())
    fail("--ssl-keyfile and --ssl-certfile go together: give both for HTTPS, or neither");
  if (c.ssl_keyfile.empty()) return nullptr;
  auto ctx = std::make_unique<asio::ssl::context>(asio::ssl::context::tls_server);
  ctx->set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                   asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 | asio::ssl::context::no_tlsv1_1);
  error_code ec;
  ctx->use_certificate_chain_file(c.ssl_certfile, ec);
  if (ec) fail("--ssl-certfile {}: {} (a PEM certificate chain is expected)", c.ssl_certfile, ec.message());
  ctx->use_private_key_file(c.ssl_keyfile, asio::ssl::context::pem, ec);
  if (ec)
    fail("--ssl-keyfile {}: {} (a PEM private key matching the certificate is expected)", c.ssl_keyfile, ec.message());
  return ctx;
}

}  // namespace

struct HttpServer::Impl {
  asio::io_context ioc;
  tcp::acceptor acceptor{ioc};
  asio::steady_timer retry{ioc};
  std::unique_ptr<asio::ssl::context> tls;
  int64_t hard_limit = 0;  // connections beyond this are closed without an answer (descriptors run out)
};

HttpServer::HttpServer(ServerConfig config)
    : config_(std::move(config)), router_(config_), impl_(std::make_unique<Impl>()) {
  impl_->tls = make_tls(config_);
  const int64_t fds = raise_fd_limit() - kReservedFds;
  // Room for the 503 answers beyond --max-connections, within the descriptors there are.
  if (config_.max_connections > fds - 64) {
    log_warn("--max-connections {} lowered to {}: the open-file limit (ulimit -n) is {}", config_.max_connections,
             std::max<int64_t>(1, fds - 64), fds + kReservedFds);
    config_.max_connections = std::max<int64_t>(1, fds - 64);
  }
  impl_->hard_limit = std::max<int64_t>(config_.max_connections, fds);
}

HttpServer::~HttpServer() = default;

int HttpServer::bind() {
  error_code ec;
  tcp::endpoint ep;
  if (const auto address = asio::ip::make_address(config_.host, ec); !ec) {
    ep = tcp::endpoint(address, static_cast<unsigned short>(config_.port));
  } else {  // a host name such as localhost
    tcp::resolver resolver(impl_->ioc);
    const auto found = resolver.resolve(config_.host, std::to_string(config_.port), tcp::resolver::passive, ec);
    if (ec || found.empty())
      fail("--host {}: not an address or a name of this machine ({})", config_.host, ec.message());
    ep = found.begin()->endpoint();
  }
  auto& a = impl_->acceptor;
  a.open(ep.protocol(), ec);
  if (!ec) a.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) a.bind(ep, ec);
  if (!ec) a.listen(SOMAXCONN, ec);  // the kernel caps it at net.core.somaxconn
  if (ec)
    fail("cannot listen on {}:{} ({}: in use, or not an address of this machine): choose another --host/--port",
         config_.host, config_.port, ec.message());
  return config_.port = a.local_endpoint().port();
}

void HttpServer::accept() {
  impl_->acceptor.async_accept(asio::make_strand(impl_->ioc), [this](error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !impl_->acceptor.is_open()) return;
    if (!ec) {
      const int64_t open = num_connections_;
      if (open >= impl_->hard_limit) {
        socket.close(ec);
      } else {
        start_session(*this, std::move(socket), impl_->tls.get(), open >= config_.max_connections);
      }
    } else {
      // Out of descriptors (or a transient error): connections wait in the backlog; try again shortly.
      if (ec == asio::error::no_descriptors) log_warn("accept: {} (ulimit -n)", ec.message());
      impl_->retry.expires_after(std::chrono::milliseconds(50));
      impl_->retry.async_wait([this](error_code e) {
        if (!e) accept();
      });
      return;
    }
    accept();
  });
}

void HttpServer::listen() {
  accept();
  const int n = std::max(1, config_.num_http_threads);
  std::vector<std::thread> threads;
  for (int i = 1; i < n; ++i) threads.emplace_back([this] { impl_->ioc.run(); });
  impl_->ioc.run();
  for (auto& t : threads) t.join();
}

void HttpServer::drain() {
  if (stopping_.exchange(true)) return;
  notify_sessions(false);
}

void HttpServer::stop() {
  drain();
  if (closed_.exchange(true)) return;
  asio::post(impl_->ioc, [this] {
    error_code ec;
    impl_->acceptor.close(ec);
  });
}

void HttpServer::close_all() { notify_sessions(true); }

void HttpServer::notify_sessions(bool force) {
  std::vector<std::shared_ptr<SessionBase>> live;
  {
    std::lock_guard<std::mutex> lock(sessions_mu_);
    for (auto& [id, weak] : sessions_)
      if (auto s = weak.lock()) live.push_back(std::move(s));
  }
  for (auto& s : live) s->on_server_stop(force);
  live.clear();  // outside the lock: a session's destructor unregisters itself
}

uint64_t HttpServer::add_session(std::weak_ptr<SessionBase> s) {
  ++num_connections_;
  std::lock_guard<std::mutex> lock(sessions_mu_);
  sessions_.emplace(++next_session_id_, std::move(s));
  return next_session_id_;
}

void HttpServer::remove_session(uint64_t id) {
  --num_connections_;
  std::lock_guard<std::mutex> lock(sessions_mu_);
  sessions_.erase(id);
}

}  // namespace kvik::server
