// The client side of `kvik bench-serve`: one OpenAI request over HTTP/1.1 (Boost.Beast, C++20 coroutines on a
// single-threaded io_context), streamed as SSE, timed per token; and the prompt datasets. It speaks only the
// OpenAI API, so it drives kvik, llama.cpp's llama-server, vLLM or any other such server alike.
#pragma once

#include <utility>  // before awaitable.hpp, which uses std::exchange without it (Boost 1.74)

#include <boost/asio/awaitable.hpp>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace kvik::cli {

struct Endpoint {
  std::string host = "127.0.0.1";
  std::string port = "8000";
  std::string base_path;  // what precedes /v1/... in the base URL
  std::string api_key;
  double timeout_s = 3600;  // per request, from connecting to the end of the stream
};

// "http://host:port[/prefix]" → Endpoint; throws kvik::Error for anything else (https is not spoken).
Endpoint parse_base_url(const std::string& url);

struct BenchRequest {
  std::string path;     // "/v1/completions" or "/v1/chat/completions"
  nlohmann::json body;  // stream: true is set by the client
  int64_t expected_output = 0;
};

struct RequestResult {
  bool ok = false;
  std::string error;  // "HTTP 429: ...", "connect: ...", ...
  int status = 0;
  double ttft = 0;          // seconds to the first content chunk
  double latency = 0;       // seconds to the end of the stream
  std::vector<double> itl;  // seconds between content chunks
  int64_t prompt_tokens = 0;
  int64_t output_tokens = 0;  // usage.completion_tokens when the server sends it, else chunks
};

// Both coroutines take their arguments by value: a reference to a caller's temporary would dangle after the first
// suspension.
// Sends `req` (with "stream": true and usage requested) and reads the whole SSE stream.
boost::asio::awaitable<RequestResult> send_request(Endpoint ep, BenchRequest req);
// A non-streaming GET (e.g. /v1/models); returns the body, or throws kvik::Error naming the failure.
boost::asio::awaitable<std::string> http_get(Endpoint ep, std::string path);

struct DatasetOptions {
  std::string name = "random";  // random | synthetic-chat
  int64_t num_prompts = 100;
  int64_t input_len = 128;   // words of prompt (≈ tokens)
  int64_t output_len = 128;  // max_tokens, with ignore_eos
  uint64_t seed = 0;
  std::string model;
};

// The requests of one run: `random` = completions of input_len random common words; `synthetic-chat` =
// chat conversations (a system prompt and 1-3 earlier turns) of about input_len words in all.
std::vector<BenchRequest> make_dataset(const DatasetOptions& o);

}  // namespace kvik::cli
