#include "engine/scheduler.h"

#include <algorithm>

#include "core/error.h"

namespace kvik {

Scheduler::Scheduler(const SchedulerConfig& config, KVCacheManager& kv) : config_(config), kv_(kv) {}

void Scheduler::add_request(std::unique_ptr<Request> req) {
  if (requests_.count(req->request_id)) fail("request id '{}' is already in use", req->request_id);
  Request* r = req.get();
  r->status = RequestStatus::kWaiting;
  requests_.emplace(r->request_id, std::move(req));
  waiting_.push_back(r);
}

Request* Scheduler::find(const std::string& id) const {
  auto it = requests_.find(id);
  return it == requests_.end() ? nullptr : it->second.get();
}

std::unique_ptr<Request> Scheduler::abort_request(const std::string& id) {
  Request* r = find(id);
  if (!r) return nullptr;
  r->status = RequestStatus::kFinishedAborted;
  return finish_request(id);
}

std::unique_ptr<Request> Scheduler::finish_request(const std::string& id) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return nullptr;
  Request* r = it->second.get();
  kv_.free(*r);
  running_.erase(std::remove(running_.begin(), running_.end(), r), running_.end());
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), r), waiting_.end());
  std::unique_ptr<Request> out = std::move(it->second);
  requests_.erase(it);
  return out;
}

void Scheduler::fork(const std::string& parent_id, std::vector<std::unique_ptr<Request>> children) {
  Request* parent = find(parent_id);
  if (!parent || parent->status != RequestStatus::kRunning)
    fail("internal: fork of '{}', which is not running", parent_id);
  for (auto& c : children) {
    if (requests_.count(c->request_id)) fail("request id '{}' is already in use", c->request_id);
    kv_.fork(*parent, *c);
    Request* r = c.get();
    r->status = RequestStatus::kRunning;
    r->admission_seq = ++admission_counter_;  // newest: preempted before requests admitted earlier
    requests_.emplace(r->request_id, std::move(c));
    running_.push_back(r);
  }
  finish_request(parent_id);  // drops the parent's reference on every block
}

void Scheduler::preempt(Request* victim) {
  kv_.free(*victim);
  running_.erase(std::remove(running_.begin(), running_.end(), victim), running_.end());
  victim->status = RequestStatus::kPreempted;
  victim->num_computed_tokens = 0;
  victim->draft_fed.clear();  // its draft-model KV went with the blocks
  victim->spec_token_ids.clear();
  ++victim->stats.num_preemptions;
  ++num_preemptions_;
  waiting_.push_front(victim);
}

int64_t Scheduler::chunk_limit(int64_t budget) const {
  if (config_.long_prefill_token_threshold > 0) return std::min(budget, config_.long_prefill_token_threshold);
  return budget;
}

// Tries to allocate `num_new` slots for a running request; on failure preempts the most recently admitted
// running request and retries. False when `req` itself was preempted.
bool Scheduler::schedule_running(StepBuilder& st, Request* req, int64_t num_new) {
  while (true) {
    if (kv_.allocate_slots(*req, num_new)) {
      add_scheduled(st, req, num_new);
      return true;
    }
    Request* victim = *std::max_element(running_.begin(), running_.end(),
                                        [](Request* a, Request* b) { return a->admission_seq < b->admission_seq; });
    if (auto it = st.index.find(victim); it != st.index.end()) {
      // Already scheduled this step: give its tokens back before preempting it.
      ScheduledRequest& s = st.out.scheduled[it->second];
      st.budget += s.num_scheduled_tokens;
      st.out.total_num_scheduled_tokens -= s.num_scheduled_tokens;
      s.num_scheduled_tokens = 0;
      st.index.erase(it);
    }
    preempt(victim);
    st.out.preempted_ids.push_back(victim->request_id);
    if (victim == req) return false;
  }
}

void Scheduler::add_scheduled(StepBuilder& st, Request* req, int64_t num_new) {
  st.index[req] = st.out.scheduled.size();
  st.out.scheduled.push_back({req, num_new});
  st.out.total_num_scheduled_tokens += num_new;
  st.budget -= num_new;
}

// A decode: its last token plus its drafts (speculative decoding), as many drafts as the token budget and the
// free blocks allow without preempting anyone for them; room short, the drafts go first.
void Scheduler::schedule_decode(StepBuilder& st, Request* req) {
  std::vector<int32_t>& spec = req->spec_token_ids;
  if (static_cast<int64_t>(spec.size()) > st.budget - 1) spec.resize(static_cast<size_t>(st.budget - 1));
  if (!spec.empty()) {
    const int64_t num_new = 1 + static_cast<int64_t>(spec.size());
    if (kv_.allocate_slots(*req, num_new)) {
      add_scheduled(st, req, num_new);
      return;
    }
    spec.clear();
  }
  schedule_running(st, req, 1);
}

