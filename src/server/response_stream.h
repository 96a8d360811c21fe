// The body of a generation response as the engine produces it, independent of the transport: SSE events
// (one per engine output of one choice, then the usage chunk and [DONE]) when streaming, or the whole
// completion object once every choice has finished. The HTTP session drains it whenever the engine says
// there is output, so no thread waits on a generation.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "server/generation.h"
#include "server/openai_responses.h"

namespace kvik::server {

class ResponseStream {
 public:
  ResponseStream(std::shared_ptr<GenerationJob> job, ResponseMeta meta, const Tokenizer& tok, bool stream,
                 bool include_usage);

  // Appends the wire text of every output queued so far to `out`. Returns true once the body is complete.
  bool drain(std::string& out);
  void abort() { job_->abort(); }
  bool streaming() const { return stream_; }
  const std::string& id() const { return meta_.id; }
  Usage usage() const { return job_->usage(); }
  // Seconds from the response's creation to its first generated token; < 0 before that.
  double ttft_s() const { return ttft_s_; }

 private:
  void take_streamed(std::vector<ChoiceDelta>& deltas, std::string& out);
  // With a parser: the delta's text through it (and its end on the last delta); finish_reason "tool_calls".
  ChatDelta parse(ChoiceDelta& d);

  std::shared_ptr<GenerationJob> job_;
  ResponseMeta meta_;
  const Tokenizer& tok_;
  bool stream_;
  bool include_usage_;
  bool complete_ = false;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  double ttft_s_ = -1;
  std::vector<ChoiceResult> results_;                       // non-streaming: accumulated per choice
  std::vector<bool> sent_first_;                            // streaming: the chat role goes on a choice's first chunk
  std::vector<size_t> text_offset_;                         // streaming: completions logprobs' text_offset
  std::vector<std::unique_ptr<ChatOutputParser>> parsers_;  // per choice, when meta_.output asks for parsing
};

}  // namespace kvik::server
