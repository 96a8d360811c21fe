#include "cli/serve_client.h"

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cstdint>
#include <limits>
#include <random>

#include "core/error.h"

namespace kvik::cli {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

http::request<http::string_body> make_request(const Endpoint& ep, http::verb verb, const std::string& path,
                                              std::string body) {
  http::request<http::string_body> req{verb, ep.base_path + path, 11};
  req.set(http::field::host, ep.host + ":" + ep.port);
  req.set(http::field::user_agent, "kvik-bench-serve");
  if (!ep.api_key.empty()) req.set(http::field::authorization, "Bearer " + ep.api_key);
  if (verb == http::verb::post) {
    req.set(http::field::content_type, "application/json");
    req.body() = std::move(body);
    req.prepare_payload();
  }
  return req;
}

asio::awaitable<void> connect(beast::tcp_stream& stream, const Endpoint& ep) {
  tcp::resolver resolver(co_await asio::this_coro::executor);
  auto results = co_await resolver.async_resolve(ep.host, ep.port, asio::use_awaitable);
  stream.expires_after(std::chrono::seconds(30));
  co_await stream.async_connect(results, asio::use_awaitable);
}

// One SSE event's JSON: choice chunks are timed; usage (when the server sends it) gives the token counts.
void on_event(const json& ev, Clock::time_point start, Clock::time_point& last, int64_t& chunks, RequestResult& r) {
  if (ev.contains("usage") && ev["usage"].is_object()) {
    r.prompt_tokens = ev["usage"].value("prompt_tokens", int64_t{0});
    r.output_tokens = ev["usage"].value("completion_tokens", int64_t{0});
  }
  // Every event with a choice is a step of the stream, its text empty or not (a token may end inside a UTF-8
  // character, or decode to nothing): timed as vLLM's benchmark_serving times chunks. The usage-only event at the
  // end has no choices.
  if (!ev.contains("choices") || !ev["choices"].is_array() || ev["choices"].empty()) return;
  const auto now = Clock::now();
  if (chunks++ == 0)
    r.ttft = std::chrono::duration<double>(now - start).count();
  else
    r.itl.push_back(std::chrono::duration<double>(now - last).count());
  last = now;
}

// Splits the SSE text received so far into events; returns true at "data: [DONE]".
bool take_events(std::string& pending, Clock::time_point start, Clock::time_point& last, int64_t& chunks,
                 RequestResult& r) {
  for (size_t end; (end = pending.find("\n\n")) != std::string::npos;) {
    std::string event = pending.substr(0, end);
    pending.erase(0, end + 2);
    if (event.rfind("data: ", 0) != 0) continue;  // comments (": keep-alive") and other fields
    const std::string data = event.substr(6);
    if (data == "[DONE]") return true;
    json ev = json::parse(data, nullptr, false);
    if (!ev.is_discarded()) on_event(ev, start, last, chunks, r);
  }
  return false;
}

}  // namespace

Endpoint parse_base_url(const std::string& url) {
  const std::string scheme = "http://";
  if (url.rfind(scheme, 0) != 0) fail("--base-url {}: expected http://HOST:PORT[/PREFIX]", url);
  std::string rest = url.substr(scheme.size());
  Endpoint ep;
  const size_t slash = rest.find('/');
  if (slash != std::string::npos) {
    ep.base_path = rest.substr(slash);
    while (!ep.base_path.empty() && ep.base_path.back() == '/') ep.base_path.pop_back();
    if (ep.base_path.size() >= 3 && ep.base_path.compare(ep.base_path.size() - 3, 3, "/v1") == 0)
      ep.base_path.resize(ep.base_path.size() - 3);  // ".../v1" given as vLLM's --base-url often is
    rest = rest.substr(0, slash);
  }
  const size_t colon = rest.rfind(':');
  ep.host = colon == std::string::npos ? rest : rest.substr(0, colon);
  ep.port = colon == std::string::npos ? "80" : rest.substr(colon + 1);
  if (ep.host.empty() || ep.port.empty()) fail("--base-url {}: expected http://HOST:PORT[/PREFIX]", url);
  return ep;
}

