#include "engine/engine_core.h"

#include <unistd.h>

#include <algorithm>
#include <limits>
#include <random>

#include "core/error.h"
#include "core/log.h"
#include "core/thread_pool.h"
#include "engine/sampler.h"

namespace kvik {

int64_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : (int64_t{8} << 30);
}

namespace {

KvCapacity size_kv_pool(const ModelConfig& mc, const EngineConfig& c, int64_t weight_bytes) {
  KvCapacity k;
  k.bytes_per_token = KvCacheTensors::bytes_per_token(mc, c.kv_cache_dtype);
  const int64_t block_bytes = k.bytes_per_token * c.block_size;
  const int64_t blocks_per_seq = (c.max_model_len + c.block_size - 1) / c.block_size;
  if (c.num_kv_blocks > 0) {
    k.num_blocks = c.num_kv_blocks;
  } else if (c.kv_cache_memory_gib > 0) {
    k.num_blocks = static_cast<int64_t>(c.kv_cache_memory_gib * static_cast<double>(int64_t{1} << 30)) / block_bytes;
  } else {
    // Like vLLM's --gpu-memory-utilization: a fraction of RAM, less the weights, becomes KV blocks; here no
    // more than max_num_seqs full-length sequences need, since host RAM is shared with everything else.
    const double budget = c.memory_utilization * static_cast<double>(physical_memory_bytes()) - weight_bytes;
    k.num_blocks = std::min<int64_t>(static_cast<int64_t>(std::max(0.0, budget)) / block_bytes,
                                     c.max_num_seqs * blocks_per_seq);
  }
  k.tokens = k.num_blocks * c.block_size;
  k.gib = static_cast<double>(k.num_blocks * block_bytes) / static_cast<double>(int64_t{1} << 30);
  k.max_concurrency = static_cast<double>(k.tokens) / static_cast<double>(c.max_model_len);
  if (k.num_blocks < blocks_per_seq)
    fail("the KV cache holds {} tokens ({:.3f} GiB at {} bytes per token), fewer than one sequence of max_model_len "
         "{} needs: increase --kv-cache-memory (or --memory-utilization) or lower --max-model-len",
         k.tokens, k.gib, k.bytes_per_token, c.max_model_len);
  return k;
}

}  // namespace

EngineCore::EngineCore(LlamaModel& model, const EngineConfig& config, std::vector<int32_t> eos_token_ids)
    : model_(model), config_(config), eos_token_ids_(std::move(eos_token_ids)), seed_counter_(std::random_device{}()) {
  const ModelConfig& mc = model.config();
  if (config_.max_model_len <= 0) config_.max_model_len = mc.context_length;
  if (config_.max_model_len > mc.context_length)
    fail("--max-model-len {} is larger than the model's context length {}", config_.max_model_len, mc.context_length);
  if (config_.block_size <= 0 || config_.block_size > 1024) fail("--block-size must be in 1..1024, got {}", config_.block_size);
  if (config_.max_num_seqs <= 0) fail("--max-num-seqs must be positive, got {}", config_.max_num_seqs);
  if (config_.max_num_batched_tokens <= 0)
    fail("--max-num-batched-tokens must be positive, got {}", config_.max_num_batched_tokens);
  if (config_.memory_utilization <= 0 || config_.memory_utilization > 1)
    fail("--memory-utilization must be in (0, 1], got {}", config_.memory_utilization);
  capacity_ = size_kv_pool(mc, config_, model.resident_weight_bytes());
  if (config_.log_stats) {
    log_info("KV cache: {} bytes per token (2 x L {} x n_kv {} x d_h {} x {} bytes)", capacity_.bytes_per_token,
             mc.n_layers, mc.n_kv_heads, mc.head_dim, KvCacheTensors::elem_bytes(config_.kv_cache_dtype));
    log_info("Available KV cache memory: {:.2f} GiB", capacity_.gib);
    log_info("KV cache size: {} tokens ({} blocks of {})", capacity_.tokens, capacity_.num_blocks, config_.block_size);
    log_info("Maximum concurrency for {} tokens per request: {:.2f}x", config_.max_model_len, capacity_.max_concurrency);
  }
  cache_ = std::make_unique<KvCacheTensors>(mc, capacity_.num_blocks, config_.block_size, config_.kv_cache_dtype);
  kv_ = std::make_unique<KVCacheManager>(capacity_.num_blocks, config_.block_size, config_.enable_prefix_caching);
  SchedulerConfig sc;
  sc.max_num_seqs = config_.max_num_seqs;
  sc.max_num_batched_tokens = config_.max_num_batched_tokens;
  sc.max_model_len = config_.max_model_len;
  sc.long_prefill_token_threshold = config_.long_prefill_token_threshold;
  scheduler_ = std::make_unique<Scheduler>(sc, *kv_);
  runner_ = std::make_unique<ModelRunner>(model_, *cache_, config_.max_num_batched_tokens, config_.max_num_seqs,
                                          config_.max_model_len);
}

