#include "server/dp_router.h"

#include <signal.h>
#include <string.h>
#include <sys/wait.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/log.h"
#include "engine/block_hash.h"
#include "server/dp_metrics.h"
#include "server/dp_upstream.h"
#include "server/openai_responses.h"

namespace kvik::server {

using nlohmann::json;

namespace {

constexpr auto kPollInterval = std::chrono::milliseconds(100);
// How long a routed prompt's blocks count as held by its replica without its summary showing them (they may wait
// in its queue before their prefill).
constexpr auto kRecentTtl = std::chrono::seconds(10);
constexpr double kUpstreamTimeoutS = 2;

std::string path_of(const std::string& target) { return target.substr(0, target.find('?')); }

HttpReply json_reply(int status, const json& body) {
  HttpReply r;
  r.status = status;
  r.body = dump(body);
  return r;
}

}  // namespace

RouteChoice choose_replica(const std::vector<ReplicaLoad>& replicas, int64_t balance_threshold) {
  int least = -1, best = -1;
  auto less_loaded = [&](int a, int b) {
    const ReplicaLoad &x = replicas[a], &y = replicas[b];
    return x.in_flight != y.in_flight ? x.in_flight < y.in_flight : x.routed < y.routed;
  };
  for (int i = 0; i < static_cast<int>(replicas.size()); ++i) {
    const ReplicaLoad& r = replicas[i];
    if (!r.up) continue;
    if (least < 0 || less_loaded(i, least)) least = i;
    if (r.matched_blocks > 0 && (best < 0 || r.matched_blocks > replicas[best].matched_blocks ||
                                 (r.matched_blocks == replicas[best].matched_blocks && less_loaded(i, best))))
      best = i;
  }
  if (best >= 0 && replicas[best].in_flight - replicas[least].in_flight <= balance_threshold) return {best, true};
  return {least, false};
}

DataParallelRouter::DataParallelRouter(const ServerConfig& config, std::vector<ReplicaProcess> replicas)
    : config_(config) {
  replicas_.resize(replicas.size());
  for (size_t i = 0; i < replicas.size(); ++i) replicas_[i].process = replicas[i];
}

DataParallelRouter::~DataParallelRouter() {
  stop_polling();
  wait_idle();
}

void DataParallelRouter::set_ready(std::unique_ptr<Tokenizer> tok) {
  tok_ = std::move(tok);
  ready_ = true;
}

void DataParallelRouter::start() {
  polling_ = true;
  poller_ = std::thread([this] { poll_loop(); });
}

void DataParallelRouter::stop_polling() {
  polling_ = false;
  if (poller_.joinable()) poller_.join();
}

void DataParallelRouter::wait_idle() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_cv_.wait(lock, [this] { return in_flight_total_ == 0; });
}

std::vector<pid_t> DataParallelRouter::live_pids() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<pid_t> pids;
  for (const Replica& r : replicas_)
    if (r.up) pids.push_back(r.process.pid);
  return pids;
}

bool DataParallelRouter::authorized(const HttpRequest& req) const {
  if (config_.api_key.empty()) return true;
  const std::string expected = "Bearer " + config_.api_key;
  if (req.authorization.size() != expected.size()) return false;
  unsigned char diff = 0;  // constant time
  for (size_t i = 0; i < expected.size(); ++i) diff |= static_cast<unsigned char>(req.authorization[i] ^ expected[i]);
  return diff == 0;
}

