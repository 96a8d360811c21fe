#include "cli/serve_data_parallel.h"

#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <iterator>
#include <random>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "engine/block_hash.h"
#include "server/dp_router.h"
#include "server/dp_upstream.h"
#include "server/http_server.h"

namespace kvik::cli {

namespace {

// The front's own arguments without those it sets per replica (their values too, in either spelling).
std::vector<std::string> replica_args(int port, int32_t threads) {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> argv;
  for (size_t at = 0; at < all.size();) {
    const size_t end = all.find('\0', at);
    argv.push_back(all.substr(at, end - at));
    at = end == std::string::npos ? all.size() : end + 1;
  }
  // TLS ends at the front; the replicas' own headers (CORS) are not forwarded.
  const std::vector<std::string> replaced = {
      "--data-parallel-size", "--dp", "--host", "--port", "--threads", "-t", "--ssl-keyfile", "--ssl-certfile"};
  std::vector<std::string> out;
  for (size_t i = 1; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    bool drop = false, with_value = false;
    for (const std::string& r : replaced) {
      drop |= a == r || a.rfind(r + "=", 0) == 0;
      with_value |= a == r;
    }
    if (!drop) out.push_back(a);
    if (with_value) ++i;
  }
  for (const std::string& a :
       {std::string("--host"), std::string("127.0.0.1"), std::string("--port"), std::to_string(port),
        std::string("--threads"), std::to_string(threads), std::string("--disable-log-requests")})
    out.push_back(a);
  return out;
}

int free_local_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0)
    fail("data parallel: no free loopback port for a replica");
  ::close(fd);
  return ntohs(a.sin_port);
}

// fork + exec of this binary as one replica; it gets SIGTERM when the front's main thread ends.
server::ReplicaProcess spawn_replica(int index, int32_t threads) {
  const int port = free_local_port();
  const std::vector<std::string> args = replica_args(port, threads);
  std::vector<char*> argv = {const_cast<char*>("kvik")};
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t front = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) fail("data parallel: fork failed for replica {}", index);
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != front) ::_exit(1);  // the front died before prctl
    ::execv("/proc/self/exe", argv.data());
    ::_exit(127);
  }
  log_info("data parallel: replica {} is pid {} on 127.0.0.1:{} (--threads {})", index, pid, port, threads);
  return {pid, port};
}

// Until every replica answers /health 200; fails when one exits first (or a signal stops the front).
void wait_healthy(const std::vector<server::ReplicaProcess>& replicas, const std::atomic<bool>& stopping) {
  std::vector<bool> healthy(replicas.size(), false);
  for (size_t n = 0; n < replicas.size();) {
    for (size_t i = 0; i < replicas.size(); ++i) {
      if (healthy[i]) continue;
      int status = 0;
      if (::waitpid(replicas[i].pid, &status, WNOHANG) == replicas[i].pid)
        fail("data parallel: replica {} (pid {}) exited while loading the model (see its log above)", i,
             replicas[i].pid);
      try {
        if (server::upstream_get(replicas[i].port, "/health", "", 2).status == 200) {
          healthy[i] = true;
          ++n;
        }
      } catch (const Error&) {
        // not listening yet
      }
    }
    if (stopping) fail("data parallel: stopped while the replicas were loading");
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

// SIGTERM to every replica still running, SIGKILL after the grace period, and reaped.
void stop_replicas(const std::vector<pid_t>& pids, double grace_s) {
  for (pid_t p : pids) ::kill(p, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(grace_s + 2);
  for (pid_t p : pids) {
    int status = 0;
    while (::waitpid(p, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        log_warn("data parallel: replica pid {} did not stop within the grace period: killed", p);
        ::kill(p, SIGKILL);
        ::waitpid(p, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
}

std::vector<server::ReplicaProcess> spawn_replicas(const DataParallelOptions& o) {
  const int32_t cores = o.num_threads > 0 ? o.num_threads : static_cast<int32_t>(std::thread::hardware_concurrency());
  const int32_t threads = std::max<int32_t>(1, cores / static_cast<int32_t>(o.size));
  // One secret seed for the front and its replicas: the front hashes prompts as the replicas' engines do.
  const uint64_t seed = (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
  set_block_hash_seed(seed);
  ::setenv(kBlockHashSeedEnv, std::to_string(seed).c_str(), 1);
  std::vector<server::ReplicaProcess> replicas;
  for (int i = 0; i < o.size; ++i) replicas.push_back(spawn_replica(i, threads));
  ::unsetenv(kBlockHashSeedEnv);
  return replicas;
}

// The replicas up and answering, the tokenizer loaded: routing starts.
void serve_front(const DataParallelOptions& o, server::DataParallelRouter& router,
                 const std::vector<server::ReplicaProcess>& replicas, const std::atomic<bool>& stopping) {
  auto tok = load_tokenizer(o.model);
  if (!o.chat_template.empty()) tok->set_chat_template(o.chat_template);
  wait_healthy(replicas, stopping);
  router.set_ready(std::move(tok));
  router.start();
  log_info("data parallel: {} replicas ready behind {}:{}", replicas.size(), o.server.host, o.server.port);
}

}  // namespace

void adopt_block_hash_seed() {
  const char* s = std::getenv(kBlockHashSeedEnv);
  if (!s) return;
  try {
    set_block_hash_seed(std::stoull(s));
  } catch (const std::exception&) {
    fail("{}='{}': not a number (it is set by kvik serve --data-parallel-size for its replicas)", kBlockHashSeedEnv, s);
  }
  ::unsetenv(kBlockHashSeedEnv);
}

int serve_data_parallel(DataParallelOptions o) {
  // Signals go to one thread that waits for them; every thread started below (and every replica) inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  const std::vector<server::ReplicaProcess> replicas = spawn_replicas(o);
  server::DataParallelRouter router(o.server, replicas);
  server::HttpServer http(o.server);
  http.router().set_handler([&router](const server::HttpRequest& req, std::function<void()> wake) {
    return router.handle(req, std::move(wake));
  });
  o.server.port = http.bind();  // --port 0: the port the kernel chose
  std::atomic<bool> stopping{false};
  std::thread listener([&] { http.listen(); });
  log_info("Listening on {}:{} with {} data-parallel replicas (/health answers 503 until they are ready)",
           o.server.host, o.server.port, o.size);
  std::thread signal_thread([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    if (stopping.exchange(true)) return;
    log_info("{}: shutting down the front and its replicas (in-flight requests get {} s)",
             sig == SIGINT ? "SIGINT" : "SIGTERM", o.shutdown_grace_s);
    http.stop();
    for (pid_t p : router.live_pids()) ::kill(p, SIGTERM);  // they finish their requests, then exit
  });
  std::exception_ptr failed;  // rethrown once the replicas are stopped: main prints it
  try {
    serve_front(o, router, replicas, stopping);
  } catch (const Error&) {
    failed = std::current_exception();
    if (!stopping.exchange(true)) http.stop();
  }
  listener.join();
  stopping = true;
  pthread_kill(signal_thread.native_handle(), SIGTERM);  // wakes sigwait when no signal came
  signal_thread.join();
  router.stop_polling();
  std::vector<pid_t> pids;
  for (const auto& r : replicas) pids.push_back(r.pid);
  stop_replicas(failed ? pids : router.live_pids(), o.shutdown_grace_s);
  router.wait_idle();
  if (failed) std::rethrow_exception(failed);
  log_info("Shut down cleanly");
  return 0;
}

}  // namespace kvik::cli