std::string EngineCore::add_request(const std::string& id, std::vector<int32_t> prompt_ids, const SamplingParams& params) {
  if (std::string err = params.validate(); !err.empty()) return err;
  if (params.n > config_.max_num_seqs)
    return fmt::format("n is {}, but --max-num-seqs is {}: the n sequences of a request run together", params.n,
                       config_.max_num_seqs);
  std::vector<std::unique_ptr<structured::GrammarMatcher>> grammars;  // one per sequence
  if (params.structured_output) {
    if (!structured_)
      return "structured output is not available: the engine was started without the tokenizer's vocabulary";
    for (int32_t i = 0; i < params.n; ++i) {
      std::string err;
      grammars.push_back(structured_->make_matcher(*params.structured_output, err));
      if (!grammars.back()) return err;
    }
  }
  if (prompt_ids.empty()) return "the prompt is empty: at least one token is needed";
  const int64_t V = model_.config().vocab_size;
  for (int32_t t : prompt_ids)
    if (t < 0 || t >= V) return fmt::format("prompt token id {} is outside the vocabulary (0..{})", t, V - 1);
  for (const auto& [id, bias] : params.logit_bias)
    if (id < 0 || id >= V) return fmt::format("logit_bias token id {} is outside the vocabulary (0..{})", id, V - 1);
  for (int32_t id : params.stop_token_ids)
    if (id < 0 || id >= V) return fmt::format("stop_token_ids: token id {} is outside the vocabulary (0..{})", id, V - 1);
  if (static_cast<int64_t>(prompt_ids.size()) >= config_.max_model_len)
    return fmt::format("the prompt has {} tokens, but max_model_len is {}: no room to generate",
                       prompt_ids.size(), config_.max_model_len);
  std::vector<std::string> ids = {id};
  if (params.n > 1)
    for (int32_t i = 0; i < params.n; ++i) ids.push_back(sequence_id(id, i, params.n));
  std::lock_guard<std::mutex> lock(mu_);
  for (const std::string& s : ids)
    if (live_ids_.count(s)) return fmt::format("request id '{}' is already in use", s);
  live_ids_.insert(ids.begin(), ids.end());
  const uint64_t seed = params.seed ? *params.seed : seed_counter_++ * 0x9e3779b97f4a7c15ULL;
  auto req = std::make_unique<Request>(id, std::move(prompt_ids), params, eos_token_ids_, seed);
  if (params.n == 1) {
    if (!grammars.empty()) req->grammar = std::move(grammars[0]);
  } else {
    req->parallel.emplace();
    req->parallel->n = params.n;
    req->parallel->seed = seed;
    req->parallel->aborted.assign(static_cast<size_t>(params.n), false);
    req->parallel->grammars = std::move(grammars);
  }
  pending_adds_.push_back(std::move(req));
  return "";
}

void EngineCore::enable_structured_output(std::vector<std::string> token_bytes) {
  structured_ = std::make_unique<structured::StructuredOutputManager>(
      std::make_shared<structured::VocabTrie>(std::move(token_bytes)));
}

