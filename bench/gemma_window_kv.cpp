// KV bytes a 32k-token conversation holds on Gemma-3-shaped models (the released layer counts, KV heads, head
// dimension, 5 local : 1 global pattern and windows), with the local layers' blocks freed out of the window vs the
// same without freeing (one pool for every layer, as before). Computed from the engine's block accounting: a
// KVCacheManager drives one request through chunked prefill of the conversation and its decode, as the scheduler
// would; no weights are needed (the accounting does not depend on them). Also the capacity plan for a 16 GiB KV
// budget: how many 32k-token requests fit either way. Prints one JSON object.
// Usage: bench_gemma_window_kv [--tokens 32768] [--decode 512] [--block-size 16] [--budget-gib 16]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/kv_cache_manager.h"
#include "engine/request.h"
#include "model/kv_cache.h"
#include "model/model_config.h"

using namespace kvik;

namespace {

struct Shape {
  const char* name;
  int64_t layers, n_kv, head_dim, window;
};

ModelConfig gemma3(const Shape& s) {
  ModelConfig c;
  c.arch = "gemma3", c.name = s.name, c.n_layers = s.layers, c.n_kv_heads = s.n_kv, c.head_dim = s.head_dim;
  c.n_heads = s.n_kv, c.dim = s.n_kv * s.head_dim, c.sliding_window = s.window, c.sliding_window_pattern = 6;
  return c;
}

// Blocks held at the end and at the peak of one request of `prompt` tokens prefilled in chunks of `chunk`, then
// `decode` tokens one by one: {global end, local end, global peak, local peak}.
std::vector<int64_t> drive(const ModelConfig& c, int32_t bs, int64_t prompt, int64_t chunk, int64_t decode) {
  const int64_t blocks = (prompt + decode + bs - 1) / bs + 4;
  KVCacheManager kv(blocks, bs, true, c.sliding_window, blocks);
  std::vector<int32_t> ids(static_cast<size_t>(prompt));
  for (int64_t i = 0; i < prompt; ++i) ids[static_cast<size_t>(i)] = static_cast<int32_t>(3 + i % 1000);
  Request r("conv", std::move(ids), SamplingParams{}, {}, 0);
  int64_t peak_g = 0, peak_l = 0;
  const auto step = [&](int64_t n) {
    if (!kv.allocate_slots(r, n)) {
      std::fprintf(stderr, "pool too small\n");
      std::exit(1);
    }
    r.num_computed_tokens += n;
    kv.cache_computed_blocks(r);
    peak_g = std::max<int64_t>(peak_g, kv.block_table("conv").held().size());
    peak_l = std::max<int64_t>(peak_l, kv.local_block_table("conv").held().size());
  };
  while (r.num_computed_tokens < prompt) step(std::min(chunk, prompt - r.num_computed_tokens));
  for (int64_t i = 0; i < decode; ++i) {
    r.append_output_token(7);
    step(1);
  }
  return {static_cast<int64_t>(kv.block_table("conv").held().size()),
          static_cast<int64_t>(kv.local_block_table("conv").held().size()), peak_g, peak_l};
}

}  // namespace

int main(int argc, char** argv) {
  int64_t tokens = 32768, decode = 512, budget_gib = 16;
  int32_t bs = 16;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const int64_t v = std::atoll(argv[i + 1]);
    if (a == "--tokens")
      tokens = v;
    else if (a == "--decode")
      decode = v;
    else if (a == "--block-size")
      bs = static_cast<int32_t>(v);
    else if (a == "--budget-gib")
      budget_gib = v;
    else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  const Shape shapes[] = {{"gemma-3-1b", 26, 1, 256, 512},
                          {"gemma-3-4b", 34, 4, 256, 1024},
                          {"gemma-3-12b", 48, 8, 256, 1024},
                          {"gemma-3-27b", 62, 16, 128, 1024}};
  nlohmann::ordered_json out = {
      {"bench", "gemma_window_kv"},       {"source", "KVCacheManager block accounting (no weights), f16 KV cache"},
      {"conversation_tokens", tokens},    {"prefill_chunk", 2048},
      {"of_which_decoded", decode},       {"block_size", bs},
      {"models", nlohmann::json::array()}};
  for (const Shape& s : shapes) {
    const ModelConfig c = gemma3(s);
    int64_t n_local = 0;
    for (int64_t l = 0; l < c.n_layers; ++l) n_local += c.layer_is_local(l);
    const int64_t row = kv_row_bytes(DType::F16, c.kv_dim());
    const int64_t local_bpt = 2 * n_local * row, global_bpt = 2 * (c.n_layers - n_local) * row;
    const std::vector<int64_t> h = drive(c, bs, tokens - decode, 2048, decode);
    const int64_t blocks_all = (tokens + bs - 1) / bs;
    const int64_t freed = h[0] * bs * global_bpt + h[1] * bs * local_bpt;
    const int64_t kept = blocks_all * bs * (global_bpt + local_bpt);
    const int64_t peak = h[2] * bs * global_bpt + h[3] * bs * local_bpt;
    KvCacheBudget b;
    b.block_size = bs, b.max_model_len = tokens, b.max_num_seqs = 256, b.kv_cache_memory_gib = budget_gib;
    b.dtype = DType::F16;
    const KvCapacity with = plan_kv_capacity(c, b, 0);
    ModelConfig one_pool = c;
    one_pool.sliding_window = 0;  // every layer in one pool: what kvik did before (and any full-attention model)
    const KvCapacity without = plan_kv_capacity(one_pool, b, 0);
    out["models"].push_back({{"model", s.name},
                             {"layers", s.layers},
                             {"local_layers", n_local},
                             {"window", s.window},
                             {"kv_bytes_without_freeing", kept},
                             {"kv_bytes_with_local_freeing", freed},
                             {"kv_bytes_peak_with_freeing", peak},
                             {"ratio", static_cast<double>(kept) / static_cast<double>(freed)},
                             {"global_blocks_held", h[0]},
                             {"local_blocks_held", h[1]},
                             {"budget_gib", budget_gib},
                             {"requests_of_this_length_fitting_with", with.max_concurrency},
                             {"requests_of_this_length_fitting_without", without.max_concurrency}});
  }
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}
