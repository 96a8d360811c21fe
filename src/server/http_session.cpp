#include "server/http_session.h"

#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <fmt/format.h>
#include <atomic>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>
#include <chrono>
#include <optional>

#include "core/log.h"
#include "server/http_server.h"

namespace kvik::server {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;
using error_code = boost::system::error_code;

namespace {

constexpr size_t kHeaderLimit = 64 << 10;
constexpr auto kTick = std::chrono::seconds(1);  // how often a generating session checks that its client is there

std::chrono::steady_clock::duration seconds(double s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(s));
}

std::string status_line(int status) {
  return fmt::format("HTTP/1.1 {} {}\r\n", status,
                     std::string(http::obsolete_reason(static_cast<http::status>(status))));
}

// The status line and headers of a reply; `length` < 0 means a chunked body.
std::string head_of(const HttpReply& r, int64_t length, bool keep_alive, double keep_alive_s) {
  std::string h = status_line(r.status);
  if (!r.content_type.empty()) h += "Content-Type: " + r.content_type + "\r\n";
  for (const auto& [name, value] : r.headers) h += name + ": " + value + "\r\n";
  if (length >= 0)
    h += fmt::format("Content-Length: {}\r\n", length);
  else
    h += "Transfer-Encoding: chunked\r\n";
  if (keep_alive)
    h += fmt::format("Connection: keep-alive\r\nKeep-Alive: timeout={}\r\n", static_cast<int>(keep_alive_s));
  else
    h += "Connection: close\r\n";
  return h + "\r\n";
}

void append_chunk(std::string& out, const std::string& data) {
  if (data.empty()) return;
  out += fmt::format("{:x}\r\n", data.size());
  out += data;
  out += "\r\n";
}

template <class Stream>
tcp::socket& socket_of(Stream& s) {
  return beast::get_lowest_layer(s).socket();
}

// Bytes the kernel holds for the peer, not yet acknowledged: what a client that stops reading leaves behind.
size_t kernel_unsent(tcp::socket& s) {
  int n = 0;
  return ::ioctl(s.native_handle(), SIOCOUTQ, &n) == 0 && n > 0 ? static_cast<size_t>(n) : 0;
}

}  // namespace

template <class Stream>
class Session : public SessionBase {
 public:
  Session(HttpServer& server, Stream stream, bool over_limit)
      : server_(server),
        cfg_(server.config()),
        stream_(std::move(stream)),
        over_limit_(over_limit),
        deadline_(stream_.get_executor()),
        tick_(stream_.get_executor()) {
    error_code ec;
    const auto ep = socket_of(stream_).remote_endpoint(ec);
    peer_ = ec ? "?" : fmt::format("{}:{}", ep.address().to_string(), ep.port());
  }

  ~Session() override {
    if (response_) response_->abort();
    server_.remove_session(id_);
  }

  void start() {
    id_ = server_.add_session(weak_from_this());
    if constexpr (std::is_same_v<Stream, beast::tcp_stream>) {
      read_request();
    } else {
      arm_deadline(cfg_.header_timeout_s);
      stream_.async_handshake(asio::ssl::stream_base::server, [self = self()](error_code ec) {
        self->disarm();
        if (ec) return self->close();
        self->read_request();
      });
    }
  }

  void on_server_stop(bool force) override {
    asio::post(stream_.get_executor(), [self = self(), force] {
      self->stop_requested_ = true;
      if (force || self->idle_) self->close();
    });
  }

 private:
  std::shared_ptr<Session> self() { return std::static_pointer_cast<Session>(shared_from_this()); }

  // A deadline for the read in flight: when it passes, the read is cancelled and `timed_out_` set.
  void arm_deadline(double s) {
    timed_out_ = false;
    deadline_.expires_after(seconds(s));
    deadline_.async_wait([self = self(), gen = ++deadline_gen_](error_code ec) {
      if (ec || gen != self->deadline_gen_) return;
      self->timed_out_ = true;
      beast::get_lowest_layer(self->stream_).cancel();
    });
  }
  void disarm() {
    ++deadline_gen_;
    deadline_.cancel();
  }

  void read_request() {
    if (stop_requested_ || closed_) return close();
    idle_ = true;
    parser_.emplace();
    parser_->header_limit(kHeaderLimit);
    parser_->body_limit(cfg_.max_body_bytes);
    arm_deadline(first_request_ ? cfg_.header_timeout_s : cfg_.keep_alive_timeout_s);
    beast::get_lowest_layer(stream_).expires_never();
    http::async_read_header(stream_, buffer_, *parser_,
                            [self = self()](error_code ec, size_t) { self->on_header(ec); });
  }

