#include "engine/async_engine.h"

namespace kvik {

void OutputQueue::push(RequestOutput out) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(out));
  }
  cv_.notify_all();
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

std::string AsyncEngine::add_request(const std::string& id, std::vector<int32_t> prompt_ids,
                                     const SamplingParams& params, std::shared_ptr<OutputQueue> queue) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return "the server is shutting down";
    if (queues_.count(id)) return "request id '" + id + "' is already in use";
    queues_[id] = queue;
  }
  std::string err = core_.add_request(id, std::move(prompt_ids), params);
  std::lock_guard<std::mutex> lock(mu_);
  if (!err.empty()) {
    queues_.erase(id);
    return err;
  }
  ++num_added_since_step_;
  has_new_work_ = true;
  cv_.notify_all();
  return "";
}

void AsyncEngine::abort(const std::string& id, const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!queues_.count(id)) return;
  abort_reasons_.emplace(id, reason);
  core_.abort(id);
  has_new_work_ = true;
  cv_.notify_all();
}

void AsyncEngine::abort_all() {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [id, q] : queues_) {
    abort_reasons_.emplace(id, "abort");
    core_.abort(id);
  }
  has_new_work_ = true;
  cv_.notify_all();
}

int64_t AsyncEngine::num_in_flight() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(queues_.size());
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

void AsyncEngine::loop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return has_new_work_ || stop_; });
      has_new_work_ = false;
    }
    // Run steps until the engine is idle; the engine drains adds and aborts at the start of each step.
    do {
      num_added_since_step_ = 0;
      std::vector<RequestOutput> outputs = core_.step();
      num_waiting_ = core_.scheduler().num_waiting();
      {
        std::lock_guard<std::mutex> lock(mu_);
        for (RequestOutput& out : outputs) {
          if (!out.finished) continue;
          if (auto r = abort_reasons_.find(out.request_id); r != abort_reasons_.end()) {
            if (out.finish_reason == "abort") out.finish_reason = r->second;
            abort_reasons_.erase(r);
          }
        }
      }
      if (observer_) observer_(core_, outputs);
      std::lock_guard<std::mutex> lock(mu_);
      for (RequestOutput& out : outputs) {
        auto it = queues_.find(out.request_id);
        if (it == queues_.end()) continue;
        std::shared_ptr<OutputQueue> q = it->second;
        if (out.finished) queues_.erase(it);
        q->push(std::move(out));
      }
    } while (core_.has_unfinished());
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_ && !has_new_work_) {
      // Whatever is left never reached the engine: finish it so no handler waits forever.
      for (auto& [id, q] : queues_) {
        RequestOutput out;
        out.request_id = id;
        out.finished = true;
        out.finish_reason = "abort";
        q->push(std::move(out));
      }
      queues_.clear();
      return;
    }
  }
}

}  // namespace kvik