// Running requests: decodes (one token each, plus drafts) first, then prefills in progress (chunked to the
// budget). Only a scheduled decode keeps its drafts.
void Scheduler::schedule_running_requests(StepBuilder& st) {
  std::vector<Request*> snapshot = running_;
  for (Request* req : snapshot) {
    if (st.budget <= 0) break;
    if (req->status != RequestStatus::kRunning) continue;  // preempted meanwhile
    if (req->num_tokens() - req->num_computed_tokens != 1) continue;
    schedule_decode(st, req);
  }
  for (Request* req : running_)
    if (!st.index.count(req)) req->spec_token_ids.clear();
  snapshot = running_;
  for (Request* req : snapshot) {
    if (st.budget <= 0) break;
    if (req->status != RequestStatus::kRunning || st.index.count(req)) continue;
    const int64_t remaining = req->num_tokens() - req->num_computed_tokens;
    if (remaining <= 0) continue;
    schedule_running(st, req, std::min(remaining, chunk_limit(st.budget)));
  }
  // Drop entries zeroed by preemption.
  std::erase_if(st.out.scheduled, [](const ScheduledRequest& s) { return s.num_scheduled_tokens == 0; });
}

// Waiting requests, in order, while budget, sequence slots and blocks last (none if this step preempted).
// An n > 1 request takes n sequence slots (what it forks into), and unless it would run alone it is admitted
// only when n - 1 blocks stay free beyond its prompt's: the first decode after the fork needs a copy-on-write
// (or new) block per extra sequence. A request whose LoRA adapter would be one more than max_loras in the step
// waits (others behind it may go first), as vLLM skips it.
void Scheduler::admit_waiting(StepBuilder& st) {
  int64_t num_seqs = 0;
  std::vector<uint64_t> loras;  // distinct adapters running (0 = the base model, which needs no slot)
  const auto lora_id = [](const Request* r) { return r->sampling_params.lora ? r->sampling_params.lora->id : 0; };
  const auto lora_fits = [&](uint64_t id) {
    return id == 0 || config_.max_loras <= 0 || std::find(loras.begin(), loras.end(), id) != loras.end() ||
           static_cast<int64_t>(loras.size()) < config_.max_loras;
  };
  const auto add_lora = [&](uint64_t id) {
    if (id != 0 && std::find(loras.begin(), loras.end(), id) == loras.end()) loras.push_back(id);
  };
  for (const Request* r : running_) num_seqs += r->num_seqs(), add_lora(lora_id(r));
  auto it = waiting_.begin();
  while (st.out.preempted_ids.empty() && st.budget > 0 && it != waiting_.end() &&
         num_seqs + (*it)->num_seqs() <= config_.max_num_seqs) {
    Request* req = *it;
    if (!lora_fits(lora_id(req))) {
      ++it;
      continue;
    }
    int64_t num_cached = 0;
    KVCacheBlocks hit = kv_.get_computed_blocks(*req, &num_cached);
    const int64_t num_new = std::min(req->num_tokens() - num_cached, chunk_limit(st.budget));
    req->num_computed_tokens = 0;
    const int64_t reserve = running_.empty() ? 0 : req->num_seqs() - 1;
    if (!kv_.allocate_slots(*req, num_new, &hit, reserve)) break;
    num_seqs += req->num_seqs();
    add_lora(lora_id(req));
    it = waiting_.erase(it);
    req->num_computed_tokens = num_cached;
    if (kv_.pool().enable_caching()) kv_.record_prefix_lookup(req->num_tokens(), num_cached);
    if (req->stats.num_preemptions == 0) req->stats.num_cached_tokens = num_cached;
    if (!req->stats.first_scheduled) req->stats.first_scheduled = Clock::now();
    req->status = RequestStatus::kRunning;
    req->admission_seq = ++admission_counter_;
    running_.push_back(req);
    st.out.scheduled.push_back({req, num_new});
    st.out.total_num_scheduled_tokens += num_new;
    st.budget -= num_new;
  }
}

SchedulerOutput Scheduler::schedule() {
  StepBuilder st;
  st.budget = config_.max_num_batched_tokens;
  schedule_running_requests(st);
  admit_waiting(st);
  st.out.blocks_to_copy = kv_.take_block_copies();
  return std::move(st.out);
}

void Scheduler::update_after_step(const SchedulerOutput& out) {
  for (const auto& s : out.scheduled) {
    s.request->num_computed_tokens += s.num_scheduled_tokens;
    kv_.cache_computed_blocks(*s.request);
  }
}

void Scheduler::reject_drafts(Request& req, int64_t num_rejected) {
  req.num_computed_tokens -= num_rejected;
  kv_.release_rejected(req);
}

}  // namespace kvik
