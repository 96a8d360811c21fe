// Load tests of `kvik serve` over loopback (self-contained: starts the server, drives it, stops it).
//
//   serve_load burst KVIK MODEL N        N clients connect at once, each streaming a short completion: every one
//                                        must get a whole 200 stream or a 429/503 with Retry-After (no reset, no
//                                        timeout); afterwards running = waiting = 0 and KV usage 0. Prints RSS.
//   serve_load abuse KVIK MODEL L S M    L slow-loris connections (a header byte every 5 s) and S clients that stop
//                                        reading mid-stream, while M normal streaming clients run: the normal ones
//                                        must all finish, no slower than 3x their time on a quiet server (+2 s), and
//                                        every non-reading request must be aborted (its KV freed).
// Exit status 0 when every check holds; one line per check on stdout.
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <utility>

#include <atomic>
#include <boost/asio.hpp>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

namespace {

int g_failures = 0;

void check(bool ok, const std::string& what) {
  std::printf("%s %s\n", ok ? "PASS" : "FAIL", what.c_str());
  std::fflush(stdout);
  if (!ok) ++g_failures;
}

struct Server {
  pid_t pid = -1;
  int port = 0;
  std::string log;
};

// The port of the server's "Listening on SCHEME://HOST:PORT" line in `log` (it runs with --port 0: the kernel picks a
// free port at bind time, which a port chosen in advance and released again does not guarantee); 0 until it is there.
int listening_port(const std::string& log) {
  std::ifstream in(log);
  for (std::string line; std::getline(in, line);) {
    const size_t at = line.find("Listening on ");
    if (at == std::string::npos) continue;
    const size_t space = line.find(' ', at + 13);
    const std::string url = line.substr(at + 13, space == std::string::npos ? std::string::npos : space - at - 13);
    const size_t colon = url.rfind(':');
    return colon == std::string::npos ? 0 : std::atoi(url.c_str() + colon + 1);
  }
  return 0;
}

// What a client saw: the HTTP status, headers and (de-chunked) body; `error` when the exchange failed.
struct Reply {
  int status = 0;
  std::string head, body, error;
  double seconds = 0;
};

std::string dechunk(const std::string& raw) {
  std::string out;
  size_t pos = 0;
  while (pos < raw.size()) {
    const size_t eol = raw.find("\r\n", pos);
    if (eol == std::string::npos) break;
    const size_t n = std::stoul(raw.substr(pos, eol - pos), nullptr, 16);
    if (n == 0) break;
    out += raw.substr(eol + 2, n);
    pos = eol + 2 + n + 2;
  }
  return out;
}

Reply parse_reply(const std::string& raw) {
  Reply r;
  const size_t end = raw.find("\r\n\r\n");
  if (raw.rfind("HTTP/1.1 ", 0) != 0 || end == std::string::npos) {
    r.error = "no HTTP response (" + std::to_string(raw.size()) + " bytes)";
    return r;
  }
  r.status = std::stoi(raw.substr(9, 3));
  r.head = raw.substr(0, end);
  const std::string body = raw.substr(end + 4);
  r.body = r.head.find("Transfer-Encoding: chunked") != std::string::npos ? dechunk(body) : body;
  return r;
}

std::string post_text(int port, const std::string& path, const std::string& body) {
  return "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1:" + std::to_string(port) +
         "\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\n\r\n" + body;
}

// One request on a fresh connection, read to EOF; a timeout or a reset is an error.
asio::awaitable<Reply> exchange(int port, std::string request, Clock::duration timeout, int rcvbuf = 0) {
  auto ex = co_await asio::this_coro::executor;
  const auto start = Clock::now();
  tcp::socket s(ex);
  asio::steady_timer timer(ex);
  timer.expires_after(timeout);
  bool timed_out = false;
  timer.async_wait([&](boost::system::error_code ec) {
    if (ec) return;
    timed_out = true;
    boost::system::error_code ignored;
    s.close(ignored);
  });
  std::string raw;
  Reply r;
  try {
    s.open(tcp::v4());
    if (rcvbuf > 0) s.set_option(asio::socket_base::receive_buffer_size(rcvbuf));
    co_await s.async_connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port), asio::use_awaitable);
    co_await asio::async_write(s, asio::buffer(request), asio::use_awaitable);
    char buf[16384];
    for (;;) {
      boost::system::error_code ec;
      const size_t n = co_await s.async_read_some(asio::buffer(buf), asio::redirect_error(asio::use_awaitable, ec));
      raw.append(buf, n);
      if (ec == asio::error::eof) break;
      if (ec) throw boost::system::system_error(ec);
    }
    r = parse_reply(raw);
  } catch (const std::exception& e) {
    r.error = timed_out ? "timed out" : e.what();
  }
  timer.cancel();
  r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  co_return r;
}