HttpReply DataParallelRouter::handle(const HttpRequest& req, std::function<void()> wake) {
  const std::string path = path_of(req.target);
  const bool get = req.method == "GET" || req.method == "HEAD", post = req.method == "POST";
  if (get && path == "/health") {
    if (!ready_) return Router::error({503, "the replicas are still loading the model", "", ""});
    if (live_pids().empty()) return Router::error({503, "no data-parallel replica is running", "", ""});
    HttpReply r;
    r.content_type = "text/plain";
    return r;
  }
  if (get && path == "/metrics") return metrics();
  if (!ready_) return Router::error({503, "the replicas are still loading the model", "", ""});
  if (get && path == "/v1/dp/replicas") {
    if (!authorized(req)) return Router::error({401, "missing or invalid API key", "", ""});
    return replicas_json();
  }
  if (post && path == "/v1/dp/route") {
    if (!authorized(req)) return Router::error({401, "missing or invalid API key", "", ""});
    auto parsed = parse_json_object(req.body);
    if (auto* e = std::get_if<ApiError>(&parsed)) return Router::error(*e);
    return explain_route(req, std::get<json>(parsed).contains("messages"));  // a chat request, else a completion
  }
  if (path == "/v1/load_lora_adapter" || path == "/v1/unload_lora_adapter")
    return Router::error(ApiError::bad_request(
        "loading adapters at run time is not supported with --data-parallel-size: give them with --lora-modules"));
  return proxy(req, std::move(wake), post && (path == "/v1/completions" || path == "/v1/chat/completions"));
}

std::vector<uint64_t> DataParallelRouter::prompt_hashes(const HttpRequest& req, bool chat) const {
  const int32_t block_size = block_size_;
  if (block_size <= 0) return {};
  const auto ids = routing_prompt_ids(*tok_, config_, chat, req.body);
  if (!ids) return {};
  std::vector<BlockHash> hashes;
  extend_block_hashes(hashes, *ids, block_size);  // no extra keys: requests with any are not routed by prefix
  std::vector<uint64_t> lo;
  for (const BlockHash& h : hashes) lo.push_back(h.lo);
  return lo;
}

int64_t DataParallelRouter::matched_blocks(const Replica& r, const std::vector<uint64_t>& hashes, bool summary_only) {
  int64_t n = 0;
  for (uint64_t h : hashes) {
    if (!r.cached.count(h) && (summary_only || !r.recent.count(h))) break;
    ++n;
  }
  return n;
}

std::vector<ReplicaLoad> DataParallelRouter::loads(const std::vector<uint64_t>& hashes) const {
  std::vector<ReplicaLoad> v;
  for (const Replica& r : replicas_)
    v.push_back({r.up && r.reachable, r.in_flight, r.routed_prefix + r.routed_load, matched_blocks(r, hashes)});
  return v;
}

HttpReply DataParallelRouter::explain_route(const HttpRequest& req, bool chat) const {
  const std::vector<uint64_t> hashes = prompt_hashes(req, chat);
  std::lock_guard<std::mutex> lock(mu_);
  const RouteChoice choice = choose_replica(loads(hashes));
  json per = json::array();
  for (size_t i = 0; i < replicas_.size(); ++i)
    per.push_back({{"replica", i},
                   {"up", replicas_[i].up},
                   {"in_flight", replicas_[i].in_flight},
                   {"matched_blocks", matched_blocks(replicas_[i], hashes)},
                   {"matched_summary_blocks", matched_blocks(replicas_[i], hashes, true)}});
  return json_reply(200, {{"replica", choice.replica},
                          {"by_prefix", choice.by_prefix},
                          {"prompt_blocks", hashes.size()},
                          {"block_size", block_size_.load()},
                          {"replicas", per}});
}

HttpReply DataParallelRouter::proxy(const HttpRequest& req, std::function<void()> wake, bool generation) {
  const std::vector<uint64_t> hashes =
      generation ? prompt_hashes(req, path_of(req.target) == "/v1/chat/completions") : std::vector<uint64_t>{};
  std::unique_lock<std::mutex> lock(mu_);
  const RouteChoice choice = choose_replica(loads(hashes));
  if (choice.replica < 0) return Router::error({503, "no data-parallel replica is running", "", ""});
  const auto index = static_cast<size_t>(choice.replica);
  Replica& r = replicas_[index];
  ++(choice.by_prefix ? r.routed_prefix : r.routed_load);
  ++r.in_flight;
  ++in_flight_total_;
  const auto now = std::chrono::steady_clock::now();
  for (uint64_t h : hashes) r.recent[h] = now;
  ProxyTarget first = target(index);
  lock.unlock();

  ProxyHooks hooks;
  hooks.retarget = [this](size_t refused) { return retarget(refused); };
  hooks.done = [this](size_t replica, bool ok) { proxy_done(replica, ok); };
  auto body = std::make_shared<ProxyBody>(std::move(first), std::move(wake), std::move(hooks));
  body->start(req);
  HttpReply reply;
  reply.stream = body;
  return reply;
}

