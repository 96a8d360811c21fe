// One HTTP generation request in flight: one engine request per prompt, each with n sequences (the
// choices: prompt prefilled once, KV shared), sharing one output queue. Each engine output (one per step
// per sequence) becomes a ChoiceDelta: new text after incremental detokenization and stop-string holdback,
// the tokens' logprobs, and the finish reason when it ends.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/async_engine.h"
#include "server/api_error.h"
#include "server/stop_strings.h"
#include "tokenizer/streaming_detokenizer.h"
#include "tokenizer/tokenizer.h"

namespace kvik::server {

struct ChoiceDelta {
  int32_t index = 0;
  std::string text;
  int32_t num_tokens = 0;  // the generated tokens the text came from
  std::vector<TokenLogprobs> logprobs;
  std::optional<std::string> finish_reason;
};

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;
};

class GenerationJob {
 public:
  // prompts: token ids of each prompt; choice index = prompt_index · n + i; choice i uses seed + i.
  // skip_special_tokens false: control tokens stay in the text (Mistral's [TOOL_CALLS] for its tool parser).
  GenerationJob(AsyncEngine& engine, const Tokenizer& tokenizer, std::vector<std::vector<int32_t>> prompts,
                const SamplingParams& params, int32_t n, std::vector<std::string> stop,
                bool skip_special_tokens = true);
  ~GenerationJob();  // aborts whatever is still running

  // Queues every choice in the engine. Returns an error (and queues nothing) when the engine refuses one.
  std::optional<ApiError> start();

  // Waits up to `timeout` for the next engine output and turns it into deltas (empty on timeout, or when the
  // output belonged to a choice that already ended on a stop string).
  std::vector<ChoiceDelta> next(std::chrono::milliseconds timeout);
  // Every output already queued, as deltas, without waiting (the event-driven server's read).
  std::vector<ChoiceDelta> drain();
  // Called on the engine thread after each output is queued; set before start().
  void set_on_output(std::function<void()> on_output) { queue_->set_on_push(std::move(on_output)); }
  bool done() const { return num_engine_finished_ == choices_.size(); }
  void abort();  // the client went away
  Usage usage() const;
  size_t num_choices() const { return choices_.size(); }

 private:
  void take(RequestOutput& out, std::vector<ChoiceDelta>& deltas);

  struct Choice {
    std::string request_id;  // the engine sequence's id
    size_t prompt_index = 0;
    std::unique_ptr<StreamingDetokenizer> detok;
    std::unique_ptr<StopStringMatcher> stop;
    bool finished = false;         // reported to the client
    bool engine_finished = false;  // final engine output received
    int64_t num_tokens = 0;        // completion tokens counted for usage
    int64_t cached_tokens = 0;
  };

  AsyncEngine& engine_;
  const Tokenizer& tokenizer_;
  std::vector<std::vector<int32_t>> prompts_;
  std::vector<std::string> prompt_ids_;  // engine request id of each prompt
  SamplingParams params_;
  int32_t n_;
  std::vector<Choice> choices_;
  std::shared_ptr<OutputQueue> queue_ = std::make_shared<OutputQueue>();
  size_t num_engine_finished_ = 0;
  bool started_ = false;
};

// A process-unique id suffix for responses and engine requests.
std::string next_request_id();

}  // namespace kvik::server