// The masks of this step's constrained requests. A mask depends only on the request's grammar state (the
// tokens sampled so far), so the requests are independent and run on the thread pool; each GrammarDfa
// serializes the requests that share it, and its per-state mask cache makes repeated states free.
void EngineCore::compute_grammar_masks(const std::vector<Request*>& sample_reqs) {
  last_step_mask_s_ = 0;
  std::vector<size_t> constrained;
  for (size_t i = 0; i < sample_reqs.size(); ++i)
    if (sample_reqs[i]->grammar) constrained.push_back(i);
  if (constrained.empty()) return;
  const Clock::time_point t0 = Clock::now();
  grammar_masks_.assign(sample_reqs.size(), nullptr);
  grammar_errors_.assign(sample_reqs.size(), std::string());
  auto one = [&](size_t i) {
    try {
      grammar_masks_[i] = sample_reqs[i]->grammar->mask();
    } catch (const Error& e) {
      grammar_errors_[i] = e.what();
    }
  };
  if (constrained.size() == 1) {
    one(constrained[0]);
  } else {
    ThreadPool::global().parallel_for_dynamic(static_cast<int64_t>(constrained.size()), 1, [&](int64_t b, int64_t e) {
      for (int64_t k = b; k < e; ++k) one(constrained[static_cast<size_t>(k)]);
    });
  }
  last_step_mask_s_ = std::chrono::duration<double>(Clock::now() - t0).count();
}

void EngineCore::abort(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  pending_aborts_.push_back(id);
}

bool EngineCore::has_unfinished() const {
  std::lock_guard<std::mutex> lock(mu_);
  return !live_ids_.empty();
}

void EngineCore::retire(const std::vector<RequestOutput>& outputs) {
  std::vector<std::string> finished_groups;
  for (const auto& o : outputs) {
    if (!o.finished || o.parent_id == o.request_id) continue;
    sequence_group_.erase(o.request_id);
    auto g = groups_.find(o.parent_id);
    if (g != groups_.end() && --g->second.num_unfinished == 0) {
      finished_groups.push_back(o.parent_id);
      groups_.erase(g);
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& o : outputs)
    if (o.finished) live_ids_.erase(o.request_id);
  for (const auto& id : finished_groups) live_ids_.erase(id);
}

namespace {
RequestOutput abort_output(const Request& r, const std::string& sequence, int32_t index) {
  RequestOutput o;
  o.request_id = sequence;
  o.parent_id = r.parent_id;
  o.index = index;
  o.finished = true;
  o.finish_reason = "abort";
  o.num_prompt_tokens = r.num_prompt_tokens();
  o.num_output_tokens = r.num_output_tokens();
  o.stats = r.stats;
  return o;
}
}  // namespace

void EngineCore::abort_id(const std::string& id, std::vector<RequestOutput>& outputs) {
  if (auto g = groups_.find(id); g != groups_.end()) {
    for (const std::string& s : g->second.sequence_ids) abort_sequence(s, outputs);
    return;
  }
  abort_sequence(id, outputs);
}

void EngineCore::abort_sequence(const std::string& id, std::vector<RequestOutput>& outputs) {
  if (auto s = sequence_group_.find(id); s != sequence_group_.end()) {
    Request* parent = scheduler_->find(s->second.first);
    if (parent && parent->parallel) {
      // Not forked yet: the sequence is struck from the fork; with none left, the prompt goes too.
      ParallelSampling& ps = *parent->parallel;
      const int32_t i = s->second.second;
      if (ps.aborted[static_cast<size_t>(i)]) return;
      ps.aborted[static_cast<size_t>(i)] = true;
      outputs.push_back(abort_output(*parent, id, i));
      if (ps.num_live() == 0) scheduler_->abort_request(parent->request_id);
      return;
    }
  }
  if (auto r = scheduler_->abort_request(id)) outputs.push_back(abort_output(*r, r->request_id, r->index));
}

void EngineCore::drain_pending(std::vector<RequestOutput>& outputs) {
  std::vector<std::unique_ptr<Request>> adds;
  std::vector<std::string> aborts;
  {
    std::lock_guard<std::mutex> lock(mu_);
    adds.swap(pending_adds_);
    aborts.swap(pending_aborts_);
  }
  for (auto& r : adds) {
    if (r->parallel) {
      SequenceGroup& g = groups_[r->request_id];
      g.num_unfinished = r->parallel->n;
      for (int32_t i = 0; i < r->parallel->n; ++i) {
        g.sequence_ids.push_back(sequence_id(r->request_id, i, r->parallel->n));
        sequence_group_[g.sequence_ids.back()] = {r->request_id, i};
      }
    }
    scheduler_->add_request(std::move(r));
  }
  for (const auto& id : aborts) abort_id(id, outputs);
}

std::optional<RequestStatus> EngineCore::check_stop(const Request& r, int32_t token) const {
  const SamplingParams& p = r.sampling_params;
  if (!p.ignore_eos && std::find(r.eos_token_ids.begin(), r.eos_token_ids.end(), token) != r.eos_token_ids.end())
    return RequestStatus::kFinishedStopped;
  if (std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), token) != p.stop_token_ids.end())
    return RequestStatus::kFinishedStopped;
  return std::nullopt;
}

