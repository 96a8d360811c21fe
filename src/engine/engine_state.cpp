#include "engine/engine_state.h"

namespace kvik {

namespace {

EngineStateSnapshot::RequestInfo request_info(const Request& r, bool running, const KVCacheManager& kv) {
  EngineStateSnapshot::RequestInfo info;
  info.id = r.request_id;
  info.running = running;
  info.num_prompt_tokens = r.num_prompt_tokens();
  info.num_tokens = r.num_tokens();
  info.num_computed_tokens = r.num_computed_tokens;
  if (r.sampling_params.lora) info.lora = r.sampling_params.lora->name;
  if (running) {
    const BlockTable& table = kv.block_table(r.request_id);
    info.block_table.reserve(table.blocks.size());
    for (const KVCacheBlock* b : table.blocks) info.block_table.push_back(b ? b->block_id : -1);
  }
  return info;
}

}  // namespace

EngineStateSnapshot take_state_snapshot(const EngineCore& core, int64_t num_steps) {
  const auto start = std::chrono::steady_clock::now();
  const Scheduler& sched = core.scheduler();
  const KVCacheManager& kv = core.kv_cache_manager();
  const BlockPool& pool = kv.pool();
  EngineStateSnapshot s;
  s.taken = std::chrono::system_clock::now();
  s.num_steps = num_steps;
  s.block_size = kv.block_size();
  s.num_free_blocks = pool.num_free_blocks();
  s.kv_usage = pool.usage();
  s.num_preemptions = sched.num_preemptions_total();
  s.prefix_cache = kv.prefix_cache_stats();
  s.spec_decode = core.spec_decode_stats();

  const size_t n = static_cast<size_t>(pool.num_blocks());
  s.owner.assign(n, -1);
  s.ref_cnt.resize(n);
  s.hash.resize(n);
  s.has_hash.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const KVCacheBlock& b = pool.block(static_cast<int32_t>(i));
    s.ref_cnt[i] = b.ref_cnt;
    s.has_hash[i] = b.block_hash.has_value();
    if (b.block_hash) s.hash[i] = *b.block_hash;
  }
  s.requests.reserve(static_cast<size_t>(sched.num_running() + sched.num_waiting()));
  for (const Request* r : sched.running()) {
    s.requests.push_back(request_info(*r, true, kv));
    const int32_t index = static_cast<int32_t>(s.requests.size() - 1);
    for (int32_t id : s.requests.back().block_table)
      if (id >= 0 && s.owner[static_cast<size_t>(id)] < 0) s.owner[static_cast<size_t>(id)] = index;
  }
  for (const Request* r : sched.waiting()) s.requests.push_back(request_info(*r, false, kv));
  s.snapshot_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return s;
}

}  // namespace kvik
