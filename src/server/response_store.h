// The Responses API's stored responses (`store`, default true): what GET /v1/responses/{id} returns and what a
// request naming it as previous_response_id continues from. In memory, bounded by count and bytes, least recently
// used first out, and per API key: a response is found only with the key that created it. Thread-safe (responses
// are stored from the I/O threads that finish them).
#pragma once

#include <cstddef>
#include <list>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "server/chat_request.h"

namespace kvik::server {

struct ResponseStoreLimits {
  size_t max_responses = 1024;      // --responses-store-max
  size_t max_bytes = 256ull << 20;  // --responses-store-bytes: the responses and their conversations together
};

struct StoredResponse {
  nlohmann::ordered_json response;  // the response object, as GET returns it
  // The conversation a later request continues: this request's messages without its instructions (they do not
  // carry over, as in OpenAI's API), then its output as an assistant turn.
  std::vector<ChatMessage> conversation;
  size_t bytes = 0;  // what it counts against max_bytes
};

class ResponseStore {
 public:
  explicit ResponseStore(ResponseStoreLimits limits) : limits_(limits) {}

  // Stores (or replaces) `id` under `key`, then drops the least recently used responses until both bounds hold.
  // A response larger than max_bytes alone is not kept.
  void put(const std::string& key, const std::string& id, std::shared_ptr<const StoredResponse> r);
  // The response, or null; a hit counts as a use.
  std::shared_ptr<const StoredResponse> get(const std::string& key, const std::string& id);
  bool erase(const std::string& key, const std::string& id);
  // An output item (by its "id": msg_…, fc_…, rs_…) of a response stored under `key`, for `item_reference` inputs.
  std::optional<nlohmann::ordered_json> item(const std::string& key, const std::string& item_id) const;
  size_t size() const;
  size_t bytes() const;

  // The bytes a stored response counts: its JSON and its conversation's text.
  static size_t size_of(const StoredResponse& r);

 private:
  struct Entry {
    std::string slot;  // key + '\0' + id
    std::string key;
    std::shared_ptr<const StoredResponse> response;
  };
  void evict_locked();
  void drop_locked(std::list<Entry>::iterator it);

  ResponseStoreLimits limits_;
  mutable std::mutex mu_;
  std::list<Entry> lru_;  // most recently used first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
  std::unordered_map<std::string, std::list<Entry>::iterator> items_;  // key + '\0' + item id → its response
  size_t bytes_ = 0;
};

}  // namespace kvik::server