template <class T>
T run_one(asio::awaitable<T> a) {
  asio::io_context ioc;
  T out{};
  asio::co_spawn(ioc, std::move(a), [&](std::exception_ptr e, T v) {
    if (e) std::rethrow_exception(e);
    out = std::move(v);
  });
  ioc.run();
  return out;
}

std::string get_text(int port, const std::string& path) {
  return "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
}

std::map<std::string, double> metrics(int port) {
  Reply r = run_one(exchange(port, get_text(port, "/metrics"), seconds(10)));
  std::map<std::string, double> m;
  std::istringstream in(r.body);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    const size_t sp = line.rfind(' ');
    std::string name = line.substr(0, sp);
    const size_t lb = name.find('{');
    if (lb != std::string::npos) {  // keep only finished_reason labels
      const size_t fr = name.find("finished_reason=\"");
      name = name.substr(0, lb) +
             (fr == std::string::npos ? "" : "{" + name.substr(fr, name.find('"', fr + 17) - fr + 1) + "}");
    }
    m[name] = std::stod(line.substr(sp + 1));
  }
  return m;
}

Server start_server(const std::string& kvik, const std::string& model, std::vector<std::string> extra) {
  Server s;
  s.log = "/tmp/kvik-serve-load-" + std::to_string(getpid()) + ".log";
  std::vector<std::string> args = {kvik,     "serve", model,       "--host", "127.0.0.1",
                                   "--port", "0",     "--threads", "1",      "--disable-log-requests"};
  args.insert(args.end(), extra.begin(), extra.end());
  s.pid = fork();
  if (s.pid == 0) {
    FILE* f = std::fopen(s.log.c_str(), "w");
    dup2(fileno(f), 1);
    dup2(fileno(f), 2);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  for (int i = 0; i < 600; ++i) {
    if (s.port == 0) s.port = listening_port(s.log);
    if (s.port != 0 && run_one(exchange(s.port, get_text(s.port, "/health"), seconds(5))).status == 200) return s;
    int status;
    if (waitpid(s.pid, &status, WNOHANG) == s.pid) break;
    usleep(50000);
  }
  std::ifstream in(s.log);
  std::stringstream text;
  text << in.rdbuf();
  std::fprintf(stderr, "kvik serve did not become healthy; its log (%s):\n%s\n", s.log.c_str(), text.str().c_str());
  std::exit(2);
}

std::string rss_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string out;
  for (std::string line; std::getline(in, line);)
    if (line.rfind("VmRSS", 0) == 0 || line.rfind("VmHWM", 0) == 0) out += line + "  ";
  return out;
}

