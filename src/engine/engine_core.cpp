#include "engine/engine_core.h"

#include <algorithm>
#include <random>

#include "core/error.h"
#include "core/log.h"
#include "core/thread_pool.h"
#include "engine/parallel_engine.h"

namespace kvik {

namespace {

KvCacheBudget kv_budget(const EngineConfig& c) {
  KvCacheBudget b;
  b.block_size = c.block_size;
  b.max_model_len = c.max_model_len;
  b.max_num_seqs = c.max_num_seqs;
  b.kv_cache_memory_gib = c.kv_cache_memory_gib;
  b.memory_utilization = c.memory_utilization;
  b.num_kv_blocks = c.num_kv_blocks;
  b.dtype = c.kv_cache_dtype;
  b.max_num_batched_tokens = c.max_num_batched_tokens;
  return b;
}

void check_config(const EngineConfig& c, const ModelConfig& mc) {
  if (c.max_model_len > mc.context_length)
    fail("--max-model-len {} is larger than the model's context length {}", c.max_model_len, mc.context_length);
  if (c.block_size <= 0 || c.block_size > 1024) fail("--block-size must be in 1..1024, got {}", c.block_size);
  if (c.max_num_seqs <= 0) fail("--max-num-seqs must be positive, got {}", c.max_num_seqs);
  if (c.max_num_batched_tokens <= 0)
    fail("--max-num-batched-tokens must be positive, got {}", c.max_num_batched_tokens);
  if (c.memory_utilization <= 0 || c.memory_utilization > 1)
    fail("--memory-utilization must be in (0, 1], got {}", c.memory_utilization);
  if (!is_kv_cache_dtype(c.kv_cache_dtype)) fail("--kv-cache-dtype {} is not supported", dtype_name(c.kv_cache_dtype));
  if (c.num_threads < 0) fail("--threads must not be negative, got {}", c.num_threads);
}

RequestOutput abort_output(const Request& r, const std::string& sequence, int32_t index, const std::string& reason) {
  RequestOutput o;
  o.request_id = sequence;
  o.parent_id = r.parent_id;
  o.index = index;
  o.finished = true;
  o.finish_reason = reason;
  o.num_prompt_tokens = r.num_prompt_tokens();
  o.num_output_tokens = r.num_output_tokens();
  o.stats = r.stats;
  return o;
}

}  // namespace

EngineCore::EngineCore(LlamaModel& model, const EngineConfig& config, std::vector<int32_t> eos_token_ids)
    : model_(model),
      config_(config),
      eos_token_ids_(std::move(eos_token_ids)),
      sampler_(model.config().vocab_size),
      seed_counter_(std::random_device{}()) {
  const ModelConfig& mc = model.config();
  if (config_.max_model_len <= 0) config_.max_model_len = mc.context_length;
  check_config(config_, mc);
  if (config_.num_threads > 0) ThreadPool::global().set_num_threads(config_.num_threads);
  KvCacheBudget budget = kv_budget(config_);
  if (config_.speculative.method == SpeculativeConfig::Method::kDraftModel) {
    draft_model_ = load_model(config_.speculative.model, config_);
    const ModelConfig& dc = draft_model_->config();
    if (dc.vocab_size != mc.vocab_size)
      fail(
          "--speculative-config: the draft model {} has a vocabulary of {} tokens, the model {}: they must be the same",
          config_.speculative.model, dc.vocab_size, mc.vocab_size);
    if (mc.sliding_window > 0 || dc.sliding_window > 0)
      fail(
          "--speculative-config: draft_model with a sliding-window model is not supported (the window frees blocks "
          "the other model's attention still reads); use \"ngram\" or \"suffix\"");
    KvCacheTensors::check_dtype(dc, budget.dtype);
    budget.draft_bytes_per_token = KvCacheTensors::bytes_per_token(dc, budget.dtype);
  }
  const int64_t draft_weight_bytes = draft_model_ ? draft_model_->resident_weight_bytes() : 0;
  const ModelShard& shard = model.shard();
  if (shard.distributed()) {
    check_parallel_engine_config(config_);
    capacity_ = plan_parallel_kv_capacity(model, budget, config_.log_stats);
  } else {
    capacity_ = plan_kv_capacity(mc, budget, model.resident_weight_bytes() + draft_weight_bytes);
    if (config_.log_stats) log_kv_capacity(mc, budget, capacity_);
  }
  cache_ = std::make_unique<KvCacheTensors>(mc, capacity_.num_blocks, config_.block_size, config_.kv_cache_dtype,
                                            capacity_.local_num_blocks, shard.first_layer, shard.end_layer);
  if (draft_model_) {
    draft_cache_ = std::make_unique<KvCacheTensors>(draft_model_->config(), capacity_.num_blocks, config_.block_size,
                                                    config_.kv_cache_dtype);
    draft_runner_ = std::make_unique<DraftRunner>(*draft_model_, *draft_cache_, config_.max_num_batched_tokens,
                                                  config_.max_num_seqs, config_.max_model_len);
  }
  kv_ = std::make_unique<KVCacheManager>(
      capacity_.num_blocks, config_.block_size, config_.enable_prefix_caching,
      mc.all_layers_local() || capacity_.local_num_blocks > 0 ? mc.sliding_window : 0, capacity_.local_num_blocks);
  if (config_.log_stats && mc.all_layers_local()) {
    // A decoding sequence holds the blocks of its last W positions (plus the block being written): ⌈W/bs⌉ + 1.
    const int64_t per_seq = std::min<int64_t>((mc.sliding_window + config_.block_size - 1) / config_.block_size + 1,
                                              (config_.max_model_len + config_.block_size - 1) / config_.block_size);
    log_info(
        "Sliding window {}: blocks out of the window are freed; a decoding sequence holds at most {} blocks, "
        "so {:.2f}x concurrency for {} tokens per request",
        mc.sliding_window, per_seq, static_cast<double>(capacity_.num_blocks) / per_seq, config_.max_model_len);
  } else if (config_.log_stats && mc.sliding_window > 0) {
    int64_t local = 0;
    for (int64_t l = 0; l < mc.n_layers; ++l) local += mc.layer_is_local(l);
    const int64_t per_seq = (mc.sliding_window + config_.block_size - 1) / config_.block_size + 1;
    log_info(
        "Sliding window {} on {} of {} layers, interleaved with global ones: the local layers keep their KV in a pool "
        "of their own, {} blocks ({} bytes per token), from which blocks out of the window are freed (a decoding "
        "sequence holds at most {}); the global layers' {} blocks hold every position",
        mc.sliding_window, local, mc.n_layers, capacity_.local_num_blocks, capacity_.local_bytes_per_token, per_seq,
        capacity_.num_blocks);
  }
  SchedulerConfig sc;
  sc.max_num_seqs = config_.max_num_seqs;
  sc.max_num_batched_tokens = config_.max_num_batched_tokens;
  sc.long_prefill_token_threshold = config_.long_prefill_token_threshold;
  sc.max_loras = config_.max_loras;
  scheduler_ = std::make_unique<Scheduler>(sc, *kv_);
  const int64_t k = config_.speculative.enabled() ? config_.speculative.num_speculative_tokens : 0;
  const int64_t max_logits_rows = std::min(config_.max_num_seqs * (1 + k), config_.max_num_batched_tokens);
  runner_ = std::make_unique<ModelRunner>(model_, *cache_, config_.max_num_batched_tokens, config_.max_num_seqs,
                                          config_.max_model_len, std::max(max_logits_rows, config_.max_num_seqs));
  spec_stats_.accepted_per_pos.assign(static_cast<size_t>(k), 0);
  spec_logged_ = spec_stats_;
  spec_log_time_ = Clock::now();
  if (config_.log_stats && k > 0) log_info("speculative decoding: {}", describe(config_.speculative));
  if (config_.speculative.method == SpeculativeConfig::Method::kSuffix)
    suffix_ = std::make_unique<SuffixCache>(config_.speculative.suffix_max_tree_depth,
                                            config_.speculative.suffix_max_cached_requests,
                                            config_.speculative.suffix_max_spec_factor);
}

std::optional<ValidationError> EngineCore::validate(const std::vector<int32_t>& prompt_ids,
                                                    const SamplingParams& params) const {
  if (auto err = params.validate()) return err;
  if (params.n > config_.max_num_seqs)
    return ValidationError{"n", fmt::format("n is {}, but --max-num-seqs is {}: the n sequences of a request run "
                                            "together",
                                            params.n, config_.max_num_seqs)};
  if (prompt_ids.empty()) return ValidationError{"prompt", "the prompt is empty: at least one token is needed"};
  const int64_t V = model_.config().vocab_size;
  auto outside = [&](int32_t t) { return t < 0 || t >= V; };
  for (int32_t t : prompt_ids)
    if (outside(t))
      return ValidationError{"prompt", fmt::format("prompt token id {} is outside the vocabulary (0..{})", t, V - 1)};
  for (const auto& [id, bias] : params.logit_bias)
    if (outside(id))
      return ValidationError{"logit_bias",
                             fmt::format("logit_bias token id {} is outside the vocabulary (0..{})", id, V - 1)};
  for (int32_t id : params.stop_token_ids)
    if (outside(id))
      return ValidationError{"stop_token_ids",
                             fmt::format("stop_token_ids: token id {} is outside the vocabulary (0..{})", id, V - 1)};
  if (params.interventions)
    for (const Intervention& iv : params.interventions->items)
      if (static_cast<int64_t>(iv.direction->size()) != model_.config().dim ||
          iv.layers.back() > model_.config().n_layers)
        return ValidationError{"interventions", fmt::format("an intervention has d = {} and layers up to {}; the "
                                                            "model has d = {} and layers 0..{}",
                                                            iv.direction->size(), iv.layers.back(), model_.config().dim,
                                                            model_.config().n_layers)};
  if (params.lora)
    if (std::string why = lora_mismatch(*params.lora, model_.config()); !why.empty())
      return ValidationError{"model", why};
  if (model_.shard().distributed() && (params.interventions || params.lora))
    return ValidationError{params.lora ? "model" : "interventions",
                           fmt::format("{} do not run with tensor or pipeline parallelism yet: serve the model in one "
                                       "process (--tensor-parallel-size 1 --pipeline-parallel-size 1) for them",
                                       params.lora ? "LoRA adapters" : "interventions")};
  if (static_cast<int64_t>(prompt_ids.size()) >= config_.max_model_len)
    return ValidationError{"prompt", fmt::format("the prompt has {} tokens, but max_model_len is {}: no room to "
                                                 "generate",
                                                 prompt_ids.size(), config_.max_model_len)};
  return std::nullopt;
}

std::optional<ValidationError> EngineCore::add_request(const std::string& id, std::vector<int32_t> prompt_ids,
                                                       const SamplingParams& params) {
  if (auto err = validate(prompt_ids, params)) return err;
  std::vector<std::unique_ptr<structured::GrammarMatcher>> grammars;  // one per sequence
  if (const auto& spec = params.structured_output) {
    if (!structured_)
      return ValidationError{spec->source,
                             "structured output is not available: the engine was started without "
                             "the tokenizer's vocabulary"};
    for (int32_t i = 0; i < params.n; ++i) {
      std::string err;
      grammars.push_back(structured_->make_matcher(*spec, err));
      if (!grammars.back()) return ValidationError{spec->source, err};
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t seed = params.seed ? *params.seed : seed_counter_++ * 0x9e3779b97f4a7c15ULL;
  auto parent = std::make_shared<ParentRequest>(id, params.n, seed);
  const std::vector<std::string> ids = parent->ids();
  for (const std::string& s : ids)
    if (requests_.count(s)) return ValidationError{"", fmt::format("request id '{}' is already in use", s)};
  for (const std::string& s : ids) requests_.emplace(s, parent);
  auto req = std::make_unique<Request>(id, std::move(prompt_ids), params, eos_token_ids_, seed);
  req->parent = parent;
  if (params.n == 1 && !grammars.empty())
    req->grammar = std::move(grammars[0]);
  else
    parent->grammars = std::move(grammars);
  pending_adds_.push_back(std::move(req));
  return std::nullopt;
}

void EngineCore::enable_structured_output(std::vector<std::string> token_bytes) {
  structured_ = std::make_unique<structured::StructuredOutputManager>(
      std::make_shared<structured::VocabTrie>(std::move(token_bytes)));
}

void EngineCore::abort(const std::string& id, const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  pending_aborts_.emplace_back(id, reason);
}

bool EngineCore::has_unfinished() const {
  std::lock_guard<std::mutex> lock(mu_);
  return !requests_.empty();
}

void EngineCore::retire(const std::vector<RequestOutput>& outputs) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& o : outputs) {
    if (!o.finished) continue;
    auto it = requests_.find(o.parent_id);
    if (it == requests_.end()) continue;
    std::shared_ptr<ParentRequest> parent = it->second;
    parent->finish(o.index);
    if (parent->num_unfinished() == 0)
      for (const std::string& s : parent->ids()) requests_.erase(s);
  }
}

void EngineCore::abort_id(const std::string& id, const std::string& reason, std::vector<RequestOutput>& outputs) {
  std::shared_ptr<ParentRequest> parent;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = requests_.find(id);
    if (it == requests_.end()) return;
    parent = it->second;
  }
  const int32_t index = parent->index_of(id);
  if (index >= 0) {
    abort_sequence(*parent, index, reason, outputs);
    return;
  }
  for (int32_t i = 0; i < parent->n; ++i)
    if (!parent->finished[static_cast<size_t>(i)]) abort_sequence(*parent, i, reason, outputs);
}

