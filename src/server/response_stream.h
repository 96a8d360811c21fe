// The body of a generation response as the engine produces it, independent of the transport: SSE events
// (one per engine output of one choice, then the usage chunk and [DONE]) when streaming, or the whole
// completion object once every choice has finished. The HTTP session drains it whenever the engine says
// there is output, so no thread waits on a generation.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "server/generation.h"
#include "server/openai_responses.h"

namespace kvik::server {

// A reply body that another thread completes (the engine's output, or work run between its steps): the HTTP
// session drains it each time the router's wake-up callback fires, so no I/O thread waits.
class ReplyBody {
 public:
  virtual ~ReplyBody() = default;
  // Appends what is ready to `out`. Returns true once the body is complete.
  virtual bool drain(std::string& out) = 0;
  virtual void abort() = 0;  // the client is gone
  // Whether the body is a chunked stream. A body may say so only once it knows (a proxied reply, after the upstream
  // head): the session writes the head when it first sees true, with status() and content_type().
  virtual bool streaming() const { return false; }
  // The HTTP status of a whole (non-streamed) body once complete, or of a stream that began late; 0 keeps the reply's.
  virtual int status() const { return 0; }
  // Likewise its Content-Type; "" keeps the reply's.
  virtual std::string content_type() const { return ""; }
  // Headers settled with them, added to the reply's.
  virtual std::vector<std::pair<std::string, std::string>> headers() const { return {}; }
  // For the access log: the generation's id ("" for other bodies), its token counts and time to first token.
  virtual std::string id() const { return ""; }
  virtual Usage usage() const { return {}; }
  virtual double ttft_s() const { return -1; }
};

// A whole body computed elsewhere: complete() sets it once, from any thread.
class DeferredBody : public ReplyBody {
 public:
  bool drain(std::string& out) override;
  void abort() override {}
  int status() const override;
  void complete(int status, std::string body);

 private:
  mutable std::mutex mu_;
  bool done_ = false;
  int status_ = 0;
  std::string body_;
};

class ResponseStream : public ReplyBody {
 public:
  ResponseStream(std::shared_ptr<GenerationJob> job, ResponseMeta meta, const Tokenizer& tok, bool stream,
                 bool include_usage);

  // Appends the wire text of every output queued so far to `out`. Returns true once the body is complete.
  bool drain(std::string& out) override;
  void abort() override { job_->abort(); }
  bool streaming() const override { return stream_; }
  std::string id() const override { return meta_.id; }
  Usage usage() const override { return job_->usage(); }
  // Seconds from the response's creation to its first generated token; < 0 before that.
  double ttft_s() const override { return ttft_s_; }

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