int stop_server(Server& s) {
  kill(s.pid, SIGTERM);
  int status = 0;
  waitpid(s.pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Waits (up to 20 s) until nothing runs or waits and the KV cache is empty; checks it.
void check_idle(int port) {
  std::map<std::string, double> m;
  for (int i = 0; i < 400; ++i) {
    m = metrics(port);
    if (m["kvik:num_requests_running"] == 0 && m["kvik:num_requests_waiting"] == 0 &&
        m["kvik:kv_cache_usage_perc"] == 0)
      break;
    usleep(50000);
  }
  check(
      m["kvik:num_requests_running"] == 0 && m["kvik:num_requests_waiting"] == 0 && m["kvik:kv_cache_usage_perc"] == 0,
      "afterwards running = " + std::to_string(m["kvik:num_requests_running"]) +
          ", waiting = " + std::to_string(m["kvik:num_requests_waiting"]) +
          ", KV usage = " + std::to_string(m["kvik:kv_cache_usage_perc"]));
}

std::string completion(const std::string& prompt, int max_tokens, const std::string& extra = "") {
  return "{\"prompt\":\"" + prompt + "\",\"max_tokens\":" + std::to_string(max_tokens) +
         ",\"temperature\":0,\"ignore_eos\":true,\"stream\":true" + extra + "}";
}

bool full_stream(const Reply& r) {
  return r.status == 200 && r.body.find("\"finish_reason\":\"length\"") != std::string::npos && r.body.size() >= 14 &&
         r.body.compare(r.body.size() - 14, 14, "data: [DONE]\n\n") == 0;
}

int burst(const std::string& kvik, const std::string& model, int n) {
  Server s = start_server(kvik, model, {});
  asio::io_context ioc;
  std::vector<Reply> replies(n);
  for (int i = 0; i < n; ++i)
    asio::co_spawn(
        ioc,
        exchange(s.port, post_text(s.port, "/v1/completions", completion("Once upon a time " + std::to_string(i), 8)),
                 seconds(120)),
        [&, i](std::exception_ptr, Reply r) { replies[i] = std::move(r); });
  const auto start = Clock::now();
  ioc.run();
  const double took = std::chrono::duration<double>(Clock::now() - start).count();
  int ok = 0, shed = 0, bad = 0;
  std::map<std::string, int> why;
  for (const Reply& r : replies) {
    if (full_stream(r))
      ++ok;
    else if ((r.status == 429 || r.status == 503) && r.head.find("Retry-After: ") != std::string::npos)
      ++shed;
    else {
      ++bad;
      ++why[r.error.empty() ? "HTTP " + std::to_string(r.status) : r.error];
    }
  }
  std::printf("%d clients at once: %d full 200 streams, %d shed (429/503 + Retry-After), %d failed, in %.1f s\n", n, ok,
              shed, bad, took);
  for (const auto& [w, k] : why) std::printf("  failed: %d × %s\n", k, w.c_str());
  check(bad == 0, "every client got a whole 200 stream or a 429/503 with Retry-After");
  check(ok > 0, "some clients were served");
  check_idle(s.port);
  std::printf("server RSS after the burst: %s\n", rss_of(s.pid).c_str());
  check(stop_server(s) == 0, "SIGTERM exits 0");
  return g_failures ? 1 : 0;
}

// Sends a request's headers one byte every 5 s until `stop` (a slow-loris client); returns how it ended.
asio::awaitable<std::string> slow_loris(int port, const std::atomic<bool>& stop) {
  auto ex = co_await asio::this_coro::executor;
  tcp::socket s(ex);
  asio::steady_timer t(ex);
  const std::string req = post_text(port, "/v1/completions", completion("x", 4));
  try {
    co_await s.async_connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port), asio::use_awaitable);
    for (size_t i = 0; i < req.size() && !stop; ++i) {
      co_await asio::async_write(s, asio::buffer(&req[i], 1), asio::use_awaitable);
      for (int k = 0; k < 50 && !stop; ++k) {
        t.expires_after(milliseconds(100));
        co_await t.async_wait(asio::use_awaitable);
        char head[16] = {};
        const ssize_t n = ::recv(s.native_handle(), head, sizeof head - 1, MSG_PEEK | MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN)) co_return "closed by the server";
        if (n > 0) co_return std::string(head).rfind("HTTP/1.1 408", 0) == 0 ? "408" : "answered";
      }
    }
  } catch (const std::exception&) {
    co_return "closed by the server";
  }
  co_return "still open";
}

