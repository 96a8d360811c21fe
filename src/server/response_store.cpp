#include "server/response_store.h"

namespace kvik::server {

namespace {

std::string slot_of(const std::string& key, const std::string& id) { return key + '\0' + id; }

// The ids of a response's output items, as slots under `key`.
std::vector<std::string> item_slots(const std::string& key, const StoredResponse& r) {
  std::vector<std::string> slots;
  if (auto out = r.response.find("output"); out != r.response.end() && out->is_array())
    for (const auto& item : *out)
      if (item.contains("id") && item["id"].is_string()) slots.push_back(slot_of(key, item["id"].get<std::string>()));
  return slots;
}

}  // namespace

size_t ResponseStore::size_of(const StoredResponse& r) {
  size_t n = r.response.dump().size();
  for (const ChatMessage& m : r.conversation) {
    n += m.role.size() + m.tool_call_id.size() + (m.reasoning ? m.reasoning->size() : 0) + m.fields.dump().size();
    for (const std::string& p : m.content.parts) n += p.size();
    for (const ChatToolCall& c : m.tool_calls) n += c.id.size() + c.name.size() + c.arguments.dump().size();
  }
  return n;
}

void ResponseStore::put(const std::string& key, const std::string& id, std::shared_ptr<const StoredResponse> r) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string slot = slot_of(key, id);
  if (auto it = index_.find(slot); it != index_.end()) drop_locked(it->second);
  if (r->bytes > limits_.max_bytes || limits_.max_responses == 0) return;
  bytes_ += r->bytes;
  lru_.push_front({slot, key, std::move(r)});
  index_[slot] = lru_.begin();
  for (const std::string& s : item_slots(key, *lru_.front().response)) items_[s] = lru_.begin();
  evict_locked();
}

void ResponseStore::drop_locked(std::list<Entry>::iterator it) {
  bytes_ -= it->response->bytes;
  for (const std::string& s : item_slots(it->key, *it->response))
    if (auto i = items_.find(s); i != items_.end() && i->second == it) items_.erase(i);
  index_.erase(it->slot);
  lru_.erase(it);
}

void ResponseStore::evict_locked() {
  while (!lru_.empty() && (lru_.size() > limits_.max_responses || bytes_ > limits_.max_bytes))
    drop_locked(std::prev(lru_.end()));
}

std::optional<nlohmann::ordered_json> ResponseStore::item(const std::string& key, const std::string& item_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = items_.find(slot_of(key, item_id));
  if (it == items_.end()) return std::nullopt;
  for (const auto& item : it->second->response->response.at("output"))
    if (item.value("id", "") == item_id) return item;
  return std::nullopt;
}

std::shared_ptr<const StoredResponse> ResponseStore::get(const std::string& key, const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(slot_of(key, id));
  if (it == index_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->response;
}

bool ResponseStore::erase(const std::string& key, const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(slot_of(key, id));
  if (it == index_.end()) return false;
  drop_locked(it->second);
  return true;
}

size_t ResponseStore::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lru_.size();
}

size_t ResponseStore::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

}  // namespace kvik::server
