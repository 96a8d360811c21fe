#include "server/dp_upstream.h"

#include <sys/socket.h>
#include <sys/time.h>

#include <fmt/format.h>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <limits>
#include <stdexcept>
#include <system_error>
#include <thread>

#include "core/error.h"
#include "server/api_error.h"
#include "server/openai_responses.h"

namespace kvik::server {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;

namespace {

// Sends `req` to the replica on `port` (its body, content type and Authorization unchanged).
void write_request(tcp::socket& s, int port, const HttpRequest& req) {
  http::request<http::string_body> r{http::string_to_verb(req.method), req.target, 11};
  r.set(http::field::host, fmt::format("127.0.0.1:{}", port));
  if (!req.authorization.empty()) r.set(http::field::authorization, req.authorization);
  if (!req.body.empty()) r.set(http::field::content_type, "application/json");
  r.keep_alive(false);
  r.body() = req.body;
  r.prepare_payload();
  http::write(s, r);
}

void set_timeout(tcp::socket& s, double seconds) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(seconds);
  tv.tv_usec = static_cast<suseconds_t>((seconds - static_cast<double>(tv.tv_sec)) * 1e6);
  ::setsockopt(s.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(s.native_handle(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

}  // namespace

UpstreamReply upstream_get(int port, const std::string& target, const std::string& authorization, double timeout_s) {
  try {
    asio::io_context ioc;
    tcp::socket s(ioc);
    s.open(tcp::v4());
    set_timeout(s, timeout_s);
    HttpRequest req;
    req.method = "GET";
    req.target = target;
    req.authorization = authorization;
    s.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)));
    write_request(s, port, req);
    beast::flat_buffer buf;
    http::response_parser<http::string_body> p;
    // Not boost::none: Boost 1.74 compares a Content-Length against an empty limit as "greater".
    p.body_limit(std::numeric_limits<std::uint64_t>::max());
    http::read(s, buf, p);
    const auto& res = p.get();
    return {static_cast<int>(res.result_int()), std::string(res[http::field::content_type]), res.body()};
  } catch (const std::exception& e) {
    fail("GET 127.0.0.1:{}{}: {}", port, target, e.what());
  }
}

ProxyBody::ProxyBody(ProxyTarget target, std::function<void()> wake, ProxyHooks hooks)
    : wake_(std::move(wake)), hooks_(std::move(hooks)), target_(std::move(target)) {}

void ProxyBody::start(HttpRequest req) {
  try {
    std::thread([self = shared_from_this(), req = std::move(req)] { self->run(req); }).detach();
  } catch (const std::system_error& e) {  // out of threads: the request fails, its accounting still ends
    end_with_error(fmt::format("{} was not reached: no thread to proxy the request ({})", target_.name, e.what()));
    finish(false);
  }
}

template <class Socket>
bool ProxyBody::connect(Socket& s) {
  for (;;) {
    boost::system::error_code ec;
    if (s.is_open()) s.close(ec);
    s.open(tcp::v4(), ec);
    s.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(target_.port)), ec);
    if (!ec) break;
    if (ec != asio::error::connection_refused) throw boost::system::system_error(ec);
    std::optional<ProxyTarget> next = hooks_.retarget(target_.replica);
    if (!next) return false;
    std::lock_guard<std::mutex> lock(mu_);
    target_ = std::move(*next);
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (aborted_) throw std::runtime_error("aborted");  // the client left while we connected: close at once
  fd_ = s.native_handle();
  return true;
}

void ProxyBody::run(const HttpRequest& req) {
  asio::io_context ioc;
  tcp::socket s(ioc);
  try {
    if (!connect(s)) {
      end_with_error(fmt::format("{} refused the connection and no other replica is up", target_.name));
      return finish(false);
    }
    write_request(s, target_.port, req);
    beast::flat_buffer buf;
    http::response_parser<http::string_body> p;
    // Not boost::none: Boost 1.74 compares a Content-Length against an empty limit as "greater".
    p.body_limit(std::numeric_limits<std::uint64_t>::max());
    p.skip(req.method == "HEAD");  // a HEAD reply's Content-Length announces a body that does not follow
    http::read_header(s, buf, p);
    {
      std::lock_guard<std::mutex> lock(mu_);
      const auto& res = p.get();
      status_ = static_cast<int>(res.result_int());
      content_type_ = std::string(res[http::field::content_type]);
      retry_after_ = std::string(res[http::field::retry_after]);
      streaming_ = p.chunked() && content_type_.rfind("text/event-stream", 0) == 0;
      head_ = true;
    }
    wake_();
    while (!p.is_done()) {
      http::read_some(s, buf, p);
      bool streaming = false;
      {
        std::lock_guard<std::mutex> lock(mu_);
        pending_ += p.get().body();  // the string body appends: take what came, leave it empty for the next read
        p.get().body().clear();
        streaming = streaming_;
      }
      if (streaming) wake_();
    }
  } catch (const std::exception& e) {
    std::unique_lock<std::mutex> lock(mu_);
    fd_ = -1;
    const bool aborted = aborted_;
    lock.unlock();
    if (!aborted) end_with_error(fmt::format("{} did not complete the request ({})", target_.name, e.what()));
    return finish(false);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    fd_ = -1;
    complete_ = true;
  }
  wake_();
  finish(true);
}

void ProxyBody::end_with_error(const std::string& what) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    const ApiError e{502, what + ": retry it, another replica serves it", "", "BadGatewayError"};
    if (streaming_) {
      pending_ += "data: " + dump(e.to_json()) + "\n\n";
    } else {
      status_ = 502;
      content_type_ = "application/json";
      pending_ = dump(e.to_json());
    }
    head_ = true;
    complete_ = true;
  }
  wake_();
}

void ProxyBody::finish(bool ok) {
  if (auto f = std::move(hooks_.done)) f(target_.replica, ok);
}

bool ProxyBody::drain(std::string& out) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!head_) return false;
  if (!streaming_ && !complete_) return false;  // a whole body goes out at once, with its status
  out += pending_;
  pending_.clear();
  return complete_;
}

void ProxyBody::abort() {
  std::lock_guard<std::mutex> lock(mu_);
  aborted_ = true;
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

bool ProxyBody::streaming() const {
  std::lock_guard<std::mutex> lock(mu_);
  return streaming_;
}

int ProxyBody::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return status_;
}

std::string ProxyBody::content_type() const {
  std::lock_guard<std::mutex> lock(mu_);
  return content_type_;
}

std::vector<std::pair<std::string, std::string>> ProxyBody::headers() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::pair<std::string, std::string>> h = {{"X-Kvik-Replica", std::to_string(target_.replica)}};
  if (!retry_after_.empty()) h.emplace_back("Retry-After", retry_after_);
  return h;
}

}  // namespace kvik::server