// Starts a long streaming request and never reads its response.
asio::awaitable<int> non_reader(int port, int i, const std::atomic<bool>& stop) {
  auto ex = co_await asio::this_coro::executor;
  tcp::socket s(ex);
  s.open(tcp::v4());
  s.set_option(asio::socket_base::receive_buffer_size(4096));
  co_await s.async_connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port), asio::use_awaitable);
  const std::string req =
      post_text(port, "/v1/completions", completion("Never read " + std::to_string(i), 400, ",\"logprobs\":20"));
  co_await asio::async_write(s, asio::buffer(req), asio::use_awaitable);
  asio::steady_timer t(ex);
  while (!stop) {
    t.expires_after(milliseconds(100));
    co_await t.async_wait(asio::use_awaitable);
  }
  co_return 0;
}

double normal_clients(int port, int m, const std::string& tag) {
  asio::io_context ioc;
  std::vector<Reply> replies(m);
  for (int i = 0; i < m; ++i)
    asio::co_spawn(
        ioc,
        exchange(port, post_text(port, "/v1/completions", completion(tag + " " + std::to_string(i), 32)), seconds(120)),
        [&, i](std::exception_ptr, Reply r) { replies[i] = std::move(r); });
  const auto start = Clock::now();
  ioc.run();
  const double took = std::chrono::duration<double>(Clock::now() - start).count();
  int ok = 0;
  for (const Reply& r : replies) ok += full_stream(r);
  check(ok == m, std::to_string(ok) + "/" + std::to_string(m) + " normal clients got whole streams (" + tag + ")");
  return took;
}

int abuse(const std::string& kvik, const std::string& model, int loris, int stalled, int m) {
  Server s = start_server(kvik, model, {"--max-stream-buffer", "16384", "--header-timeout", "8"});
  const double quiet = normal_clients(s.port, m, "quiet");
  const double aborted_before = metrics(s.port)["kvik:request_success_total{finished_reason=\"abort\"}"];
  asio::io_context ioc;
  std::atomic<bool> stop{false};
  std::atomic<int> loris_closed{0};
  for (int i = 0; i < loris; ++i)
    asio::co_spawn(ioc, slow_loris(s.port, stop),
                   [&](std::exception_ptr, std::string how) { loris_closed += how != "still open"; });
  for (int i = 0; i < stalled; ++i) asio::co_spawn(ioc, non_reader(s.port, i, stop), asio::detached);
  std::thread side([&] { ioc.run(); });
  usleep(500000);  // the abusers are connected and sending
  const double busy = normal_clients(s.port, m, "under abuse");
  std::printf("%d normal clients: %.2f s on a quiet server, %.2f s beside %d slow-loris and %d non-reading clients\n",
              m, quiet, busy, loris, stalled);
  check(busy <= 3 * quiet + 2, "the normal clients were served at normal speed");
  double aborted = 0;
  for (int i = 0; i < 600 && aborted < stalled; ++i) {
    aborted = metrics(s.port)["kvik:request_success_total{finished_reason=\"abort\"}"] - aborted_before;
    usleep(50000);
  }
  check(aborted == stalled, "every non-reading client's request was aborted (" + std::to_string(int(aborted)) + " of " +
                                std::to_string(stalled) + ")");
  for (int i = 0; i < 300 && loris_closed < loris; ++i) usleep(50000);  // the header deadline is 8 s
  check(loris_closed == loris, std::to_string(loris_closed) + " of " + std::to_string(loris) +
                                   " slow-loris connections were closed by the header deadline");
  stop = true;
  side.join();
  check_idle(s.port);
  std::printf("server RSS: %s\n", rss_of(s.pid).c_str());
  check(stop_server(s) == 0, "SIGTERM exits 0");
  return g_failures ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);
  rlimit rl{};
  getrlimit(RLIMIT_NOFILE, &rl);
  rl.rlim_cur = rl.rlim_max;  // one descriptor per client
  setrlimit(RLIMIT_NOFILE, &rl);
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "burst" && argc == 5) return burst(argv[2], argv[3], std::stoi(argv[4]));
  if (mode == "abuse" && argc == 7)
    return abuse(argv[2], argv[3], std::stoi(argv[4]), std::stoi(argv[5]), std::stoi(argv[6]));
  std::fprintf(stderr, "usage: serve_load burst KVIK MODEL N | serve_load abuse KVIK MODEL LORIS STALLED NORMAL\n");
  return 2;
}