ProxyTarget DataParallelRouter::target(size_t replica) const {
  const ReplicaProcess& p = replicas_[replica].process;
  return {replica, p.port, fmt::format("data-parallel replica {} (pid {}, port {})", replica, p.pid, p.port)};
}

std::optional<ProxyTarget> DataParallelRouter::retarget(size_t refused) {
  std::lock_guard<std::mutex> lock(mu_);
  Replica& from = replicas_[refused];
  from.reachable = false;
  const RouteChoice choice = choose_replica(loads({}));
  if (choice.replica < 0) return std::nullopt;
  const auto index = static_cast<size_t>(choice.replica);
  --from.in_flight;
  ++from.rerouted;
  ++replicas_[index].in_flight;
  ++replicas_[index].routed_load;
  log_warn("data parallel: replica {} (pid {}, port {}) refused a connection: request moved to replica {}", refused,
           from.process.pid, from.process.port, index);
  return target(index);
}

void DataParallelRouter::proxy_done(size_t replica, bool ok) {
  std::lock_guard<std::mutex> lock(mu_);
  Replica& r = replicas_[replica];
  --r.in_flight;
  if (!ok) ++r.failed;
  if (--in_flight_total_ == 0) idle_cv_.notify_all();
}

void DataParallelRouter::poll_loop() {
  while (polling_) {
    reap();
    for (size_t i = 0; i < replicas_.size() && polling_; ++i) poll_summary(i);
    std::this_thread::sleep_for(kPollInterval);
  }
}

void DataParallelRouter::poll_summary(size_t i) {
  int port = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!replicas_[i].up) return;
    port = replicas_[i].process.port;
  }
  std::unordered_set<uint64_t> cached;
  try {
    const std::string auth = config_.api_key.empty() ? "" : "Bearer " + config_.api_key;
    const UpstreamReply r = upstream_get(port, "/v1/engine/prefix_summary", auth, kUpstreamTimeoutS);
    if (r.status != 200) return;  // the engine has not published a snapshot yet
    const json summary = json::parse(r.body);
    for (const auto& h : summary.at("hashes")) cached.insert(std::stoull(h.get<std::string>(), nullptr, 16));
    block_size_ = summary.at("block_size").get<int32_t>();
  } catch (const std::exception&) {
    return;  // a replica that went away is reaped; one that is slow keeps its last summary
  }
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lock(mu_);
  Replica& r = replicas_[i];
  r.reachable = true;
  r.cached = std::move(cached);
  std::erase_if(r.recent, [&](const auto& e) { return r.cached.count(e.first) || now - e.second > kRecentTtl; });
}

void DataParallelRouter::reap() {
  std::lock_guard<std::mutex> lock(mu_);
  int alive = 0;
  for (const Replica& r : replicas_) alive += r.up;
  for (size_t i = 0; i < replicas_.size(); ++i) {
    Replica& r = replicas_[i];
    int status = 0;
    if (!r.up || ::waitpid(r.process.pid, &status, WNOHANG) != r.process.pid) continue;
    r.up = false;
    r.cached.clear();
    r.recent.clear();
    const std::string how = WIFSIGNALED(status) ? fmt::format("was killed by signal {} ({})", WTERMSIG(status),
                                                              ::strsignal(WTERMSIG(status)))
                                                : fmt::format("exited with status {}", WEXITSTATUS(status));
    --alive;
    log_warn(
        "data parallel: replica {} (pid {}, port {}) {}: its requests in flight end in errors; {} of {} replicas "
        "serve on",
        i, r.process.pid, r.process.port, how, alive, replicas_.size());
  }
}

