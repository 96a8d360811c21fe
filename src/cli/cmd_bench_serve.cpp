// kvik bench-serve: a serving benchmark in the shape of vLLM's benchmark_serving.py, against any server that
// speaks the OpenAI API (kvik serve, llama.cpp's llama-server, vLLM). Requests arrive all at once
// (--request-rate inf) or as a Poisson process of rate R, at most --max-concurrency in flight; each is
// streamed and timed per chunk. Reports request and token throughput, TTFT / TPOT / ITL / E2E latency
// (mean, median, p99) and goodput (requests/s that meet every --goodput SLO).
#include <algorithm>
#include <utility>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <random>

#include "cli/commands.h"
#include "cli/serve_client.h"
#include "core/error.h"

namespace kvik::cli {

namespace asio = boost::asio;
using nlohmann::json;

namespace {

struct BenchServeOptions {
  std::string base_url = "http://127.0.0.1:8000";
  std::string model, api_key, request_rate = "inf";
  double timeout_s = 3600;
  DatasetOptions data;
  int64_t max_concurrency = 0;       // 0 = no limit
  std::vector<std::string> goodput;  // "ttft:MS", "tpot:MS", "e2el:MS"
  bool json = false;
};

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double idx = p / 100.0 * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(idx)), hi = static_cast<size_t>(std::ceil(idx));
  return v[lo] + (v[hi] - v[lo]) * (idx - static_cast<double>(lo));
}

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}

// "ttft:500 tpot:50" → {"ttft": 0.5 s, ...}.
std::map<std::string, double> parse_slos(const std::vector<std::string>& specs) {
  std::map<std::string, double> slo;
  for (const std::string& s : specs) {
    const size_t colon = s.find(':');
    const std::string key = s.substr(0, colon);
    if (colon == std::string::npos || (key != "ttft" && key != "tpot" && key != "e2el"))
      fail("--goodput {}: expected ttft:MS, tpot:MS or e2el:MS", s);
    try {
      slo[key] = std::stod(s.substr(colon + 1)) / 1000.0;
    } catch (const std::exception&) {
      fail("--goodput {}: the limit is not a number of milliseconds", s);
    }
  }
  return slo;
}

double tpot_of(const RequestResult& r) {
  return r.output_tokens > 1 ? (r.latency - r.ttft) / static_cast<double>(r.output_tokens - 1) : 0;
}

// Launches every request at its arrival time, never more than max_concurrency in flight.
asio::awaitable<void> drive(const Endpoint& ep, const std::vector<BenchRequest>& reqs, double rate,
                            int64_t max_concurrency, uint64_t seed, std::vector<RequestResult>& results) {
  auto ex = co_await asio::this_coro::executor;
  std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ULL);
  std::exponential_distribution<double> gap(std::isinf(rate) ? 1.0 : rate);
  asio::steady_timer wait(ex), slot_freed(ex);
  int64_t in_flight = 0, finished = 0;
  const int64_t limit = max_concurrency > 0 ? max_concurrency : std::numeric_limits<int64_t>::max();
  for (size_t i = 0; i < reqs.size(); ++i) {
    if (!std::isinf(rate) && i > 0) {
      wait.expires_after(std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(gap(rng))));
      co_await wait.async_wait(asio::use_awaitable);
    }
    while (in_flight >= limit) {
      slot_freed.expires_at(asio::steady_timer::time_point::max());
      boost::system::error_code ec;
      co_await slot_freed.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    }
    ++in_flight;
    asio::co_spawn(
        ex,
        [&, i]() -> asio::awaitable<void> {
          results[i] = co_await send_request(ep, reqs[i]);
          --in_flight;
          ++finished;
          slot_freed.cancel();
        },
        asio::detached);
  }
  while (finished < static_cast<int64_t>(reqs.size())) {
    slot_freed.expires_at(asio::steady_timer::time_point::max());
    boost::system::error_code ec;
    co_await slot_freed.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
}

