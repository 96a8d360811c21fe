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
  capacity_ = size_kv_pool(mc, config_, model.weight_bytes());
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
  std::unique_ptr<structured::GrammarMatcher> grammar;
  if (params.structured_output) {
    if (!structured_)
      return "structured output is not available: the engine was started without the tokenizer's vocabulary";
    std::string err;
    grammar = structured_->make_matcher(*params.structured_output, err);
    if (!grammar) return err;
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
  std::lock_guard<std::mutex> lock(mu_);
  if (!live_ids_.insert(id).second) return fmt::format("request id '{}' is already in use", id);
  const uint64_t seed = params.seed ? *params.seed : seed_counter_++ * 0x9e3779b97f4a7c15ULL;
  pending_adds_.push_back(std::make_unique<Request>(id, std::move(prompt_ids), params, eos_token_ids_, seed));
  pending_adds_.back()->grammar = std::move(grammar);
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
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& o : outputs)
    if (o.finished) live_ids_.erase(o.request_id);
}

void EngineCore::drain_pending(std::vector<RequestOutput>& outputs) {
  std::vector<std::unique_ptr<Request>> adds;
  std::vector<std::string> aborts;
  {
    std::lock_guard<std::mutex> lock(mu_);
    adds.swap(pending_adds_);
    aborts.swap(pending_aborts_);
  }
  for (auto& r : adds) scheduler_->add_request(std::move(r));
  for (const auto& id : aborts) {
    if (auto r = scheduler_->abort_request(id)) {
      RequestOutput o;
      o.request_id = id;
      o.finished = true;
      o.finish_reason = "abort";
      o.num_prompt_tokens = r->num_prompt_tokens();
      o.num_output_tokens = r->num_output_tokens();
      o.stats = r->stats;
      outputs.push_back(std::move(o));
    }
  }
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
  for (size_t i = 0; i < sample_reqs.size(); ++i) {
    Request& req = *sample_reqs[i];
    std::span<const float> row{logits + i * V, static_cast<size_t>(V)};
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
    std::optional<RequestStatus> stop;
    if (req.grammar) {
      // Structured output: tokens the grammar rejects get −∞. With nothing left to allow, the output is done
      // ("stop") when the grammar accepts it, and an error otherwise — never an invalid token.
      const structured::TokenMask* mask = grammar_masks_[i].get();
      if (!mask || !mask->any) {
        stop = mask && mask->accepting ? RequestStatus::kFinishedStopped : RequestStatus::kFinishedError;
        if (*stop == RequestStatus::kFinishedError)
          o.error = mask ? "structured output: no token of the vocabulary can continue the output here"
                         : grammar_errors_[i];
      } else {
        masked_logits_.resize(row.size());
        structured::apply_token_mask(sample_row, masked_logits_, *mask, req.eos_token_ids, !req.sampling_params.ignore_eos);
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
      if (req.sampling_params.logprobs >= 0) o.logprobs.push_back(compute_logprobs(row, token, req.sampling_params.logprobs));
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
      scheduler_->finish_request(req.request_id);
    }
    outputs.push_back(std::move(o));
  }
}

}  // namespace kvik