std::vector<RequestOutput> EngineCore::step() {
  std::vector<RequestOutput> outputs;
  drain_pending(outputs);
  last_step_tokens_ = 0;
  if (scheduler_->has_unfinished()) run_step(outputs);
  retire(outputs);
  return outputs;
}

void EngineCore::run_step(std::vector<RequestOutput>& outputs) {
  const SchedulerOutput so = scheduler_->schedule();
  last_step_tokens_ = so.total_num_scheduled_tokens;
  if (so.scheduled.empty()) return;

  std::vector<Request*>& sample_reqs = sample_reqs_;  // reused across steps (execute() clears it)
  const float* logits = runner_->execute(so, *kv_, sample_reqs);
  scheduler_->update_after_step(so);

  compute_grammar_masks(sample_reqs);
  const int64_t V = model_.config().vocab_size;
  const Clock::time_point now = Clock::now();
  static const std::string kNoError;
  for (size_t i = 0; i < sample_reqs.size(); ++i) {
    Request& req = *sample_reqs[i];
    std::span<const float> row{logits + i * V, static_cast<size_t>(V)};
    if (req.parallel) {
      fork(req, row, outputs, now);
      continue;
    }
    RequestOutput o = req.grammar ? sample(req, row, grammar_masks_[i].get(), grammar_errors_[i], now)
                                  : sample(req, row, nullptr, kNoError, now);
    if (o.finished) scheduler_->finish_request(req.request_id);
    outputs.push_back(std::move(o));
  }
}

// Parallel sampling: the prompt's last logits row is sampled once per sequence, each with its own random
// stream (seed + i), penalties and grammar matcher; the sequences that go on share the prompt's blocks.
void EngineCore::fork(Request& parent, std::span<const float> row, std::vector<RequestOutput>& outputs,
                      Clock::time_point now) {
  ParallelSampling& ps = *parent.parallel;
  std::vector<std::unique_ptr<Request>> children;
  for (int32_t i = 0; i < ps.n; ++i) {
    if (ps.aborted[static_cast<size_t>(i)]) continue;
    SamplingParams sp = parent.sampling_params;
    sp.n = 1;
    auto c = std::make_unique<Request>(sequence_id(parent.request_id, i, ps.n), parent.prompt_token_ids, sp,
                                       parent.eos_token_ids, ps.seed + static_cast<uint64_t>(i));
    c->parent_id = parent.request_id;
    c->index = i;
    c->num_computed_tokens = parent.num_computed_tokens;
    c->block_hashes = parent.block_hashes;  // full prompt blocks only: the parent holds no output token
    c->stats = parent.stats;
    if (!ps.grammars.empty()) c->grammar = std::move(ps.grammars[static_cast<size_t>(i)]);
    std::shared_ptr<const structured::TokenMask> mask;
    std::string mask_error;
    if (c->grammar) {
      try {
        mask = c->grammar->mask();
      } catch (const Error& e) {
        mask_error = e.what();
      }
    }
    RequestOutput o = sample(*c, row, mask.get(), mask_error, now);
    if (!o.finished) children.push_back(std::move(c));
    outputs.push_back(std::move(o));
  }
  scheduler_->fork(parent.request_id, std::move(children));  // the parent is gone after this
}

