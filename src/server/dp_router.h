// kvik serve --data-parallel-size D: the front process's router over D engine replicas, each a `kvik serve` child
// process on a loopback port (cli/serve_data_parallel.cpp starts them). The routing idea of SGLang's router and
// llm-d: a generation goes to the replica holding the longest cached prefix of its prompt, else to the least loaded.
//
// Prefix match: the front tokenizes the prompt exactly as a replica will (routing_prompt_ids) and hashes its full
// blocks with the engine's own chained block hash (the front and its replicas share one secret seed); each
// replica's prefix-cache summary (GET /v1/engine/prefix_summary, polled 10×/s) plus the hashes of what was routed
// there in the last seconds (SGLang's approximate tree: the summary lags the routing) say how many leading blocks
// it holds. The rule is choose_replica(). A replica process that ends is logged by name and marked down: its
// requests in flight end in errors, new ones go to the others.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "server/dp_upstream.h"
#include "server/routes.h"
#include "tokenizer/tokenizer.h"

namespace kvik::server {

struct ReplicaLoad {
  bool up = false;
  int64_t in_flight = 0;       // requests proxied there and not finished
  int64_t routed = 0;          // requests routed there so far (spreads equal loads)
  int64_t matched_blocks = 0;  // leading full blocks of the prompt it holds
};

struct RouteChoice {
  int replica = -1;  // -1: no replica is up
  bool by_prefix = false;
};

// A replica holding more than this many requests beyond the least loaded one loses its prefix preference.
inline constexpr int64_t kBalanceThreshold = 8;

// The replica with the most matched leading blocks (≥ 1; ties to the less loaded), unless it has more than
// `balance_threshold` requests in flight beyond the least loaded replica; otherwise the least loaded (fewest in
// flight, then fewest routed so far, then the lowest index).
RouteChoice choose_replica(const std::vector<ReplicaLoad>& replicas, int64_t balance_threshold = kBalanceThreshold);

struct ReplicaProcess {
  pid_t pid = 0;
  int port = 0;
};

class DataParallelRouter {
 public:
  DataParallelRouter(const ServerConfig& config, std::vector<ReplicaProcess> replicas);
  ~DataParallelRouter();

  // Every replica answered /health and the tokenizer is loaded: requests are routed from now on (503 before).
  void set_ready(std::unique_ptr<Tokenizer> tok);
  // Starts the thread that polls the replicas' prefix summaries and reaps a replica process that ended.
  void start();
  // Stops that thread (the caller reaps the remaining replicas).
  void stop_polling();
  // Waits until no proxied request is in flight (after the replicas are gone, each ends at once).
  void wait_idle();

  // Every request but a CORS preflight (Router::set_handler).
  HttpReply handle(const HttpRequest& req, std::function<void()> wake);

  // The pids of the replicas still running.
  std::vector<pid_t> live_pids() const;

 private:
  struct Replica {
    ReplicaProcess process;
    bool up = true;         // its process runs
    bool reachable = true;  // false from a refused connection until its next summary arrives
    int64_t in_flight = 0;
    int64_t routed_prefix = 0, routed_load = 0, failed = 0, rerouted = 0;
    std::unordered_set<uint64_t> cached;  // its last summary: low 64 bits of each cached block's hash
    std::unordered_map<uint64_t, std::chrono::steady_clock::time_point> recent;  // routed there, maybe not cached yet
  };

  HttpReply proxy(const HttpRequest& req, std::function<void()> wake, bool generation);
  ProxyTarget target(size_t replica) const;  // under mu_
  // ProxyHooks: a request replica `refused` did not take moves to the least loaded other one.
  std::optional<ProxyTarget> retarget(size_t refused);
  void proxy_done(size_t replica, bool ok);
  // The prompt's block hashes (low 64 bits), or none when the request is not routed by prefix.
  std::vector<uint64_t> prompt_hashes(const HttpRequest& req, bool chat) const;
  // Leading blocks of `hashes` the replica holds: in its summary or routed there lately (`summary_only`: the former).
  static int64_t matched_blocks(const Replica& r, const std::vector<uint64_t>& hashes, bool summary_only = false);
  std::vector<ReplicaLoad> loads(const std::vector<uint64_t>& hashes) const;  // under mu_
  // POST /v1/dp/route {a completion or chat request ("messages")}: where it would go and why, without sending it.
  HttpReply explain_route(const HttpRequest& req, bool chat) const;
  void poll_loop();
  void poll_summary(size_t i);
  void reap();
  HttpReply metrics() const;
  HttpReply replicas_json() const;
  bool authorized(const HttpRequest& req) const;

  const ServerConfig& config_;
  std::unique_ptr<Tokenizer> tok_;
  std::atomic<bool> ready_{false};
  std::atomic<int32_t> block_size_{0};  // from the replicas' summaries (one engine configuration)
  mutable std::mutex mu_;
  std::condition_variable idle_cv_;
  std::vector<Replica> replicas_;  // guarded by mu_
  int64_t in_flight_total_ = 0;    // guarded by mu_
  std::atomic<bool> polling_{false};
  std::thread poller_;
};

}  // namespace kvik::server
