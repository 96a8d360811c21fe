#include "engine/kv_block_ledger.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"

namespace kvik {

KvBlockLedger::KvBlockLedger(int64_t num_blocks)
    : ref_cnt_(static_cast<size_t>(std::max<int64_t>(num_blocks, 0)), 0), num_free_(num_blocks) {}

std::span<const int32_t> KvBlockLedger::table(int32_t handle) const {
  auto it = tables_.find(handle);
  if (it == tables_.end()) return {};
  return it->second;
}

void KvBlockLedger::acquire(int32_t block_id) {
  if (block_id < 0) return;
  if (ref_cnt_[static_cast<size_t>(block_id)]++ == 0) --num_free_;
}

void KvBlockLedger::release(int32_t block_id) {
  if (block_id < 0) return;
  if (--ref_cnt_[static_cast<size_t>(block_id)] == 0) ++num_free_;
}

std::optional<std::string> KvBlockLedger::apply(const LedgerEdit& e) {
  if (e.index == LedgerEdit::kTruncate) {
    auto it = tables_.find(e.handle);
    const int64_t size = it == tables_.end() ? 0 : static_cast<int64_t>(it->second.size());
    if (e.block_id < 0 || e.block_id > size)
      return fmt::format("request #{} cut to {} blocks, but it holds {}", e.handle, e.block_id, size);
    if (it == tables_.end()) return std::nullopt;
    for (int64_t i = e.block_id; i < size; ++i) release(it->second[static_cast<size_t>(i)]);
    it->second.resize(static_cast<size_t>(e.block_id));
    if (e.block_id == 0) tables_.erase(it);
    return std::nullopt;
  }
  if (e.block_id < -1 || e.block_id >= num_blocks())
    return fmt::format("request #{} given block {}, outside the pool of {} blocks", e.handle, e.block_id, num_blocks());
  auto it = tables_.find(e.handle);
  const int64_t size = it == tables_.end() ? 0 : static_cast<int64_t>(it->second.size());
  if (e.index < 0 || e.index > size)
    return fmt::format("request #{} given block {} at entry {} of its table of {}", e.handle, e.block_id, e.index,
                       size);
  std::vector<int32_t>& t = it == tables_.end() ? tables_[e.handle] : it->second;
  if (e.index == static_cast<int32_t>(t.size())) {
    t.push_back(e.block_id);
  } else {
    release(t[static_cast<size_t>(e.index)]);
    t[static_cast<size_t>(e.index)] = e.block_id;
  }
  acquire(e.block_id);
  return std::nullopt;
}

void KvBlockLedger::sync(int32_t handle, int32_t group, std::span<const int32_t> ids, std::vector<LedgerEdit>& out) {
  const std::span<const int32_t> old = table(handle);
  const size_t first_edit = out.size();
  const size_t common = std::min(old.size(), ids.size());
  for (size_t i = 0; i < common; ++i)
    if (old[i] != ids[i]) out.push_back({handle, group, static_cast<int32_t>(i), ids[i]});
  if (ids.size() < old.size()) out.push_back({handle, group, LedgerEdit::kTruncate, static_cast<int32_t>(ids.size())});
  for (size_t i = old.size(); i < ids.size(); ++i) out.push_back({handle, group, static_cast<int32_t>(i), ids[i]});
  for (size_t i = first_edit; i < out.size(); ++i)
    if (auto err = apply(out[i])) fail("internal: KV block ledger of rank 0: {}", *err);
}

RankBlockLedgers::RankBlockLedgers(int64_t num_blocks, int64_t local_num_blocks) {
  groups_.emplace_back(num_blocks);
  if (local_num_blocks > 0) groups_.emplace_back(local_num_blocks);
}

std::optional<std::string> RankBlockLedgers::publish(const KVCacheManager& kv, std::vector<LedgerEdit>& edits) {
  edits.clear();
  if ((kv.local_group() != nullptr) != (groups_.size() > 1))
    fail("internal: the KV cache manager's groups do not match the ledger's");
  // Requests that hold no blocks any more (finished, preempted): forgotten, their blocks released.
  for (auto it = handles_.begin(); it != handles_.end();) {
    if (kv.tables().count(it->first)) {
      ++it;
      continue;
    }
    for (size_t g = 0; g < groups_.size(); ++g) groups_[g].sync(it->second, static_cast<int32_t>(g), {}, edits);
    it = handles_.erase(it);
  }
  for (const auto& [id, table] : kv.tables()) {
    auto [it, added] = handles_.try_emplace(id, next_handle_);
    if (added) ++next_handle_;
    for (size_t g = 0; g < groups_.size(); ++g) {
      const BlockTable& t = g == 0 ? table : kv.local_group()->block_table(id);
      ids_.resize(t.blocks.size());
      for (size_t i = 0; i < t.blocks.size(); ++i) ids_[i] = t.blocks[i] ? t.blocks[i]->block_id : -1;
      groups_[g].sync(it->second, static_cast<int32_t>(g), ids_, edits);
    }
  }
  num_edits_published_ += static_cast<int64_t>(edits.size());
  const int64_t pool_free[2] = {kv.pool().num_free_blocks(),
                                kv.local_group() ? kv.local_group()->pool().num_free_blocks() : 0};
  for (size_t g = 0; g < groups_.size(); ++g)
    if (groups_[g].num_free_blocks() != pool_free[g])
      return fmt::format("the {} pool has {} free blocks, its ledger {}", g == 0 ? "KV" : "local layers' KV",
                         pool_free[g], groups_[g].num_free_blocks());
  return std::nullopt;
}

int32_t RankBlockLedgers::handle(const std::string& request_id) const {
  auto it = handles_.find(request_id);
  if (it == handles_.end()) fail("internal: request '{}' is scheduled but holds no KV blocks", request_id);
  return it->second;
}

std::optional<std::string> RankBlockLedgers::apply(std::span<const LedgerEdit> edits) {
  for (const LedgerEdit& e : edits) {
    if (e.group < 0 || e.group >= static_cast<int32_t>(groups_.size()))
      return fmt::format("an edit of request #{} names block group {}, this rank has {}", e.handle, e.group,
                         groups_.size());
    if (auto err = groups_[static_cast<size_t>(e.group)].apply(e)) return err;
  }
  return std::nullopt;
}

std::optional<std::string> RankBlockLedgers::check_request(const ForwardBatch& b, int64_t r, int32_t handle,
                                                           int32_t block_size, bool local) const {
  const KvBlockLedger& ledger = groups_[local ? 1 : 0];
  const std::span<const int64_t> slots = local ? b.local_slot_mapping : b.slot_mapping;
  const std::span<const int32_t> tables = local ? b.local_block_tables : b.block_tables;
  const char* pool = local ? "local " : "";
  const std::span<const int32_t> held = ledger.table(handle);
  for (int32_t t = b.query_start_loc[r]; t < b.query_start_loc[r + 1]; ++t) {
    const int64_t pos = b.positions[t], slot = slots[t];
    const int64_t i = pos / block_size;
    const int64_t block = slot / block_size;
    if (slot < 0 || i >= static_cast<int64_t>(held.size()) || held[i] != block || slot % block_size != pos % block_size)
      return fmt::format("request #{} writes position {} to {}slot {} (block {}), but its ledger gives it {}", handle,
                         pos, pool, slot, block,
                         i < static_cast<int64_t>(held.size()) ? fmt::format("block {} there", held[i])
                                                               : fmt::format("only {} blocks", held.size()));
  }
  const int64_t num_read = (b.seq_lens[r] + block_size - 1) / block_size;
  if (num_read > static_cast<int64_t>(held.size()))
    return fmt::format("request #{} reads {} {}blocks, but its ledger gives it {}", handle, num_read, pool,
                       held.size());
  for (int64_t i = 0; i < num_read; ++i) {
    const int32_t read = tables[r * b.max_blocks_per_seq + i];
    if (held[i] >= 0 && read != held[i])
      return fmt::format("request #{} reads {}block {} as its block {}, but its ledger gives it block {} there", handle,
                         pool, read, i, held[i]);
  }
  return std::nullopt;
}

std::optional<std::string> RankBlockLedgers::check_step(const ForwardBatch& b, std::span<const int32_t> handles,
                                                        int32_t block_size, std::span<const int32_t> copies) const {
  for (size_t r = 0; r < handles.size(); ++r) {
    if (auto err = check_request(b, static_cast<int64_t>(r), handles[r], block_size, false)) return err;
    if (!b.local_slot_mapping.empty()) {
      if (groups_.size() < 2) return std::string("the step has local layers' slots, but this rank has no local pool");
      if (auto err = check_request(b, static_cast<int64_t>(r), handles[r], block_size, true)) return err;
    }
  }
  for (size_t i = 0; i + 5 <= copies.size(); i += 5) {
    const int32_t src = copies[i], dst = copies[i + 1], local = copies[i + 3], handle = copies[i + 4];
    if (local < 0 || local >= static_cast<int32_t>(groups_.size()))
      return fmt::format("a copy-on-write names block group {}", local);
    const KvBlockLedger& ledger = groups_[static_cast<size_t>(local)];
    const std::span<const int32_t> held = ledger.table(handle);
    if (src < 0 || src >= ledger.num_blocks() || ledger.ref_cnt(src) == 0)
      return fmt::format("request #{} copies block {}, which no request holds", handle, src);
    if (std::find(held.begin(), held.end(), dst) == held.end())
      return fmt::format("request #{} copies block {} into block {}, which its ledger does not give it", handle, src,
                         dst);
  }
  return std::nullopt;
}

}  // namespace kvik