  void on_header(error_code ec) {
    disarm();
    idle_ = false;
    const bool started = parser_->got_some() || buffer_.size() > 0;
    if (ec == http::error::body_limit) return reject(413, "the request body is too large (at most {} bytes)");
    if (ec == http::error::header_limit) return reject(431, "the request headers are too large");
    if (timed_out_) return started ? reject(408, "the request headers did not arrive within {} s") : close();
    if (ec == http::error::end_of_stream || ec == asio::error::eof || ec == asio::error::operation_aborted ||
        ec == asio::error::connection_reset || !started)
      return close();
    if (ec) return reject(400, "malformed HTTP request: " + ec.message());
    first_request_ = false;
    received_ = std::chrono::steady_clock::now();
    const auto& req = parser_->get();
    if (beast::iequals(req[http::field::expect], "100-continue")) {
      out_ = "HTTP/1.1 100 Continue\r\n\r\n";
      return write_out([self = self()] { self->read_body(); });
    }
    read_body();
  }

  void read_body() {
    if (parser_->is_done()) return on_body({});
    arm_deadline(cfg_.body_timeout_s);
    http::async_read(stream_, buffer_, *parser_, [self = self()](error_code ec, size_t) {
      self->disarm();
      self->on_body(ec);
    });
  }

  void on_body(error_code ec) {
    if (ec == http::error::body_limit) return reject(413, "the request body is too large (at most {} bytes)");
    if (timed_out_) return reject(408, "the request body did not arrive within {} s");
    if (ec) return close();
    dispatch();
  }

  // An error found while reading: answered, then the connection is closed (the rest of the request is unread).
  void reject(int status, const std::string& what) {
    double limit = status == 408 ? (parser_->is_header_done() ? cfg_.body_timeout_s : cfg_.header_timeout_s) : 0;
    std::string message = status == 413   ? fmt::format(fmt::runtime(what), cfg_.max_body_bytes)
                          : status == 408 ? fmt::format(fmt::runtime(what), limit)
                                          : what;
    keep_alive_ = false;
    method_ = "-";
    target_ = "-";
    send(Router::error({status, message, "", ""}));
  }

  void dispatch() {
    auto& req = parser_->get();
    HttpRequest r;
    r.method = std::string(req.method_string());
    r.target = std::string(req.target());
    r.body = std::move(req.body());
    r.authorization = std::string(req[http::field::authorization]);
    r.origin = std::string(req[http::field::origin]);
    r.access_control_request_headers = std::string(req[http::field::access_control_request_headers]);
    method_ = r.method;
    target_ = r.target;
    head_only_ = r.method == "HEAD";
    keep_alive_ = req.keep_alive() && !server_.stopping() && !over_limit_;
    if (over_limit_)
      return send(Router::error(
          {503, fmt::format("too many open connections (--max-connections {}); retry later", cfg_.max_connections), "",
           ""}));
    if (server_.stopping())
      return send(Router::error(
          {503, "the server is draining: it finishes the requests in flight, then shuts down; new requests are refused",
           "", ""}));
    auto wake = std::make_shared<std::atomic<bool>>(false);
    wake_ = wake;
    std::weak_ptr<SessionBase> weak = weak_from_this();
    HttpReply reply = server_.router().handle(r, [weak, wake] {
      if (wake->exchange(true)) return;  // a pump is already on its way
      if (auto s = weak.lock()) {
        auto* session = static_cast<Session*>(s.get());
        asio::post(session->stream_.get_executor(), [s = std::move(s), session] { session->pump(); });
      }
    });
    if (!reply.stream) return send(std::move(reply));
    response_ = reply.stream;
    reply_ = std::move(reply);
    head_sent_ = false;
    if (response_->streaming()) {
      take_body_head();  // a body that settles its head on another thread may have done so already
      out_ = head_of(reply_, -1, keep_alive_, cfg_.keep_alive_timeout_s);
      head_sent_ = true;
      write_out();
    }
    schedule_tick();
    pump();
  }

  // A whole reply: head and body in one write.
  void send(HttpReply reply) {
    status_ = reply.status;
    out_ = head_of(reply, static_cast<int64_t>(reply.body.size()), keep_alive_, cfg_.keep_alive_timeout_s);
    if (!head_only_) out_ += reply.body;
    response_done_ = true;
    write_out();
  }

  // Takes what the engine produced: SSE chunks are written as they come; a whole response when complete.
  void pump() {
    wake_->store(false);
    if (!response_ || closed_ || response_done_) return;
    std::string text;
    const bool complete = response_->drain(text);
    status_ = reply_.status;
    if (response_->streaming()) {
      if (!head_sent_) {  // a body that knew only later that it streams
        take_body_head();
        out_ += head_of(reply_, -1, keep_alive_, cfg_.keep_alive_timeout_s);
        head_sent_ = true;
      }
      append_chunk(out_, text);
      if (complete) out_ += "0\r\n\r\n";
    } else if (complete) {
      take_body_head();
      out_ = head_of(reply_, static_cast<int64_t>(text.size()), keep_alive_, cfg_.keep_alive_timeout_s);
      if (!head_only_) out_ += text;
    }
    if (complete) response_done_ = true;
    // Unsent = queued here + in the kernel's send queue (which alone can take megabytes before a write blocks).
    const size_t unsent = out_.size() + writing_.size() + (complete ? 0 : kernel_unsent(socket_of(stream_)));
    if (unsent > cfg_.max_stream_buffer) {
      log_warn("{} {}: the client is not reading ({} bytes unsent, --max-stream-buffer {}): request aborted", peer_,
               response_->id(), unsent, cfg_.max_stream_buffer);
      aborted_ = true;
      return close();
    }
    write_out();
  }