json latency_block(const std::vector<double>& v) {
  return {{"mean_ms", mean(v) * 1000}, {"median_ms", percentile(v, 50) * 1000}, {"p99_ms", percentile(v, 99) * 1000}};
}

json summarize(const BenchServeOptions& o, const std::vector<RequestResult>& results, double duration) {
  std::vector<double> ttft, tpot, itl, e2el;
  int64_t completed = 0, failed = 0, input = 0, output = 0, good = 0;
  std::map<std::string, int64_t> errors;
  const auto slo = parse_slos(o.goodput);
  for (const RequestResult& r : results) {
    if (!r.ok) {
      ++failed;
      ++errors[r.error.substr(0, r.error.find(':'))];
      continue;
    }
    ++completed;
    input += r.prompt_tokens;
    output += r.output_tokens;
    ttft.push_back(r.ttft);
    if (r.output_tokens > 1) tpot.push_back(tpot_of(r));
    itl.insert(itl.end(), r.itl.begin(), r.itl.end());
    e2el.push_back(r.latency);
    const bool ok = (!slo.count("ttft") || r.ttft <= slo.at("ttft")) &&
                    (!slo.count("tpot") || tpot_of(r) <= slo.at("tpot")) &&
                    (!slo.count("e2el") || r.latency <= slo.at("e2el"));
    good += ok;
  }
  json j = {{"base_url", o.base_url},
            {"dataset", o.data.name},
            {"num_prompts", o.data.num_prompts},
            {"request_rate", o.request_rate},
            {"max_concurrency", o.max_concurrency},
            {"duration_s", duration},
            {"completed", completed},
            {"failed", failed},
            {"total_input_tokens", input},
            {"total_output_tokens", output},
            {"request_throughput", completed / duration},
            {"output_throughput", output / duration},
            {"total_token_throughput", (input + output) / duration},
            {"ttft", latency_block(ttft)},
            {"tpot", latency_block(tpot)},
            {"itl", latency_block(itl)},
            {"e2el", latency_block(e2el)},
            {"errors", errors}};
  if (!slo.empty()) j["goodput"] = good / duration;
  return j;
}

void print_table(const json& j) {
  auto line = [](const char* name, const std::string& v) { std::printf("%-40s %s\n", name, v.c_str()); };
  auto num = [](double v, int prec = 2) { return fmt::format("{:.{}f}", v, prec); };
  std::printf("============ Serving Benchmark Result ============\n");
  line("Successful requests:", std::to_string(j["completed"].get<int64_t>()));
  line("Failed requests:", std::to_string(j["failed"].get<int64_t>()));
  for (const auto& [what, n] : j["errors"].items()) line(("  " + what + ":").c_str(), std::to_string(n.get<int64_t>()));
  line("Benchmark duration (s):", num(j["duration_s"]));
  line("Total input tokens:", std::to_string(j["total_input_tokens"].get<int64_t>()));
  line("Total generated tokens:", std::to_string(j["total_output_tokens"].get<int64_t>()));
  line("Request throughput (req/s):", num(j["request_throughput"]));
  if (j.contains("goodput")) line("Request goodput (req/s):", num(j["goodput"]));
  line("Output token throughput (tok/s):", num(j["output_throughput"]));
  line("Total token throughput (tok/s):", num(j["total_token_throughput"]));
  const std::pair<const char*, const char*> blocks[] = {{"ttft", "Time to First Token"},
                                                        {"tpot", "Time per Output Token (excl. 1st token)"},
                                                        {"itl", "Inter-token Latency"},
                                                        {"e2el", "End-to-end Latency"}};
  for (const auto& [key, title] : blocks) {
    std::printf("%s\n", fmt::format("{:-^50}", title).c_str());
    const std::string k = key;
    for (const char* stat : {"mean", "median", "p99"}) {
      const std::string label = fmt::format("{} {} (ms):",
                                            stat == std::string("median") ? "Median"
                                            : stat == std::string("mean") ? "Mean"
                                                                          : "P99",
                                            k == "e2el"   ? "E2EL"
                                            : k == "ttft" ? "TTFT"
                                            : k == "tpot" ? "TPOT"
                                                          : "ITL");
      line(label.c_str(), num(j[k][std::string(stat) + "_ms"]));
    }
  }
  std::printf("==================================================\n");
}