void EngineCore::abort_sequence(ParentRequest& parent, int32_t index, const std::string& reason,
                                std::vector<RequestOutput>& outputs) {
  Request* prompt = scheduler_->find(parent.request_id);
  if (prompt && prompt->forks()) {
    // Not forked yet: the sequence is struck from the fork; with none left, the prompt goes too.
    if (!parent.finish(index)) return;
    outputs.push_back(abort_output(*prompt, parent.sequence_id(index), index, reason));
    if (parent.num_unfinished() == 0) scheduler_->abort_request(parent.request_id);
    return;
  }
  if (auto r = scheduler_->abort_request(parent.sequence_id(index)))
    outputs.push_back(abort_output(*r, r->request_id, r->index, reason));
}

void EngineCore::drain_pending(std::vector<RequestOutput>& outputs) {
  std::vector<std::unique_ptr<Request>> adds;
  std::vector<std::pair<std::string, std::string>> aborts;
  {
    std::lock_guard<std::mutex> lock(mu_);
    adds.swap(pending_adds_);
    aborts.swap(pending_aborts_);
  }
  for (auto& r : adds) scheduler_->add_request(std::move(r));
  for (const auto& [id, reason] : aborts) abort_id(id, reason, outputs);
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

// Sequence i of an n > 1 prompt that has just been prefilled: the prompt's tokens, computed KV (shared
// blocks, see Scheduler::fork) and full-block hashes, its own random stream (seed + i) and grammar.
std::unique_ptr<Request> EngineCore::make_sequence(const Request& prompt, int32_t index) const {
  ParentRequest& parent = *prompt.parent;
  SamplingParams sp = prompt.sampling_params;
  sp.n = 1;
  auto c = std::make_unique<Request>(parent.sequence_id(index), prompt.prompt_token_ids, sp, prompt.eos_token_ids,
                                     parent.seed + static_cast<uint64_t>(index));
  c->parent_id = parent.request_id;
  c->index = index;
  c->parent = prompt.parent;
  c->num_computed_tokens = prompt.num_computed_tokens;
  c->block_hashes = prompt.block_hashes;  // full prompt blocks only: the prompt request holds no output token
  c->stats = prompt.stats;
  if (!parent.grammars.empty()) c->grammar = std::move(parent.grammars[static_cast<size_t>(index)]);
  return c;
}

// Who samples this step, in batch order: every request whose last token was computed; an n > 1 prompt
// samples its logits row once per unfinished sequence, as the sequences it forks into.
std::vector<EngineCore::SampleSlot> EngineCore::sample_slots(const std::vector<SampleRows>& rows) {
  std::vector<SampleSlot> slots;
  for (const SampleRows& sr : rows) {
    Request* req = sr.request;
    if (!req->forks()) {
      slots.push_back({req, nullptr, req, sr.first_row, sr.num_rows});
      continue;
    }
    for (int32_t s = 0; s < req->parent->n; ++s) {
      if (req->parent->finished[static_cast<size_t>(s)]) continue;
      std::unique_ptr<Request> child = make_sequence(*req, s);
      Request* c = child.get();
      slots.push_back({c, std::move(child), req, sr.first_row, 1});
    }
  }
  return slots;
}

// Drafts for every running decode that may speculate: no grammar (structured output does not speculate: a draft
// would need the matcher advanced and rolled back), not a prompt about to fork, not paused by its gate, and room
// left: the drafts and the target's one token stay within max_tokens and max_model_len. Adaptive (the default),
// each request drafts the number of tokens that maximizes the step's expected output tokens per second
// (choose_num_drafts, from its acceptance estimate and the measured step costs); a request for which no number
// pays pauses (its gate), and one without evidence yet probes with k.
void EngineCore::propose_drafts() {
  const SpeculativeConfig& sc = config_.speculative;
  draft_jobs_.clear();
  if (!sc.enabled()) return;
  const bool busy =
      sc.disable_by_batch_size > 0 && scheduler_->num_running() + scheduler_->num_waiting() > sc.disable_by_batch_size;
  int64_t step_tokens = 0;  // what the step holds before drafts: a token per decode, the prompts' chunks
  double step_yield = 0;    // and the output tokens it is expected to give
  for (const Request* req : scheduler_->running()) {
    const int64_t left = req->num_tokens() - req->num_computed_tokens;
    step_tokens += left;
    step_yield += left == 1 ? 1 : 0;
  }
  step_tokens = std::clamp<int64_t>(step_tokens, 1, config_.max_num_batched_tokens);
  for (Request* req : scheduler_->running()) {
    req->spec_token_ids.clear();
    if (busy) continue;
    if (req->grammar || req->forks() || req->num_tokens() - req->num_computed_tokens != 1) continue;
    if (!req->spec_gate.allows(req->num_output_tokens())) continue;
    const int64_t room = std::min<int64_t>(req->sampling_params.max_tokens - req->num_output_tokens(),
                                           config_.max_model_len - req->num_tokens()) -
                         1;
    auto k = static_cast<int32_t>(std::min<int64_t>(sc.num_speculative_tokens, room));
    if (k <= 0) continue;
    if (sc.method == SpeculativeConfig::Method::kNgram) {
      k = ngram_propose(req->all_token_ids, sc.prompt_lookup_min, sc.prompt_lookup_max, k, req->spec_token_ids);
      if (k == 0) continue;
    } else if (sc.method == SpeculativeConfig::Method::kSuffix) {
      k = suffix_->propose(req->all_token_ids, k, req->spec_token_ids);
      if (k == 0) continue;
    }
    if (sc.adaptive && req->spec_gate.has_evidence()) {
      const double draft_seconds = sc.method == SpeculativeConfig::Method::kDraftModel ? draft_token_seconds_ : 0;
      k = choose_num_drafts(step_cost_, step_tokens, step_yield, req->spec_gate.acceptance(), k, draft_seconds);
      if (k == 0) {
        req->spec_gate.pause(req->num_output_tokens());
        req->spec_token_ids.clear();
        continue;
      }
    }
    if (sc.method != SpeculativeConfig::Method::kDraftModel) {
      req->spec_token_ids.resize(static_cast<size_t>(k));
    } else {
      if (!reserve_draft_slots(*req, k)) continue;
      draft_jobs_.push_back({req, k});
    }
    step_tokens += k;
    step_yield += expected_tokens_per_step(req->spec_gate.acceptance(), k) - 1;
  }
  if (draft_jobs_.empty()) return;
  const Clock::time_point t0 = Clock::now();
  draft_runner_->propose(draft_jobs_, *kv_);
  int64_t proposed = 0;
  for (const DraftRunner::Job& j : draft_jobs_) proposed += j.k;
  const double s = std::chrono::duration<double>(Clock::now() - t0).count() / static_cast<double>(proposed);
  draft_token_seconds_ = draft_token_seconds_ == 0 ? s : draft_token_seconds_ + 0.25 * (s - draft_token_seconds_);
}

// The blocks a draft-model proposal writes into (its KV for the request's last token and all proposals but the
// last) and the target's verification then needs, allocated before the draft runs; false (no speculation this
// step) when the pool would keep fewer free blocks than there are running requests, or when the block the new
// positions start in is still shared with a forked sibling (the target's copy-on-write comes first).
bool EngineCore::reserve_draft_slots(Request& req, int32_t k) {
  const BlockTable& table = kv_->block_table(req.request_id);
  const int64_t first = req.num_computed_tokens / config_.block_size;
  if (first < table.size() && table.blocks[static_cast<size_t>(first)]->ref_cnt > 1) return false;
  return kv_->allocate_slots(req, 1 + k, nullptr, scheduler_->num_running()).has_value();
}

void EngineCore::run_step(std::vector<RequestOutput>& outputs) {
  propose_drafts();
  const SchedulerOutput so = scheduler_->schedule();
  last_step_tokens_ = so.total_num_scheduled_tokens;
  if (so.scheduled.empty()) return;
  const Clock::time_point step_start = Clock::now();
  const float* logits = runner_->execute(so, *kv_, sample_rows_);
  scheduler_->update_after_step(so);
  // draft_model: blocks reserved for drafts the scheduler did not take go back (a preempted request holds none).
  for (const DraftRunner::Job& j : draft_jobs_) kv_->release_rejected(*j.request);

  std::vector<SampleSlot> slots = sample_slots(sample_rows_);
  sample_inputs_.clear();
  for (const SampleSlot& s : slots) {
    if (s.num_rows > 1) continue;  // speculating: verify_drafts samples its rows
    Request& r = *s.request;
    sample_inputs_.push_back({s.logits_row, &r.sampling_params, r.prompt_token_ids, r.output_token_ids, r.eos_token_ids,
                              &r.rng, r.grammar.get()});
  }
  sampler_.sample(logits, sample_inputs_, sample_results_);

  const Clock::time_point now = Clock::now();
  std::vector<std::unique_ptr<Request>> children;  // of the prompt request `forking`
  const Request* forking = nullptr;
  auto flush_fork = [&] {
    if (forking) scheduler_->fork(forking->request_id, std::move(children));  // the prompt request is gone after
    children.clear();
    forking = nullptr;
  };
  size_t next_result = 0;
  for (SampleSlot& s : slots) {
    RequestOutput o;
    if (s.num_rows > 1) {
      o = verify_drafts(*s.request, logits, s.logits_row, s.num_rows, now);
    } else {
      o = new_output(*s.request);
      append_token(*s.request, sample_results_[next_result++], now, o);
    }
    if (s.child) {
      if (s.scheduled != forking) flush_fork();
      forking = s.scheduled;
      if (!o.finished) children.push_back(std::move(s.child));
    } else {
      flush_fork();
      if (o.finished && suffix_) suffix_->add(s.request->all_token_ids);
      if (o.finished) scheduler_->finish_request(s.request->request_id);
    }
    outputs.push_back(std::move(o));
  }
  flush_fork();
  step_cost_.observe(so.total_num_scheduled_tokens, std::chrono::duration<double>(Clock::now() - step_start).count());
  log_spec_decode_stats();
}

RequestOutput EngineCore::verify_drafts(Request& req, const float* logits, int64_t first_row, int64_t num_rows,
                                        Clock::time_point now) {
  std::vector<int32_t> drafts;
  drafts.swap(req.spec_token_ids);
  if (static_cast<int64_t>(drafts.size()) + 1 != num_rows)
    fail("internal: request '{}' has {} drafts but {} logits rows", req.request_id, drafts.size(), num_rows);
  const int64_t V = model_.config().vocab_size;
  RequestOutput o = new_output(req);
  int32_t accepted = 0;
  for (size_t j = 0; j <= drafts.size() && !o.finished; ++j) {
    const SampleInput in{first_row + static_cast<int64_t>(j),
                         &req.sampling_params,
                         req.prompt_token_ids,
                         req.output_token_ids,
                         req.eos_token_ids,
                         &req.rng,
                         nullptr};
    const std::span<const float> row{logits + in.logits_row * V, static_cast<size_t>(V)};
    bool ok = false;
    const SampleResult r =
        j < drafts.size() ? sampler_.verify_draft(row, in, drafts[j], ok) : sampler_.sample_unconstrained(row, in);
    append_token(req, r, now, o);
    if (!ok) break;
    ++spec_stats_.accepted_per_pos[static_cast<size_t>(accepted++)];
  }
  const auto num_drafts = static_cast<int32_t>(drafts.size());
  ++spec_stats_.num_drafts;
  spec_stats_.num_draft_tokens += num_drafts;
  spec_stats_.num_accepted_tokens += accepted;
  if (config_.speculative.adaptive)  // the draft length follows the acceptance estimate; no k that pays pauses
    req.spec_gate.observe_verification(num_drafts, accepted);
  else
    req.spec_gate.record(num_drafts, accepted, req.num_output_tokens());
  ++req.stats.spec_drafts;
  req.stats.spec_draft_tokens += num_drafts;
  req.stats.spec_accepted_tokens += accepted;
  if (o.finished) {  // append_token copied the stats before this step's counts
    o.stats.spec_drafts = req.stats.spec_drafts;
    o.stats.spec_draft_tokens = req.stats.spec_draft_tokens;
    o.stats.spec_accepted_tokens = req.stats.spec_accepted_tokens;
  }
  if (!o.finished) scheduler_->reject_drafts(req, num_drafts - accepted);
  drafts.clear();
  req.spec_token_ids.swap(drafts);  // keeps the buffer for the next proposal
  return o;
}

// vLLM's periodic "SpecDecoding metrics" line, over the drafts since the last one (every 10 s at most).
void EngineCore::log_spec_decode_stats() {
  if (!config_.log_stats || !config_.speculative.enabled()) return;
  const Clock::time_point now = Clock::now();
  if (now - spec_log_time_ < std::chrono::seconds(10) || spec_stats_.num_drafts == spec_logged_.num_drafts) return;
  SpecDecodeStats d;
  d.num_drafts = spec_stats_.num_drafts - spec_logged_.num_drafts;
  d.num_draft_tokens = spec_stats_.num_draft_tokens - spec_logged_.num_draft_tokens;
  d.num_accepted_tokens = spec_stats_.num_accepted_tokens - spec_logged_.num_accepted_tokens;
  std::string per_pos;
  for (size_t i = 0; i < spec_stats_.accepted_per_pos.size(); ++i)
    per_pos += fmt::format("{}{:.3f}", i ? ", " : "",
                           static_cast<double>(spec_stats_.accepted_per_pos[i] - spec_logged_.accepted_per_pos[i]) /
                               static_cast<double>(d.num_drafts));
  log_info(
      "speculative decoding: acceptance rate {:.3f}, mean acceptance length {:.2f}, accepted {} of {} draft "
      "tokens in {} drafts, per-position acceptance {}",
      d.acceptance_rate(), d.mean_accepted_len(), d.num_accepted_tokens, d.num_draft_tokens, d.num_drafts, per_pos);
  spec_logged_ = spec_stats_;
  spec_log_time_ = now;
}

RequestOutput EngineCore::new_output(const Request& req) const {
  RequestOutput o;
  o.request_id = req.request_id;
  o.parent_id = req.parent_id;
  o.index = req.index;
  o.num_prompt_tokens = req.num_prompt_tokens();
  o.num_output_tokens = req.num_output_tokens();
  return o;
}

void EngineCore::append_token(Request& req, const SampleResult& r, Clock::time_point now, RequestOutput& o) {
  std::optional<RequestStatus> stop;
  if (r.status == SampleResult::Status::kGrammarComplete) stop = RequestStatus::kFinishedStopped;
  if (r.status == SampleResult::Status::kGrammarError) {
    stop = RequestStatus::kFinishedError;
    o.error = r.error;
  }
  if (!stop) stop = check_stop(req, r.token);
  if (!stop && req.grammar && !req.grammar->accept_token(r.token)) {
    stop = RequestStatus::kFinishedError;  // unreachable: the mask allowed it
    o.error = fmt::format("structured output: the grammar rejected token {} that its mask allowed", r.token);
  }
  if (!stop) {
    req.append_output_token(r.token);
    o.new_token_ids.push_back(r.token);
    if (r.logprobs) o.logprobs.push_back(*r.logprobs);
    req.stats.record_token(now);
    if (req.num_output_tokens() >= req.sampling_params.max_tokens || req.num_tokens() >= config_.max_model_len)
      stop = RequestStatus::kFinishedLength;
  }
  o.num_prompt_tokens = req.num_prompt_tokens();
  o.num_output_tokens = req.num_output_tokens();
  if (stop) {
    req.status = *stop;
    req.stats.finish();
    o.finished = true;
    o.finish_reason = finish_reason_name(*stop);
    o.stats = req.stats;
  }
}

}  // namespace kvik