  // The status, Content-Type and headers a body settled after the reply was made.
  void take_body_head() {
    if (const int s = response_->status()) status_ = reply_.status = s;
    if (std::string t = response_->content_type(); !t.empty()) reply_.content_type = std::move(t);
    for (auto& h : response_->headers()) reply_.headers.push_back(std::move(h));
  }

  // Writes out_ when no write is in flight; `then` runs once everything queued so far is written.
  void write_out(std::function<void()> then = nullptr) {
    if (then) after_write_ = std::move(then);
    if (writing_active_ || closed_) return;
    if (out_.empty()) return on_all_written();
    writing_.swap(out_);
    out_.clear();
    writing_active_ = true;
    beast::get_lowest_layer(stream_).expires_after(seconds(cfg_.write_timeout_s));
    asio::async_write(stream_, asio::buffer(writing_), [self = self()](error_code ec, size_t) {
      self->writing_active_ = false;
      self->writing_.clear();
      if (ec) {
        self->aborted_ = self->response_ != nullptr;
        return self->close();
      }
      self->write_out();
    });
  }

  void on_all_written() {
    if (after_write_) {
      auto f = std::move(after_write_);
      after_write_ = nullptr;
      return f();
    }
    if (!response_done_) return;  // more engine output to come
    finish_response();
  }

  void finish_response() {
    log_access();
    response_done_ = false;
    response_.reset();
    tick_.cancel();
    if (keep_alive_ && !stop_requested_) return read_request();
    close();
  }

  void log_access() {
    if (!cfg_.log_requests) return;
    const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - received_).count();
    std::string gen;
    if (response_ && !response_->id().empty()) {
      const Usage u = response_->usage();
      gen = fmt::format(" id={} prompt_tokens={} output_tokens={} ttft={:.3f}s", response_->id(), u.prompt_tokens,
                        u.completion_tokens, std::max(0.0, response_->ttft_s()));
      if (aborted_) gen += " aborted";
    }
    log_info("{} \"{} {}\" {}{} total={:.3f}s", peer_, method_, target_, aborted_ ? 499 : status_, gen, total);
  }

  // While a generation runs: a client that hung up (or reset) has its request aborted within a tick.
  void schedule_tick() {
    tick_.expires_after(kTick);
    tick_.async_wait([self = self()](error_code ec) {
      if (ec || !self->response_ || self->closed_) return;
      char c;
      const ssize_t n = ::recv(socket_of(self->stream_).native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        self->aborted_ = true;
        return self->close();
      }
      self->schedule_tick();
    });
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    disarm();
    tick_.cancel();
    if (response_) {
      response_->abort();
      if (aborted_ || !response_done_) {
        aborted_ = true;
        log_access();
      }
      response_.reset();
    }
    error_code ec;
    socket_of(stream_).shutdown(tcp::socket::shutdown_both, ec);
    socket_of(stream_).close(ec);
  }

  HttpServer& server_;
  const ServerConfig& cfg_;
  Stream stream_;
  bool over_limit_;
  uint64_t id_ = 0;
  std::string peer_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  asio::steady_timer deadline_;
  asio::steady_timer tick_;
  bool timed_out_ = false;
  uint64_t deadline_gen_ = 0;
  bool first_request_ = true;
  bool idle_ = false;
  bool stop_requested_ = false;
  bool closed_ = false;
  bool keep_alive_ = false;
  bool head_only_ = false;
  std::string method_, target_;
  std::chrono::steady_clock::time_point received_ = std::chrono::steady_clock::now();
  int status_ = 0;
  HttpReply reply_;
  std::shared_ptr<ReplyBody> response_;
  std::shared_ptr<std::atomic<bool>> wake_;
  bool response_done_ = false;
  bool head_sent_ = false;  // of a streamed reply
  bool aborted_ = false;
  std::string out_, writing_;
  bool writing_active_ = false;
  std::function<void()> after_write_;
};

void start_session(HttpServer& server, tcp::socket socket, asio::ssl::context* tls, bool over_limit) {
  error_code ec;
  socket.set_option(tcp::no_delay(true), ec);
  if (tls) {
    using TlsStream = beast::ssl_stream<beast::tcp_stream>;
    auto s =
        std::make_shared<Session<TlsStream>>(server, TlsStream(beast::tcp_stream(std::move(socket)), *tls), over_limit);
    s->start();
  } else {
    auto s = std::make_shared<Session<beast::tcp_stream>>(server, beast::tcp_stream(std::move(socket)), over_limit);
    s->start();
  }
}

}  // namespace kvik::server
