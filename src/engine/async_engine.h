// AsyncEngine: runs an EngineCore on its own thread (step() while there is work, otherwise sleep on a
// condition variable) and hands each request's outputs to the thread that asked for them through an
// OutputQueue, so HTTP handler threads can block or stream while the engine keeps stepping.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/engine_core.h"
#include "engine/engine_state.h"

namespace kvik {

// Outputs of one or more engine requests (the n choices of one HTTP request share a queue).
class OutputQueue {
 public:
  void push(RequestOutput out);
  // Waits up to `timeout` for the next output (zero: only what is already queued).
  std::optional<RequestOutput> pop(std::chrono::milliseconds timeout);
  // Called (on the pushing thread, no lock held) after every push: an event-driven consumer's wake-up.
  // Must be cheap and must not block; set it before the queue is handed to the engine.
  void set_on_push(std::function<void()> on_push) { on_push_ = std::move(on_push); }

 private:
  std::function<void()> on_push_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<RequestOutput> queue_;
};

class AsyncEngine {
 public:
  // Called on the engine thread after every step with that step's outputs (metrics hook).
  using StepObserver = std::function<void(const EngineCore&, const std::vector<RequestOutput>&)>;

  AsyncEngine(EngineCore& core, StepObserver observer = nullptr);
  ~AsyncEngine();  // shutdown()

  // Queues a request whose outputs go to `queue` (all n sequences' when params.n > 1; RequestOutput::index
  // says which). Returns nullopt or the engine's validation error.
  std::optional<ValidationError> add_request(const std::string& id, std::vector<int32_t> prompt_ids,
                                             const SamplingParams& params, std::shared_ptr<OutputQueue> queue);
  // Aborts a request, or one sequence of it (by its sequence_id); blocks are freed at the start of the next
  // step. `reason` is the finish_reason its final output carries ("abort"; the server passes "stop" when it
  // matched a stop string).
  void abort(const std::string& id, const std::string& reason = "abort");
  void abort_all();

  // Requests added but not yet scheduled: the engine's waiting queue after the last step plus adds since.
  int64_t num_waiting() const { return num_waiting_.load() + num_added_since_step_.load(); }
  int64_t num_in_flight() const;

  // Stops the engine thread after aborting whatever is still running. Idempotent.
  void shutdown();

  const EngineCore& core() const { return core_; }

  // The latest published EngineStateSnapshot (the first is taken when the engine thread starts). When it is older
  // than `max_age`, the engine thread is asked for a fresh one, which it takes after its current step (or at once
  // when idle) and publishes for the next caller: pollers never wait, any number of them cost at most one snapshot
  // per `max_age`, and nobody polling costs nothing.
  std::shared_ptr<const EngineStateSnapshot> state_snapshot(std::chrono::milliseconds max_age);
  // Runs `task` on the engine thread at the next step boundary (at once when idle): work that needs the model,
  // whose workspaces belong to the engine thread (the trace endpoint). Tasks run in order; keep them short.
  // False (the task dropped) once shutdown() has begun.
  bool run_between_steps(std::function<void(EngineCore&)> task);

 private:
  void loop();
  void run_tasks();
  void publish_state();

  EngineCore& core_;
  StepObserver observer_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool has_new_work_ = false;
  bool stop_ = false;
  struct Route {
    std::shared_ptr<OutputQueue> queue;
    std::vector<bool> finished;  // per sequence: final output delivered
    int32_t num_unfinished = 0;
  };
  std::unordered_map<std::string, Route> routes_;  // output queues by add_request's id
  std::atomic<int64_t> num_waiting_{0};
  std::atomic<int64_t> num_added_since_step_{0};
  std::vector<std::function<void(EngineCore&)>> tasks_;  // run_between_steps, guarded by mu_
  int64_t num_steps_ = 0;                                // engine thread only
  std::mutex state_mu_;
  std::shared_ptr<const EngineStateSnapshot> state_;  // guarded by state_mu_
  std::atomic<bool> state_wanted_{false};
  std::thread thread_;
};

}  // namespace kvik
