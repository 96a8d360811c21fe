#include "server/response_stream.h"

namespace kvik::server {

namespace {
std::string sse(const nlohmann::json& j) { return "data: " + dump(j) + "\n\n"; }
}  // namespace

bool DeferredBody::drain(std::string& out) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!done_) return false;
  out += body_;
  return true;
}

int DeferredBody::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_ ? status_ : 0;
}

void DeferredBody::complete(int status, std::string body) {
  std::lock_guard<std::mutex> lock(mu_);
  status_ = status;
  body_ = std::move(body);
  done_ = true;
}

ResponseStream::ResponseStream(std::shared_ptr<GenerationJob> job, ResponseMeta meta, const Tokenizer& tok, bool stream,
                               bool include_usage)
    : job_(std::move(job)), meta_(std::move(meta)), tok_(tok), stream_(stream), include_usage_(include_usage) {
  const size_t n = job_->num_choices();
  results_.resize(stream_ ? 0 : n);
  sent_first_.assign(n, false);
  text_offset_.assign(n, 0);
  if (meta_.chat && meta_.output.any())
    for (size_t i = 0; i < n; ++i) parsers_.push_back(std::make_unique<ChatOutputParser>(meta_.output));
}

ChatDelta ResponseStream::parse(ChoiceDelta& d) {
  ChatOutputParser& p = *parsers_[d.index];
  ChatDelta out = p.push(d.text);
  if (d.finish_reason) {
    ChatDelta end = p.finish();
    out.reasoning += end.reasoning;
    out.content += end.content;
    for (ToolCallFragment& f : end.calls) out.calls.push_back(std::move(f));
    d.finish_reason = tool_finish_reason(*d.finish_reason, p.num_calls());
  }
  return out;
}

void ResponseStream::take_streamed(std::vector<ChoiceDelta>& deltas, std::string& out) {
  for (ChoiceDelta& d : deltas) {
    const bool first = !sent_first_[d.index];
    sent_first_[d.index] = true;
    if (!parsers_.empty()) {
      const ChatDelta p = parse(d);
      for (const nlohmann::json& c : parsed_chunks_json(meta_, tok_, d, p, first, include_usage_)) out += sse(c);
      continue;
    }
    out += sse(chunk_json(meta_, tok_, d, first, text_offset_[d.index], include_usage_));
    for (const auto& lp : d.logprobs) text_offset_[d.index] += tok_.token_to_piece(lp.token).size();
  }
}

bool ResponseStream::drain(std::string& out) {
  if (complete_) return true;
  std::vector<ChoiceDelta> deltas = job_->drain();
  if (ttft_s_ < 0 && !deltas.empty() && job_->usage().completion_tokens > 0)
    ttft_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  if (stream_) {
    take_streamed(deltas, out);
  } else {
    for (ChoiceDelta& d : deltas) {
      ChoiceResult& c = results_[d.index];
      if (!parsers_.empty()) {
        ChatDelta p = parse(d);
        c.text += p.content;
        c.reasoning += p.reasoning;
        append_fragments(c.tool_calls, p.calls);
      } else {
        c.text += d.text;
      }
      c.logprobs.insert(c.logprobs.end(), d.logprobs.begin(), d.logprobs.end());
      if (d.finish_reason) c.finish_reason = *d.finish_reason;
    }
  }
  if (!job_->done()) return false;
  complete_ = true;
  if (!stream_) {
    out += dump(response_json(meta_, tok_, results_, job_->usage()));
  } else {
    if (include_usage_) out += sse(usage_chunk_json(meta_, job_->usage()));
    out += "data: [DONE]\n\n";
  }
  return true;
}

}  // namespace kvik::server
