#include "engine/engine_core.h"

#include <unistd.h>

#include <algorithm>
#include <random>

#include "core/error.h"
#include "core/log.h"
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
  if (prompt_ids.empty()) return "the prompt is empty: at least one token is needed";
  const int64_t V = model_.config().vocab_size;
  for (int32_t t : prompt_ids)
    if (t < 0 || t >= V) return fmt::format("prompt token id {} is outside the vocabulary (0..{})", t, V - 1);
  if (static_cast<int64_t>(prompt_ids.size()) >= config_.max_model_len)
    return fmt::format("the prompt has {} tokens, but max_model_len is {}: no room to generate",
                       prompt_ids.size(), config_.max_model_len);
  std::lock_guard<std::mutex> lock(mu_);
  if (scheduler_->find(id)) return fmt::format("request id '{}' is already in use", id);
  for (const auto& p : pending_adds_)
    if (p->request_id == id) return fmt::format("request id '{}' is already in use", id);
  const uint64_t seed = params.seed ? *params.seed : seed_counter_++ * 0x9e3779b97f4a7c15ULL;
  pending_adds_.push_back(std::make_unique<Request>(id, std::move(prompt_ids), params, eos_token_ids_, seed));
  return "";
}

void EngineCore::abort(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  pending_aborts_.push_back(id);
}

bool EngineCore::has_unfinished() const {
  std::lock_guard<std::mutex> lock(mu_);
  return !pending_adds_.empty() || !pending_aborts_.empty() || scheduler_->has_unfinished();
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
  return std::nullopt;
}

std::vector<RequestOutput> EngineCore::step() {
  std::vector<RequestOutput> outputs;
  drain_pending(outputs);
  last_step_tokens_ = 0;
  if (!scheduler_->has_unfinished()) return outputs;
  const SchedulerOutput so = scheduler_->schedule();
  last_step_tokens_ = so.total_num_scheduled_tokens;
  if (so.scheduled.empty()) return outputs;

  std::vector<Request*> sample_reqs;
  const float* logits = runner_->execute(so, *kv_, sample_reqs);
  scheduler_->update_after_step(so);

  const int64_t V = model_.config().vocab_size;
  const Clock::time_point now = Clock::now();
  for (size_t i = 0; i < sample_reqs.size(); ++i) {
    Request& req = *sample_reqs[i];
    std::span<const float> row{logits + i * V, static_cast<size_t>(V)};
    std::span<const float> sample_row = row;
    if (req.sampling_params.has_penalties()) {
      penalized_logits_.assign(row.begin(), row.end());
      apply_penalties(penalized_logits_, req.prompt_token_ids, req.output_token_ids, req.sampling_params);
      sample_row = penalized_logits_;
    }
    const int32_t token = sample_token(sample_row, req.sampling_params, req.rng);
    RequestOutput o;
    o.request_id = req.request_id;
    std::optional<RequestStatus> stop = check_stop(req, token);
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
  return outputs;
}

}  // namespace kvik