HttpReply DataParallelRouter::metrics() const {
  std::vector<int> ports;  // 0 for a replica that is down
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Replica& r : replicas_) ports.push_back(r.up ? r.process.port : 0);
  }
  std::vector<std::string> texts(ports.size());
  for (size_t i = 0; i < ports.size(); ++i) {
    if (ports[i] == 0) continue;
    try {
      UpstreamReply r = upstream_get(ports[i], "/metrics", "", kUpstreamTimeoutS);
      if (r.status == 200) texts[i] = std::move(r.body);
    } catch (const std::exception&) {
      // a replica that does not answer has no samples this time
    }
  }
  std::string out = merge_replica_metrics(texts);
  std::lock_guard<std::mutex> lock(mu_);
  auto header = [&](const char* name, const char* type, const char* help) {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  };
  header("kvik_dp_replica_up", "gauge", "Whether the data-parallel replica's process runs (1) or ended (0).");
  for (size_t i = 0; i < replicas_.size(); ++i)
    out += fmt::format("kvik_dp_replica_up{{replica=\"{}\"}} {}\n", i, replicas_[i].up ? 1 : 0);
  header("kvik_dp_requests_routed_total", "counter",
         "Requests routed to each replica: by its cached prefix, or by load (no replica held a prefix block).");
  for (size_t i = 0; i < replicas_.size(); ++i)
    out += fmt::format(
        "kvik_dp_requests_routed_total{{replica=\"{}\",reason=\"prefix\"}} {}\n"
        "kvik_dp_requests_routed_total{{replica=\"{}\",reason=\"load\"}} {}\n",
        i, replicas_[i].routed_prefix, i, replicas_[i].routed_load);
  header("kvik_dp_requests_in_flight", "gauge", "Requests proxied to each replica and not finished.");
  for (size_t i = 0; i < replicas_.size(); ++i)
    out += fmt::format("kvik_dp_requests_in_flight{{replica=\"{}\"}} {}\n", i, replicas_[i].in_flight);
  header("kvik_dp_requests_rerouted_total", "counter",
         "Requests moved from each replica to another because it refused the connection (nothing had been sent).");
  for (size_t i = 0; i < replicas_.size(); ++i)
    out += fmt::format("kvik_dp_requests_rerouted_total{{replica=\"{}\"}} {}\n", i, replicas_[i].rerouted);
  header("kvik_dp_requests_failed_total", "counter",
         "Requests whose replica refused or dropped the connection (its process ended).");
  for (size_t i = 0; i < replicas_.size(); ++i)
    out += fmt::format("kvik_dp_requests_failed_total{{replica=\"{}\"}} {}\n", i, replicas_[i].failed);
  HttpReply reply;
  reply.content_type = "text/plain; version=0.0.4; charset=utf-8";
  reply.body = std::move(out);
  return reply;
}

HttpReply DataParallelRouter::replicas_json() const {
  std::lock_guard<std::mutex> lock(mu_);
  json data = json::array();
  for (size_t i = 0; i < replicas_.size(); ++i) {
    const Replica& r = replicas_[i];
    data.push_back({{"replica", i},
                    {"pid", r.process.pid},
                    {"port", r.process.port},
                    {"up", r.up},
                    {"reachable", r.reachable},
                    {"in_flight", r.in_flight},
                    {"routed_prefix", r.routed_prefix},
                    {"routed_load", r.routed_load},
                    {"failed", r.failed},
                    {"rerouted", r.rerouted},
                    {"cached_blocks", r.cached.size()}});
  }
  return json_reply(200, {{"object", "list"}, {"data", data}});
}

}  // namespace kvik::server