asio::awaitable<RequestResult> send_request(Endpoint ep, BenchRequest req) {
  RequestResult r;
  json body = req.body;
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  const auto start = Clock::now();
  auto last = start;
  int64_t chunks = 0;
  try {
    beast::tcp_stream stream(co_await asio::this_coro::executor);
    co_await connect(stream, ep);
    auto request = make_request(ep, http::verb::post, req.path, body.dump());
    stream.expires_after(std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(ep.timeout_s)));
    co_await http::async_write(stream, request, asio::use_awaitable);
    beast::flat_buffer buffer;
    http::response_parser<http::buffer_body> parser;
    // No limit on a stream's length. Not boost::none: Boost 1.74's parser compares a Content-Length against the
    // empty optional as "greater" and refuses every sized body (an error response) with body_limit.
    parser.body_limit(std::numeric_limits<std::uint64_t>::max());
    co_await http::async_read_header(stream, buffer, parser, asio::use_awaitable);
    r.status = parser.get().result_int();
    std::string pending;
    bool done = false;
    char buf[16384];
    while (!parser.is_done()) {
      parser.get().body().data = buf;
      parser.get().body().size = sizeof buf;
      boost::system::error_code ec;
      // read_some, not read: read would wait until the 16 KiB buffer is full, so events arriving one by one
      // would be timed as one late chunk (TTFT = E2E).
      co_await http::async_read_some(stream, buffer, parser, asio::redirect_error(asio::use_awaitable, ec));
      if (ec && ec != http::error::need_buffer) throw boost::system::system_error(ec);
      pending.append(buf, sizeof buf - parser.get().body().size);
      if (r.status == 200 && !done) done = take_events(pending, start, last, chunks, r);
    }
    r.latency = since(start);
    if (r.status != 200) {
      r.error = "HTTP " + std::to_string(r.status) + ": " + pending.substr(0, 200);
    } else if (!done) {
      r.error = "the stream ended without data: [DONE]";
    } else {
      r.ok = true;
      if (r.output_tokens == 0) r.output_tokens = chunks;
    }
    boost::system::error_code ignored;
    stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
  } catch (const std::exception& e) {
    r.ok = false;
    r.error = e.what();
    r.latency = since(start);
  }
  co_return r;
}

asio::awaitable<std::string> http_get(Endpoint ep, std::string path) {
  beast::tcp_stream stream(co_await asio::this_coro::executor);
  co_await connect(stream, ep);
  auto request = make_request(ep, http::verb::get, path, "");
  co_await http::async_write(stream, request, asio::use_awaitable);
  beast::flat_buffer buffer;
  http::response<http::string_body> res;
  co_await http::async_read(stream, buffer, res, asio::use_awaitable);
  if (res.result_int() != 200) fail("GET {}: HTTP {}: {}", path, res.result_int(), res.body().substr(0, 200));
  co_return res.body();
}

namespace {

const char* const kWords[] = {
    "time",      "year",       "people",      "way",       "day",    "man",       "thing",  "woman",   "life",
    "child",     "world",      "school",      "state",     "family", "student",   "group",  "country", "problem",
    "hand",      "part",       "place",       "case",      "week",   "company",   "system", "program", "question",
    "work",      "government", "number",      "night",     "point",  "home",      "water",  "room",    "mother",
    "area",      "money",      "story",       "fact",      "month",  "lot",       "right",  "study",   "book",
    "eye",       "job",        "word",        "business",  "issue",  "side",      "kind",   "head",    "house",
    "service",   "friend",     "father",      "power",     "hour",   "game",      "line",   "end",     "member",
    "law",       "car",        "city",        "community", "name",   "president", "team",   "minute",  "idea",
    "kid",       "body",       "information", "back",      "parent", "face",      "others", "level",   "office",
    "door",      "health",     "person",      "art",       "war",    "history",   "party",  "result",  "change",
    "morning",   "reason",     "research",    "girl",      "guy",    "moment",    "air",    "teacher", "force",
    "education", "the",        "a",           "and",       "of",     "to",        "in",     "is",      "was",
    "little",    "big",        "happy",       "small",     "old",    "new",       "good",   "long",    "great",
    "high",      "tree",       "dog",         "cat",       "bird",   "sun",       "sky",    "ran",     "saw",
    "went",      "played",     "said",        "looked",    "found",  "made",      "wanted", "liked"};
constexpr size_t kNumWords = sizeof(kWords) / sizeof(kWords[0]);

std::string random_words(std::mt19937_64& rng, int64_t n) {
  std::string s;
  for (int64_t i = 0; i < n; ++i) {
    if (i) s += ' ';
    s += kWords[rng() % kNumWords];
  }
  return s;
}

}  // namespace

std::vector<BenchRequest> make_dataset(const DatasetOptions& o) {
  if (o.name != "random" && o.name != "synthetic-chat") fail("--dataset {}: expected random or synthetic-chat", o.name);
  std::mt19937_64 rng(o.seed);
  std::vector<BenchRequest> out;
  for (int64_t i = 0; i < o.num_prompts; ++i) {
    BenchRequest r;
    r.expected_output = o.output_len;
    r.body = {{"max_tokens", o.output_len}, {"ignore_eos", true}, {"temperature", 0}};
    if (!o.model.empty()) r.body["model"] = o.model;
    if (o.name == "random") {
      r.path = "/v1/completions";
      r.body["prompt"] = random_words(rng, std::max<int64_t>(1, o.input_len));
    } else {
      r.path = "/v1/chat/completions";
      const int64_t turns = 1 + static_cast<int64_t>(rng() % 3);
      const int64_t per = std::max<int64_t>(1, o.input_len / (2 * turns + 1));
      json messages =
          json::array({{{"role", "system"}, {"content", "You are a helpful assistant. " + random_words(rng, per)}}});
      for (int64_t t = 0; t < turns; ++t) {
        messages.push_back({{"role", "user"}, {"content", random_words(rng, per)}});
        if (t + 1 < turns) messages.push_back({{"role", "assistant"}, {"content", random_words(rng, per)}});
      }
      r.body["messages"] = messages;
    }
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace kvik::cli