int run_bench_serve(BenchServeOptions& o) {
  const Endpoint ep = [&] {
    Endpoint e = parse_base_url(o.base_url);
    e.api_key = o.api_key;
    e.timeout_s = o.timeout_s;
    return e;
  }();
  double rate = std::numeric_limits<double>::infinity();
  if (o.request_rate != "inf") {
    try {
      rate = std::stod(o.request_rate);
    } catch (const std::exception&) {
      rate = -1;
    }
    if (!(rate > 0)) fail("--request-rate {}: expected inf or a positive number of requests/s", o.request_rate);
  }
  parse_slos(o.goodput);  // fail early on a bad spec
  asio::io_context ioc;
  if (o.model.empty()) {  // the first model the server lists
    std::string models;
    asio::co_spawn(ioc, http_get(ep, "/v1/models"), [&](std::exception_ptr e, std::string body) {
      if (e) std::rethrow_exception(e);
      models = std::move(body);
    });
    ioc.run();
    ioc.restart();
    const json m = json::parse(models, nullptr, false);
    if (m.is_discarded() || !m.contains("data") || m["data"].empty())
      fail("{}/v1/models lists no model: pass --model", o.base_url);
    o.model = m["data"][0].value("id", "");
  }
  o.data.model = o.model;
  const std::vector<BenchRequest> reqs = make_dataset(o.data);
  std::vector<RequestResult> results(reqs.size());
  const auto start = std::chrono::steady_clock::now();
  asio::co_spawn(ioc, drive(ep, reqs, rate, o.max_concurrency, o.data.seed, results), [](std::exception_ptr e) {
    if (e) std::rethrow_exception(e);
  });
  ioc.run();
  const double duration = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  json j = summarize(o, results, duration);
  j["model"] = o.model;
  if (o.json)
    std::printf("%s\n", j.dump().c_str());
  else
    print_table(j);
  return j["completed"].get<int64_t>() > 0 ? 0 : 1;
}

}  // namespace

Run add_bench_serve(CLI::App& app) {
  auto o = std::make_shared<BenchServeOptions>();
  auto* c = app.add_subcommand("bench-serve",
                               "Serving benchmark against an OpenAI-compatible server (vLLM's "
                               "benchmark_serving.py): throughput, TTFT, TPOT, ITL, E2E, goodput");
  c->add_option("--base-url", o->base_url, "Server to benchmark: http://HOST:PORT[/PREFIX]")->capture_default_str();
  c->add_option("--model", o->model, "Model name to request (default: the first one /v1/models lists)");
  c->add_option("--api-key", o->api_key, "Sent as 'Authorization: Bearer KEY'");
  c->add_option("--timeout", o->timeout_s, "Seconds one request may take, queueing included, before it fails")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  c->add_option("--num-prompts", o->data.num_prompts, "Requests to send")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  c->add_option("--request-rate", o->request_rate, "Poisson arrival rate in requests/s, or inf (all at once)")
      ->capture_default_str();
  c->add_option("--max-concurrency", o->max_concurrency, "Most requests in flight at once (0 = no limit)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  c->add_option("--dataset", o->data.name, "random (completions) or synthetic-chat (chat completions)")
      ->capture_default_str();
  c->add_option("--input-len", o->data.input_len, "Prompt length in words (about one token each)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  c->add_option("--output-len", o->data.output_len, "max_tokens per request (sent with ignore_eos)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  c->add_option("--seed", o->data.seed, "Seed for prompts and arrival times")->capture_default_str();
  c->add_option("--goodput", o->goodput, "SLOs for goodput: ttft:MS tpot:MS e2el:MS (all must hold)");
  c->add_flag("--json", o->json, "Print one JSON object instead of the table");
  return [o]() { return run_bench_serve(*o); };
}

}  // namespace kvik::cli
