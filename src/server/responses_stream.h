// The body of a POST /v1/responses reply as the engine produces it: the typed SSE events (response.created,
// response.in_progress, the output items' events of responses_output.h, then response.completed — or
// response.incomplete when max_output_tokens cut the output, response.failed when the server aborted it —, each with
// its sequence_number) when streaming, or the
// whole Response object once the generation ends. A finished response with `store` goes into the ResponseStore
// (for GET /v1/responses/{id} and previous_response_id) with its conversation.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "server/chat_output.h"
#include "server/generation.h"
#include "server/response_store.h"
#include "server/response_stream.h"
#include "server/responses_output.h"

namespace kvik::server {

struct ResponsesStreamOptions {
  ResponseHead head;
  ChatOutputOptions output;  // how the choice's text splits into reasoning, content and calls
  bool stream = false;
  // Where a finished response is stored (null: `store` false), under which API key, with which conversation before
  // its output (the previous response's and this request's input, without instructions).
  std::shared_ptr<ResponseStore> store;
  std::string store_key;
  std::vector<ChatMessage> conversation;
};

class ResponsesStream : public ReplyBody {
 public:
  ResponsesStream(std::shared_ptr<GenerationJob> job, ResponsesStreamOptions options);

  bool drain(std::string& out) override;
  void abort() override { job_->abort(); }
  bool streaming() const override { return options_.stream; }
  std::string id() const override { return options_.head.id; }
  Usage usage() const override { return job_->usage(); }
  double ttft_s() const override { return ttft_s_; }

 private:
  void write(std::vector<nlohmann::ordered_json>& events, std::string& out);
  // The finished response object; stores it when asked.
  nlohmann::ordered_json finish(const std::string& finish_reason);

  std::shared_ptr<GenerationJob> job_;
  ResponsesStreamOptions options_;
  ChatOutputParser parser_;
  ResponseItems items_;
  int64_t sequence_number_ = 0;
  int64_t reasoning_tokens_ = 0;
  bool started_ = false;
  bool complete_ = false;
  std::string finish_reason_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  double ttft_s_ = -1;
};

}  // namespace kvik::server
