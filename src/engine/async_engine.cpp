#include "engine/async_engine.h"

#include <algorithm>

namespace kvik {

void OutputQueue::push(RequestOutput out) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(out));
  }
  cv_.notify_all();
  if (on_push_) on_push_();
}

std::optional<RequestOutput> OutputQueue::pop(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return !queue_.empty(); })) return std::nullopt;
  RequestOutput out = std::move(queue_.front());
  queue_.pop_front();
  return out;
}

AsyncEngine::AsyncEngine(EngineCore& core, StepObserver observer) : core_(core), observer_(std::move(observer)) {
  thread_ = std::thread([this] { loop(); });
}

AsyncEngine::~AsyncEngine() { shutdown(); }

std::optional<ValidationError> AsyncEngine::add_request(const std::string& id, std::vector<int32_t> prompt_ids,
                                                        const SamplingParams& params,
                                                        std::shared_ptr<OutputQueue> queue) {
  const int32_t n = std::max(params.n, 1);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return ValidationError{"", "the server is shutting down"};
    if (routes_.count(id)) return ValidationError{"", "request id '" + id + "' is already in use"};
    routes_[id] = Route{queue, std::vector<bool>(static_cast<size_t>(n), false), n};
  }
  std::optional<ValidationError> err = core_.add_request(id, std::move(prompt_ids), params);
  std::lock_guard<std::mutex> lock(mu_);
  if (err) {
    routes_.erase(id);
    return err;
  }
  ++num_added_since_step_;
  has_new_work_ = true;
  cv_.notify_all();
  return std::nullopt;
}

void AsyncEngine::abort(const std::string& id, const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  core_.abort(id, reason);
  has_new_work_ = true;
  cv_.notify_all();
}

void AsyncEngine::abort_all() {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [id, route] : routes_) core_.abort(id);
  has_new_work_ = true;
  cv_.notify_all();
}

int64_t AsyncEngine::num_in_flight() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(routes_.size());
}

void AsyncEngine::shutdown() {
  abort_all();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!thread_.joinable()) return;
  }
  // Let the aborts go through one step so every queue gets its final output, then stop.
  {
    std::unique_lock<std::mutex> lock(mu_);
    stop_ = true;
    cv_.notify_all();
  }
  thread_.join();
}

std::shared_ptr<const EngineStateSnapshot> AsyncEngine::state_snapshot(std::chrono::milliseconds max_age) {
  std::shared_ptr<const EngineStateSnapshot> s;
  {
    std::lock_guard<std::mutex> lock(state_mu_);
    s = state_;
  }
  if ((!s || std::chrono::system_clock::now() - s->taken > max_age) && !state_wanted_.exchange(true)) {
    // Wake the engine thread: busy, it publishes after its current step; idle, it runs an empty step first.
    std::lock_guard<std::mutex> lock(mu_);
    has_new_work_ = true;
    cv_.notify_all();
  }
  return s;
}

bool AsyncEngine::run_between_steps(std::function<void(EngineCore&)> task) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stop_) return false;
  tasks_.push_back(std::move(task));
  has_new_work_ = true;
  cv_.notify_all();
  return true;
}

void AsyncEngine::run_tasks() {
  std::vector<std::function<void(EngineCore&)>> tasks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    tasks.swap(tasks_);
  }
  for (auto& task : tasks) task(core_);
}

void AsyncEngine::publish_state() {
  auto s = std::make_shared<EngineStateSnapshot>(take_state_snapshot(core_, num_steps_));
  std::lock_guard<std::mutex> lock(state_mu_);
  s->sequence = state_ ? state_->sequence + 1 : 1;
  state_ = std::move(s);
}

void AsyncEngine::loop() {
  publish_state();
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return has_new_work_ || stop_; });
      has_new_work_ = false;
    }
    // Run steps until the engine is idle; the engine drains adds and aborts at the start of each step.
    do {
      run_tasks();
      num_added_since_step_ = 0;
      std::vector<RequestOutput> outputs = core_.step();
      ++num_steps_;
      num_waiting_ = core_.scheduler().num_waiting();
      if (observer_) observer_(core_, outputs);
      if (state_wanted_.exchange(false)) publish_state();
      std::lock_guard<std::mutex> lock(mu_);
      for (RequestOutput& out : outputs) {
        auto it = routes_.find(out.parent_id);
        if (it == routes_.end()) continue;
        std::shared_ptr<OutputQueue> q = it->second.queue;
        if (out.finished) {
          Route& route = it->second;
          const size_t i = static_cast<size_t>(out.index);
          if (i < route.finished.size() && !route.finished[i]) {
            route.finished[i] = true;
            --route.num_unfinished;
          }
          if (route.num_unfinished == 0) routes_.erase(it);
        }
        q->push(std::move(out));
      }
    } while (core_.has_unfinished());
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_ && !has_new_work_) {
      // Whatever is left never reached the engine: finish it so no handler waits forever.
      for (auto& [id, route] : routes_) {
        const int32_t n = static_cast<int32_t>(route.finished.size());
        for (int32_t i = 0; i < n; ++i) {
          if (route.finished[static_cast<size_t>(i)]) continue;
          RequestOutput out;
          out.request_id = sequence_id(id, i, n);
          out.parent_id = id;
          out.index = i;
          out.finished = true;
          out.finish_reason = "abort";
          route.queue->push(std::move(out));
        }
      }
      routes_.clear();
      return;
    }
  }
}

}  // namespace kvik