RequestOutput EngineCore::sample(Request& req, std::span<const float> row, const structured::TokenMask* mask,
                                 const std::string& mask_error, Clock::time_point now) {
  std::span<const float> sample_row = row;
  const SamplingParams& sp = req.sampling_params;
  if (sp.adjusts_logits(req.num_output_tokens())) {
    penalized_logits_.assign(row.begin(), row.end());
    if (sp.has_penalties()) apply_penalties(penalized_logits_, req.prompt_token_ids, req.output_token_ids, sp);
    for (const auto& [id, bias] : sp.logit_bias) penalized_logits_[id] += bias;
    if (req.num_output_tokens() < sp.min_tokens) {  // no stop before min_tokens
      for (int32_t id : req.eos_token_ids) penalized_logits_[id] = -std::numeric_limits<float>::infinity();
      for (int32_t id : sp.stop_token_ids) penalized_logits_[id] = -std::numeric_limits<float>::infinity();
    }
    sample_row = penalized_logits_;
  }
  RequestOutput o;
  o.request_id = req.request_id;
  o.parent_id = req.parent_id;
  o.index = req.index;
  std::optional<RequestStatus> stop;
  if (req.grammar) {
    // Structured output: tokens the grammar rejects get −∞. With nothing left to allow, the output is done
    // ("stop") when the grammar accepts it, and an error otherwise — never an invalid token.
    if (!mask || !mask->any) {
      stop = mask && mask->accepting ? RequestStatus::kFinishedStopped : RequestStatus::kFinishedError;
      if (*stop == RequestStatus::kFinishedError)
        o.error = mask ? "structured output: no token of the vocabulary can continue the output here" : mask_error;
    } else {
      masked_logits_.resize(row.size());
      structured::apply_token_mask(sample_row, masked_logits_, *mask, req.eos_token_ids, !sp.ignore_eos);
      sample_row = masked_logits_;
    }
  }
  const int32_t token = stop ? -1 : sample_token(sample_row, req.sampling_params, req.rng);
  if (!stop) stop = check_stop(req, token);
  if (!stop && req.grammar && !req.grammar->accept_token(token)) {
    stop = RequestStatus::kFinishedError;  // unreachable: the mask allowed it
    o.error = fmt::format("structured output: the grammar rejected token {} that its mask allowed", token);
  }
  if (!stop) {
    req.append_output_token(token);
    o.new_token_ids.push_back(token);
    if (sp.logprobs >= 0) o.logprobs.push_back(compute_logprobs(row, token, sp.logprobs));
    if (!req.stats.first_token) {
      req.stats.first_token = now;
      if (req.stats.first_scheduled)
        req.stats.prefill_time_s = std::chrono::duration<double>(now - *req.stats.first_scheduled).count();
    }
    req.stats.last_token = now;
    req.stats.token_times_s.push_back(std::chrono::duration<double>(now - req.stats.arrival).count());
    if (req.num_output_tokens() >= req.sampling_params.max_tokens || req.num_tokens() >= config_.max_model_len)
      stop = RequestStatus::kFinishedLength;
  }
  o.num_prompt_tokens = req.num_prompt_tokens();
  o.num_output_tokens = req.num_output_tokens();
  if (stop) {
    req.status = *stop;
    if (req.stats.first_token && req.stats.last_token)
      req.stats.decode_time_s = std::chrono::duration<double>(*req.stats.last_token - *req.stats.first_token).count();
    o.finished = true;
    o.finish_reason = finish_reason_name(*stop);
    o.stats = req.stats;
  }
  return o;
}

}  // namespace kvik
