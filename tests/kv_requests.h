// Fake requests for the KV cache manager tests (no model): prompts of consecutive token ids, and a whole prompt run
// through allocate + compute + cache as the scheduler and the step would.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "engine/kv_cache_manager.h"
#include "engine/request.h"

namespace kvik::test {

inline std::unique_ptr<Request> fake_request(const std::string& id, int64_t len, int32_t first = 100) {
  std::vector<int32_t> prompt(static_cast<size_t>(len));
  for (int64_t i = 0; i < len; ++i) prompt[static_cast<size_t>(i)] = first + static_cast<int32_t>(i);
  return std::make_unique<Request>(id, std::move(prompt), SamplingParams{}, std::vector<int32_t>{}, 0);
}

inline void prefill(KVCacheManager& kv, Request& r) {
  int64_t cached = 0;
  KVCacheBlocks hit = kv.get_computed_blocks(r, &cached);
  ASSERT_TRUE(kv.allocate_slots(r, r.num_tokens() - cached, &hit));
  r.num_computed_tokens = r.num_tokens();
  kv.cache_computed_blocks(r);
}

}  // namespace kvik::test
