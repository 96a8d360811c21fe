#include "server/responses_stream.h"

#include "server/openai_responses.h"

namespace kvik::server {

using nlohmann::ordered_json;

ResponsesStream::ResponsesStream(std::shared_ptr<GenerationJob> job, ResponsesStreamOptions options)
    : job_(std::move(job)), options_(std::move(options)), parser_(options_.output) {}

void ResponsesStream::write(std::vector<ordered_json>& events, std::string& out) {
  for (ordered_json& e : events) {
    e["sequence_number"] = sequence_number_++;
    out += "event: " + e["type"].get<std::string>() + "\ndata: " + dump_ordered(e) + "\n\n";
  }
  events.clear();
}

ordered_json ResponsesStream::finish(const std::string& finish_reason) {
  // "length": max_output_tokens (or the context) cut the output; a stop string or EOS completes it; "abort": the
  // server shut down under it (OpenAI's failed response, with the error saying so).
  const std::string status = finish_reason == "length"  ? "incomplete"
                             : finish_reason == "abort" ? "failed"
                                                        : "completed";
  const Usage u = job_->usage();
  ordered_json response = response_object_json(options_.head, status, "max_output_tokens", items_.items(),
                                               responses_usage_json(u, reasoning_tokens_));
  if (status == "failed")
    response["error"] = {{"code", "server_error"},
                         {"message", "the generation was aborted: the server is shutting down"}};
  if (options_.store) {
    auto stored = std::make_shared<StoredResponse>();
    stored->response = response;
    stored->conversation = options_.conversation;
    stored->conversation.push_back(items_.as_message());
    stored->bytes = ResponseStore::size_of(*stored);
    options_.store->put(options_.store_key, options_.head.id, std::move(stored));
  }
  return response;
}

bool ResponsesStream::drain(std::string& out) {
  if (complete_) return true;
  std::vector<ordered_json> events;
  std::vector<ordered_json>* sink = options_.stream ? &events : nullptr;
  if (options_.stream && !started_) {
    const ordered_json head = response_object_json(options_.head, "in_progress", "", ordered_json::array(), nullptr);
    events.push_back({{"type", "response.created"}, {"response", head}});
    events.push_back({{"type", "response.in_progress"}, {"response", head}});
  }
  started_ = true;
  std::vector<ChoiceDelta> deltas = job_->drain();
  if (ttft_s_ < 0 && !deltas.empty() && job_->usage().completion_tokens > 0)
    ttft_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  for (ChoiceDelta& d : deltas) {
    ChatDelta p = parser_.push(d.text);
    if (d.finish_reason) {
      ChatDelta end = parser_.finish();
      p.reasoning += end.reasoning;
      p.content += end.content;
      for (ToolCallFragment& f : end.calls) p.calls.push_back(std::move(f));
      finish_reason_ = *d.finish_reason;
    }
    if (!p.reasoning.empty()) reasoning_tokens_ += d.num_tokens;  // the step's tokens went to the thinking
    items_.push(p, sink);
  }
  if (!job_->done()) {
    write(events, out);
    return false;
  }
  complete_ = true;
  items_.finish(finish_reason_ == "length", sink);
  ordered_json response = finish(finish_reason_);
  if (!options_.stream) {
    out += dump_ordered(response);
    return true;
  }
  const std::string status = response["status"].get<std::string>();
  events.push_back(
      {{"type", status == "completed" ? "response.completed" : "response." + status}, {"response", response}});
  write(events, out);
  return true;
}

}  // namespace kvik::server
