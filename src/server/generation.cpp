#include "server/generation.h"

#include <fmt/format.h>

namespace kvik::server {

std::string next_request_id() {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t salt = static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count());
  return fmt::format("{:x}{:06x}", salt & 0xffffffffffULL, counter++);
}

GenerationJob::GenerationJob(AsyncEngine& engine, const Tokenizer& tokenizer, std::vector<std::vector<int32_t>> prompts,
                             const SamplingParams& params, int32_t n, std::vector<std::string> stop,
                             bool skip_special_tokens)
    : engine_(engine), tokenizer_(tokenizer), prompts_(std::move(prompts)), params_(params), n_(n) {
  params_.n = n_;
  const std::string base = next_request_id();
  for (size_t p = 0; p < prompts_.size(); ++p) {
    prompt_ids_.push_back(fmt::format("{}-{}", base, p));
    for (int32_t i = 0; i < n_; ++i) {
      Choice c;
      c.request_id = sequence_id(prompt_ids_.back(), i, n_);
      c.prompt_index = p;
      c.detok = std::make_unique<StreamingDetokenizer>(tokenizer_, prompts_[p], skip_special_tokens);
      c.stop = std::make_unique<StopStringMatcher>(stop);
      choices_.push_back(std::move(c));
    }
  }
}

GenerationJob::~GenerationJob() { abort(); }

std::optional<ApiError> GenerationJob::start() {
  const int64_t max_num_seqs = engine_.core().config().max_num_seqs;
  if (n_ > max_num_seqs) {
    choices_.clear();
    return ApiError::bad_request(fmt::format("n is {}, but the server runs at most {} sequences at once "
                                             "(--max-num-seqs)",
                                             n_, max_num_seqs),
                                 "n");
  }
  // One engine request per prompt: its n choices are the engine's n sequences (one prefill, shared KV;
  // choice i samples with seed + i).
  for (size_t p = 0; p < prompts_.size(); ++p) {
    std::optional<ValidationError> err = engine_.add_request(prompt_ids_[p], prompts_[p], params_, queue_);
    if (err) {
      for (size_t q = 0; q < p; ++q) engine_.abort(prompt_ids_[q]);
      choices_.resize(p * static_cast<size_t>(n_));  // the destructor aborts only what was queued
      num_engine_finished_ = 0;
      return ApiError::bad_request(err->message, err->param);
    }
  }
  started_ = true;
  return std::nullopt;
}

void GenerationJob::abort() {
  if (!started_) return;
  for (const Choice& c : choices_)
    if (!c.engine_finished) engine_.abort(c.request_id);
}

std::vector<ChoiceDelta> GenerationJob::next(std::chrono::milliseconds timeout) {
  std::vector<ChoiceDelta> deltas;
  if (std::optional<RequestOutput> out = queue_->pop(timeout)) take(*out, deltas);
  return deltas;
}

std::vector<ChoiceDelta> GenerationJob::drain() {
  std::vector<ChoiceDelta> deltas;
  while (std::optional<RequestOutput> out = queue_->pop(std::chrono::milliseconds(0))) take(*out, deltas);
  return deltas;
}

void GenerationJob::take(RequestOutput& output, std::vector<ChoiceDelta>& deltas) {
  const RequestOutput* out = &output;
  size_t p = 0;
  while (p < prompt_ids_.size() && prompt_ids_[p] != out->parent_id) ++p;
  const size_t k = p * static_cast<size_t>(n_) + static_cast<size_t>(out->index);
  if (p == prompt_ids_.size() || out->index < 0 || k >= choices_.size()) return;
  Choice& c = choices_[k];
  if (out->finished && !c.engine_finished) {
    c.engine_finished = true;
    c.cached_tokens = out->stats.num_cached_tokens;
    ++num_engine_finished_;
  }
  if (c.finished) return;  // tokens past a stop string
  ChoiceDelta d;
  d.index = static_cast<int32_t>(k);
  for (size_t t = 0; t < out->new_token_ids.size() && !c.stop->stopped(); ++t) {
    ++c.num_tokens;
    ++d.num_tokens;
    if (t < out->logprobs.size()) d.logprobs.push_back(out->logprobs[t]);
    d.text += c.stop->push(c.detok->push(out->new_token_ids[t]));
  }
  if (c.stop->stopped()) {
    c.finished = true;
    d.finish_reason = "stop";
    if (!c.engine_finished) engine_.abort(c.request_id, "stop");
  } else if (out->finished) {
    d.text += c.stop->push(c.detok->flush());
    if (c.stop->stopped()) {
      d.finish_reason = "stop";
    } else {
      d.text += c.stop->flush();
      d.finish_reason = out->finish_reason;
    }
    c.finished = true;
  }
  deltas.push_back(std::move(d));
}

Usage GenerationJob::usage() const {
  Usage u;
  for (size_t p = 0; p < prompts_.size(); ++p) u.prompt_tokens += static_cast<int64_t>(prompts_[p].size());
  for (size_t k = 0; k < choices_.size(); ++k) {
    u.completion_tokens += choices_[k].num_tokens;
    if (k % static_cast<size_t>(n_) == 0) u.cached_tokens += choices_[k].cached_tokens;
  }
  return u;
}

}  // namespace kvik::server
