// Engine behaviour: output equality across batching, chunking, preemption and prefix caching; block
// accounting invariants; the prefix-caching example of docs/concepts.md.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include "engine/engine_core.h"
#include "engine/single_sequence.h"
#include "model/llama.h"
#include "model/synth.h"
#include "synth_models.h"
#include "validation_util.h"

using namespace kvik;

namespace {

std::unique_ptr<LlamaModel> stories() { return LlamaModel::load(KVIK_SOURCE_DIR "/models/stories260K.gguf"); }

std::string synth_gqa_path() {
  static const std::string path = test_models::write_synth_gqa("kvik_engine_gqa.gguf", 7);
  return path;
}

// Prompts of varied lengths (token ids, BOS first) from a fixed generator.
std::vector<std::vector<int32_t>> make_prompts(int n, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::vector<int32_t>> ps;
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> p = {1};
    const int len = 3 + static_cast<int>(rng() % 60);
    for (int j = 0; j < len; ++j) p.push_back(3 + static_cast<int32_t>(rng() % (vocab - 3)));
    ps.push_back(p);
  }
  return ps;
}

// Adds request `id` to an idle engine and steps until it finishes: its tokens and its prefix-cache hit.
std::pair<std::vector<int32_t>, int64_t> run_alone(EngineCore& e, const std::string& id,
                                                   const std::vector<int32_t>& prompt, const SamplingParams& sp) {
  EXPECT_EQ(msg(e.add_request(id, prompt, sp)), "");
  std::vector<int32_t> out;
  int64_t cached = -1;
  while (e.has_unfinished())
    for (auto& o : e.step()) {
      out.insert(out.end(), o.new_token_ids.begin(), o.new_token_ids.end());
      if (o.finished) cached = o.stats.num_cached_tokens;
    }
  return {out, cached};
}

std::vector<int32_t> greedy_alone(LlamaModel& m, const std::vector<int32_t>& prompt, int max_tokens,
                                  DType kv = DType::F32) {
  SingleSequence s(m, 1024, kv);
  std::vector<float> logits = s.append(prompt);
  std::vector<int32_t> out;
  for (int i = 0; i < max_tokens; ++i) {
    const int32_t t = argmax(logits);
    if (t == 2) break;  // EOS
    out.push_back(t);
    if (static_cast<int>(out.size()) == max_tokens) break;
    const int32_t one[1] = {t};
    logits = s.append(one);
  }
  return out;
}

struct RunResult {
  std::map<std::string, std::vector<int32_t>> tokens;
  std::map<std::string, std::string> finish;
  std::map<std::string, int64_t> cached;
  int64_t preemptions = 0;
  int64_t max_partial_blocks_per_request = 0;
};

RunResult run_engine(LlamaModel& m, const EngineConfig& cfg, const std::vector<std::vector<int32_t>>& prompts,
                     int max_tokens, EngineCore* reuse = nullptr) {
  std::unique_ptr<EngineCore> own;
  EngineCore* e = reuse;
  if (!e) {
    own = std::make_unique<EngineCore>(m, cfg, std::vector<int32_t>{2});
    e = own.get();
  }
  SamplingParams sp;
  sp.temperature = 0;
  sp.max_tokens = max_tokens;
  for (size_t i = 0; i < prompts.size(); ++i)
    EXPECT_EQ(msg(e->add_request("r" + std::to_string(i), prompts[i], sp)), "");
  RunResult r;
  const int64_t preempt_before = 0;
  int guard = 0;
  while (e->has_unfinished()) {
    for (auto& o : e->step()) {
      auto& v = r.tokens[o.request_id];
      v.insert(v.end(), o.new_token_ids.begin(), o.new_token_ids.end());
      if (o.finished) {
        r.finish[o.request_id] = o.finish_reason;
        r.cached[o.request_id] = o.stats.num_cached_tokens;
      }
    }
    // KV waste: each running request holds at most one partly filled block.
    const int32_t bs = e->config().block_size;
    for (const Request* req : e->scheduler().running()) {
      const int64_t blocks = static_cast<int64_t>(e->kv_cache_manager().blocks_of(req->request_id).size());
      const int64_t needed = (req->num_computed_tokens + bs - 1) / bs;
      r.max_partial_blocks_per_request = std::max(r.max_partial_blocks_per_request, blocks - needed + 1);
      EXPECT_LE(blocks * bs - req->num_computed_tokens, bs) << "more than one partly filled block";
    }
    if (++guard > 100000) {
      ADD_FAILURE() << "engine did not finish";
      break;
    }
  }
  r.preemptions = e->scheduler().num_preemptions_total() - preempt_before;
  return r;
}

void expect_equal_outputs(LlamaModel& m, int n_prompts, int max_tokens, DType kv = DType::F32) {
  SCOPED_TRACE(std::string("KV cache ") + std::string(dtype_name(kv)).c_str());
  const auto prompts = make_prompts(n_prompts, m.config().vocab_size, 42);
  std::map<std::string, std::vector<int32_t>> alone;
  for (size_t i = 0; i < prompts.size(); ++i)
    alone["r" + std::to_string(i)] = greedy_alone(m, prompts[i], max_tokens, kv);

  EngineConfig base;
  base.kv_cache_dtype = kv;
  base.max_model_len = 1024;
  base.log_stats = false;
  base.num_kv_blocks = 1024;

  RunResult batched = run_engine(m, base, prompts, max_tokens);
  EXPECT_EQ(batched.tokens, alone) << "batched != alone";

  EngineConfig chunked = base;
  chunked.long_prefill_token_threshold = 7;
  chunked.max_num_batched_tokens = 64;
  RunResult c = run_engine(m, chunked, prompts, max_tokens);
  EXPECT_EQ(c.tokens, alone) << "chunk size 7 != alone";

  EngineConfig tiny = base;
  tiny.max_model_len = 128;
  tiny.num_kv_blocks = 12;  // one sequence of max_model_len needs 8 blocks: preemption is certain
  RunResult p = run_engine(m, tiny, prompts, max_tokens);
  EXPECT_GT(p.preemptions, 0) << "the pool was meant to force preemption";
  EXPECT_EQ(p.tokens, alone) << "with preemption != alone";

  // Second run on the same engine: prompts hit the prefix cache.
  EngineCore e(m, base, {2});
  run_engine(m, base, prompts, max_tokens, &e);
  auto prompts2 = prompts;
  RunResult second;
  {
    SamplingParams sp;
    sp.temperature = 0;
    sp.max_tokens = max_tokens;
    for (size_t i = 0; i < prompts2.size(); ++i)
      ASSERT_EQ(msg(e.add_request("s" + std::to_string(i), prompts2[i], sp)), "");
    while (e.has_unfinished())
      for (auto& o : e.step()) {
        auto& v = second.tokens["r" + o.request_id.substr(1)];
        v.insert(v.end(), o.new_token_ids.begin(), o.new_token_ids.end());
        if (o.finished) second.cached[o.request_id] = o.stats.num_cached_tokens;
      }
  }
  EXPECT_EQ(second.tokens, alone) << "with prefix-cache hits != alone";
  int64_t hits = 0;
  for (auto& [id, c] : second.cached) hits += c;
  EXPECT_GT(hits, 0) << "the second run was meant to hit the prefix cache";
}

}  // namespace

TEST(Engine, OutputEqualityStories) {
  auto m = stories();
  expect_equal_outputs(*m, 12, 40);
}

TEST(Engine, OutputEqualitySynthGqa) {
  auto m = LlamaModel::load(synth_gqa_path());
  expect_equal_outputs(*m, 8, 24);
}

// The quantized caches (and the f16 default) keep every equality: blocks hold the same bytes whatever the batch,
// the chunking, a preemption's recompute or a prefix-cache hit.
TEST(Engine, OutputEqualityStoriesQuantizedKv) {
  auto m = stories();
  for (DType kv : {DType::F16, DType::Q8_0, DType::F8_E4M3}) expect_equal_outputs(*m, 12, 40, kv);
}

TEST(Engine, OutputEqualitySynthGqaQuantizedKv) {
  auto m = LlamaModel::load(synth_gqa_path());
  for (DType kv : {DType::Q8_0, DType::F8_E4M3}) expect_equal_outputs(*m, 8, 24, kv);
}

// A mixture of experts groups each step's tokens by expert, so which tokens share an expert's matmul changes with
// the batch; every token's result must not (Mixtral- and Qwen3-MoE-shaped, packed Q4_K and Q8_0 experts).
TEST(Engine, OutputEqualitySynthMoe) {
  for (const auto& [arch, type] : {std::pair{"mixtral", DType::Q4_K}, std::pair{"qwen3moe", DType::Q8_0}}) {
    SCOPED_TRACE(arch);
    auto m =
        LlamaModel::load(test_models::write_synth_moe(std::string("kvik_engine_") + arch + ".gguf", arch, type, 9));
    expect_equal_outputs(*m, 8, 24);
  }
}

// Sliding-window attention (window 8, shorter than most prompts): every equality holds when a query sees only
// the last 8 keys.
TEST(Engine, OutputEqualitySynthSlidingWindow) {
  auto m = LlamaModel::load(test_models::write_synth_gqa("kvik_engine_swa.gguf", 7, 8));
  ASSERT_EQ(m->config().sliding_window, 8);
  expect_equal_outputs(*m, 8, 24);
}

// Gemma 2 and Gemma 3 (7 layers: local layers with a window of 8, shorter than most prompts, interleaved with
// global ones; Gemma 3's Q8_0 weights run the packed kernels): every equality holds — batched, chunked, preempted
// and recomputed, and with prefix-cache hits.
TEST(Engine, OutputEqualitySynthGemma) {
  for (const auto& [arch, type] : {std::pair{"gemma2", DType::F32}, std::pair{"gemma3", DType::Q8_0}}) {
    SCOPED_TRACE(arch);
    auto m = LlamaModel::load(
        test_models::write_synth_family(std::string("kvik_engine_") + arch + ".gguf", arch, 8, 11, type));
    ASSERT_EQ(m->config().sliding_window, 8);
    ASSERT_FALSE(m->config().all_layers_local());
    expect_equal_outputs(*m, 8, 24);
  }
}

// Phi-3 (fused q/k/v and gate/up rows, each view packed on its own from Q8_0; LongRoPE's long factors and attention
// factor on every position): every equality holds.
TEST(Engine, OutputEqualitySynthPhi3) {
  auto m = LlamaModel::load(test_models::write_synth_family("kvik_engine_phi3.gguf", "phi3", 0, 13, DType::Q8_0));
  ASSERT_EQ(m->config().arch, "phi3");
  ASSERT_FALSE(m->config().rope_freq_factors.empty());
  expect_equal_outputs(*m, 8, 24);
}

// With local layers interleaved with global ones the global layers read every position: their blocks all stay
// held, while the local layers' own pool frees what falls out of the window (window 8, block size 16: at most 2
// blocks once decoding). The output is the one computed alone (SingleSequence keeps everything), and the same
// prompt again hits the prefix cache in both groups.
TEST(Engine, InterleavedWindowFreesOnlyTheLocalLayersBlocks) {
  auto m = LlamaModel::load(test_models::write_synth_family("kvik_engine_gemma3_keep.gguf", "gemma3", 8, 12));
  EngineConfig cfg;
  cfg.max_model_len = 1024;
  cfg.num_kv_blocks = 64;
  cfg.log_stats = false;
  EngineCore e(*m, cfg, {2});
  ASSERT_GT(e.capacity().local_num_blocks, 0);
  ASSERT_TRUE(e.kv_cache_manager().has_local_group());
  std::vector<int32_t> prompt = {1};
  for (int i = 0; i < 70; ++i) prompt.push_back(3 + (i * 37) % 500);
  SamplingParams sp;
  sp.temperature = 0;
  sp.max_tokens = 40;
  ASSERT_EQ(msg(e.add_request("a", prompt, sp)), "");
  std::vector<int32_t> out;
  int64_t max_local_decoding = 0;
  while (e.has_unfinished()) {
    for (auto& o : e.step()) out.insert(out.end(), o.new_token_ids.begin(), o.new_token_ids.end());
    if (!e.has_unfinished()) break;
    const Request* r = e.scheduler().running().front();
    EXPECT_GE(static_cast<int64_t>(e.kv_cache_manager().block_table("a").held().size()),
              (r->num_computed_tokens + cfg.block_size - 1) / cfg.block_size);
    if (out.size() >= 2)
      max_local_decoding =
          std::max<int64_t>(max_local_decoding, e.kv_cache_manager().local_block_table("a").held().size());
  }
  EXPECT_LE(max_local_decoding, 2) << "the local layers kept blocks out of the window";
  EXPECT_GE(max_local_decoding, 1);
  EXPECT_EQ(out, greedy_alone(*m, prompt, 40));
  const auto [out2, cached] = run_alone(e, "b", prompt, sp);
  EXPECT_EQ(out2, out);
  EXPECT_EQ(cached, 64);
}

// Window 8, block size 16: once a decode passes position 64 the sequence holds only the block of its last 8
// positions (plus the one written next); the freed blocks are back in the pool, the output is the one without
// freeing (SingleSequence keeps everything), and a second identical request still hits the prefix cache.
TEST(Engine, SlidingWindowFreesBlocksOutOfTheWindow) {
  auto m = LlamaModel::load(test_models::write_synth_gqa("kvik_engine_swa.gguf", 7, 8));
  EngineConfig cfg;
  cfg.max_model_len = 1024;
  cfg.num_kv_blocks = 64;
  cfg.log_stats = false;
  EngineCore e(*m, cfg, {2});
  std::vector<int32_t> prompt = {1};
  for (int i = 0; i < 70; ++i) prompt.push_back(3 + (i * 37) % 500);
  SamplingParams sp;
  sp.temperature = 0;
  sp.max_tokens = 40;
  ASSERT_EQ(msg(e.add_request("a", prompt, sp)), "");
  std::vector<int32_t> out;
  int64_t max_held_decoding = 0;
  while (e.has_unfinished()) {
    for (auto& o : e.step()) out.insert(out.end(), o.new_token_ids.begin(), o.new_token_ids.end());
    const auto held = e.kv_cache_manager().block_table("a").held();
    // From the second decode on (the freeing happens when a step's slots are allocated).
    if (out.size() >= 2 && e.has_unfinished()) max_held_decoding = std::max<int64_t>(max_held_decoding, held.size());
    EXPECT_EQ(e.kv_cache_manager().pool().num_free_blocks(), cfg.num_kv_blocks - static_cast<int64_t>(held.size()));
  }
  EXPECT_LE(max_held_decoding, 2) << "blocks out of the window were kept";
  EXPECT_GE(max_held_decoding, 1);
  EXPECT_EQ(out, greedy_alone(*m, prompt, 40));
  // The same prompt again: its blocks were freed but kept their hashes, so the prefix cache still has them.
  const auto [out2, cached] = run_alone(e, "b", prompt, sp);
  EXPECT_EQ(out2, out);
  EXPECT_EQ(cached, 64);
}

TEST(Engine, PrefixCachingSharesAllFullBlocks) {
  // docs/concepts.md's example: a 1000-token shared prefix with block size 16 → 62 full blocks = 992 tokens cached;
  // the second request computes only what follows the last full shared block.
  auto m = LlamaModel::load(synth_gqa_path());
  EngineConfig cfg;
  cfg.max_model_len = 1024;
  cfg.num_kv_blocks = 256;
  cfg.log_stats = false;
  EngineCore e(*m, cfg, {2});
  std::mt19937 rng(3);
  std::vector<int32_t> prefix = {1};
  while (prefix.size() < 1000) prefix.push_back(3 + static_cast<int32_t>(rng() % 500));
  auto a = prefix, b = prefix;
  a.push_back(10), a.push_back(11);
  b.push_back(20), b.push_back(21), b.push_back(22);
  SamplingParams sp;
  sp.temperature = 0;
  sp.max_tokens = 2;
  ASSERT_EQ(msg(e.add_request("a", a, sp)), "");
  while (e.has_unfinished()) e.step();
  ASSERT_EQ(msg(e.add_request("b", b, sp)), "");
  int64_t first_step_tokens = -1, cached = -1;
  while (e.has_unfinished()) {
    for (auto& o : e.step())
      if (o.finished) cached = o.stats.num_cached_tokens;
    if (first_step_tokens < 0) first_step_tokens = e.last_step_tokens();
  }
  EXPECT_EQ(cached, 992);
  EXPECT_EQ(first_step_tokens, static_cast<int64_t>(b.size()) - 992);  // 1003 - 992 = 11 tokens prefilled
  const auto& st = e.kv_cache_manager().prefix_cache_stats();
  EXPECT_EQ(st.hits, 992);
  EXPECT_EQ(st.queries, static_cast<int64_t>(a.size() + b.size()));
}

// Every block's ref_cnt equals the number of requests holding it; free ⇔ ref_cnt 0; the running requests'
// sequences fit max_num_seqs; waiting requests hold no blocks.
void expect_block_accounting(const EngineCore& e, const EngineConfig& cfg) {
  const auto& kv = e.kv_cache_manager();
  std::vector<int> holders(cfg.num_kv_blocks, 0);
  int64_t seqs = 0;
  for (const Request* r : e.scheduler().running()) {
    for (const KVCacheBlock* b : kv.blocks_of(r->request_id))
      if (b) ++holders[b->block_id];  // null: freed by a sliding window
    seqs += r->num_seqs();
  }
  ASSERT_LE(seqs, cfg.max_num_seqs);
  for (const Request* r : e.scheduler().waiting()) EXPECT_TRUE(kv.blocks_of(r->request_id).empty());
  std::vector<int32_t> free_ids = kv.pool().free_queue().block_ids();
  std::set<int32_t> free_set(free_ids.begin(), free_ids.end());
  ASSERT_EQ(free_set.size(), free_ids.size()) << "a block is twice in the free list";
  for (int64_t b = 0; b < cfg.num_kv_blocks; ++b) {
    ASSERT_EQ(kv.pool().block(static_cast<int32_t>(b)).ref_cnt, holders[b]) << "block " << b;
    ASSERT_EQ(free_set.count(static_cast<int32_t>(b)) == 1, holders[b] == 0) << "block " << b;
  }
}

TEST(Engine, RandomizedBlockAccountingInvariants) {
  // Random adds (some with n > 1: forked sequences share blocks), aborts (of a sequence or of a whole
  // request) and steps on a tiny pool; after every operation each block's ref_cnt equals the number of
  // requests holding it.
  auto m = stories();
  EngineConfig cfg;
  cfg.max_model_len = 256;
  cfg.num_kv_blocks = 40;  // tiny: forces preemption
  cfg.max_num_seqs = 8;
  cfg.max_num_batched_tokens = 96;
  cfg.log_stats = false;
  EngineCore e(*m, cfg, {2});
  std::mt19937 rng(1234);
  std::set<std::string> live;  // sequences not yet finished
  std::map<std::string, std::string> parent_of;
  std::set<std::string> done;
  int next_id = 0;
  int64_t num_sequences = 0, num_forked = 0;
  int64_t num_aborted = 0;  // sequences whose final output was an abort
  for (int iter = 0; iter < 2000; ++iter) {
    const uint32_t op = rng() % 10;
    if (op < 3) {
      std::vector<int32_t> p = {1};
      const int len = 1 + static_cast<int>(rng() % 120);
      for (int j = 0; j < len; ++j) p.push_back(3 + static_cast<int32_t>(rng() % 8));  // few tokens: shared prefixes
      SamplingParams sp;
      sp.temperature = (rng() % 2) ? 0.0f : 0.8f;
      sp.seed = rng();
      sp.max_tokens = 1 + static_cast<int>(rng() % 40);
      sp.n = (rng() % 3 == 0) ? 2 + static_cast<int32_t>(rng() % 3) : 1;
      const std::string id = "q" + std::to_string(next_id++);
      ASSERT_EQ(msg(e.add_request(id, p, sp)), "");
      for (int32_t i = 0; i < sp.n; ++i) {
        live.insert(sequence_id(id, i, sp.n));
        parent_of[sequence_id(id, i, sp.n)] = id;
      }
      num_sequences += sp.n;
      num_forked += sp.n > 1 ? sp.n : 0;
    } else if (op == 3 && !live.empty()) {
      auto it = live.begin();
      std::advance(it, rng() % live.size());
      e.abort(rng() % 2 ? *it : parent_of[*it]);  // one sequence, or every sequence of its request
    } else {
      for (auto& o : e.step())
        if (o.finished) {
          EXPECT_TRUE(live.count(o.request_id)) << o.request_id;
          EXPECT_FALSE(done.count(o.request_id)) << "finished twice: " << o.request_id;
          EXPECT_EQ(o.parent_id, parent_of[o.request_id]);
          num_aborted += o.finish_reason == "abort";
          live.erase(o.request_id);
          done.insert(o.request_id);
        }
    }
    ASSERT_NO_FATAL_FAILURE(expect_block_accounting(e, cfg));
  }
  // Drain: everything finishes or is aborted, and every block comes back.
  while (e.has_unfinished())
    for (auto& o : e.step())
      if (o.finished) live.erase(o.request_id), done.insert(o.request_id);
  EXPECT_TRUE(live.empty());
  EXPECT_EQ(static_cast<int64_t>(done.size()), num_sequences);
  EXPECT_EQ(e.kv_cache_manager().pool().num_free_blocks(), cfg.num_kv_blocks);
  EXPECT_EQ(e.kv_cache_manager().num_requests(), 0);
  EXPECT_GT(e.scheduler().num_preemptions_total(), 0);
  EXPECT_GT(num_forked, 0);
  EXPECT_GT(e.kv_cache_manager().num_block_copies_total(), 0);
  EXPECT_GT(num_aborted, 0) << "the random aborts reached no live sequence";
}

TEST(Engine, StopsAtEosWithoutEmittingItAndHonoursIgnoreEos) {
  auto m = stories();
  EngineConfig cfg;
  cfg.max_model_len = 256;
  cfg.num_kv_blocks = 64;
  cfg.log_stats = false;
  // Greedy "Once upon a time" continues ", there was ..." (ids 432 383 ...): make 383 the end-of-sequence id.
  EngineCore e(*m, cfg, {383});
  SamplingParams sp;
  sp.temperature = 0;
  sp.max_tokens = 20;
  ASSERT_EQ(msg(e.add_request("a", {1, 403, 407, 261, 378}, sp)), "");
  sp.ignore_eos = true;
  ASSERT_EQ(msg(e.add_request("b", {1, 403, 407, 261, 378}, sp)), "");
  std::map<std::string, std::vector<int32_t>> toks;
  std::map<std::string, std::string> reason;
  while (e.has_unfinished())
    for (auto& o : e.step()) {
      toks[o.request_id].insert(toks[o.request_id].end(), o.new_token_ids.begin(), o.new_token_ids.end());
      if (o.finished) reason[o.request_id] = o.finish_reason;
    }
  EXPECT_EQ(toks["a"], std::vector<int32_t>({432}));
  EXPECT_EQ(reason["a"], "stop");
  EXPECT_EQ(toks["b"].size(), 20u);
  EXPECT_EQ(reason["b"], "length");
}

TEST(Engine, RejectsBadRequestsWithoutDisturbingOthers) {
  auto m = stories();
  EngineConfig cfg;
  cfg.max_model_len = 64;
  cfg.num_kv_blocks = 64;
  cfg.log_stats = false;
  EngineCore e(*m, cfg, {2});
  SamplingParams sp;
  sp.temperature = 0;
  sp.max_tokens = 5;
  ASSERT_EQ(msg(e.add_request("ok", {1, 403}, sp)), "");
  EXPECT_NE(msg(e.add_request("ok", {1, 403}, sp)), "");  // duplicate id
  EXPECT_NE(msg(e.add_request("empty", {}, sp)).find("empty"), std::string::npos);
  EXPECT_NE(msg(e.add_request("oov", {1, 99999}, sp)).find("99999"), std::string::npos);
  EXPECT_NE(msg(e.add_request("long", std::vector<int32_t>(64, 5), sp)).find("max_model_len"), std::string::npos);
  SamplingParams bad = sp;
  bad.top_p = 2;
  EXPECT_NE(msg(e.add_request("badp", {1}, bad)).find("top_p"), std::string::npos);
  int n = 0;
  while (e.has_unfinished())
    for (auto& o : e.step()) n += static_cast<int>(o.new_token_ids.size());
  EXPECT_EQ(n, 5);
}

TEST(Engine, AbortFreesBlocksImmediately) {
  auto m = stories();
  EngineConfig cfg;
  cfg.max_model_len = 256;
  cfg.num_kv_blocks = 64;
  cfg.log_stats = false;
  EngineCore e(*m, cfg, {});
  SamplingParams sp;
  sp.max_tokens = 100;
  ASSERT_EQ(msg(e.add_request("x", std::vector<int32_t>(100, 7), sp)), "");
  e.step();
  EXPECT_LT(e.kv_cache_manager().pool().num_free_blocks(), 64);
  e.abort("x");
  auto outs = e.step();
  ASSERT_EQ(outs.size(), 1u);
  EXPECT_EQ(outs[0].finish_reason, "abort");
  EXPECT_EQ(e.kv_cache_manager().pool().num_free_blocks(), 64);
  EXPECT_FALSE(e.has_unfinished());
}

TEST(Engine, LogitBiasMinTokensAndStopTokenIds) {
  auto m = stories();
  EngineConfig cfg;
  cfg.max_model_len = 256;
  cfg.num_kv_blocks = 64;
  cfg.log_stats = false;
  const std::vector<int32_t> prompt = {1, 403, 407, 261, 378};  // greedy: 432 383 286 261 376 ...
  auto run = [&](const SamplingParams& sp, std::vector<int32_t> eos, std::string* reason) {
    EngineCore e(*m, cfg, std::move(eos));
    EXPECT_EQ(msg(e.add_request("r", prompt, sp)), "");
    std::vector<int32_t> toks;
    while (e.has_unfinished())
      for (auto& o : e.step()) {
        toks.insert(toks.end(), o.new_token_ids.begin(), o.new_token_ids.end());
        if (o.finished && reason) *reason = o.finish_reason;
      }
    return toks;
  };
  SamplingParams sp;
  sp.temperature = 0;
  sp.max_tokens = 4;
  EXPECT_EQ(run(sp, {}, nullptr), std::vector<int32_t>({432, 383, 286, 261}));
  // A +100 bias makes token 7 the greedy choice at every step; -100 on 432 changes the first token.
  SamplingParams biased = sp;
  biased.logit_bias = {{7, 100.0f}};
  EXPECT_EQ(run(biased, {}, nullptr), std::vector<int32_t>({7, 7, 7, 7}));
  biased.logit_bias = {{432, -100.0f}};
  EXPECT_NE(run(biased, {}, nullptr).front(), 432);
  // stop_token_ids: 286 ends the output (not emitted) with "stop".
  SamplingParams stopping = sp;
  stopping.stop_token_ids = {286};
  std::string reason;
  EXPECT_EQ(run(stopping, {}, &reason), std::vector<int32_t>({432, 383}));
  EXPECT_EQ(reason, "stop");
  // min_tokens: with 383 as EOS the output would stop after one token; min_tokens 3 forbids EOS until then.
  SamplingParams min3 = sp;
  min3.max_tokens = 6;
  min3.min_tokens = 3;
  const auto out = run(min3, {383}, &reason);
  EXPECT_GE(out.size(), 3u);
  EXPECT_EQ(std::count(out.begin(), out.begin() + 3, 383), 0);
  // Validation names the field, in the message and as the typed error's param.
  EngineCore e(*m, cfg, {});
  SamplingParams bad = sp;
  bad.logit_bias = {{99999, 1.0f}};
  EXPECT_NE(msg(e.add_request("b1", prompt, bad)).find("logit_bias"), std::string::npos);
  EXPECT_EQ(param(e.add_request("b1", prompt, bad)), "logit_bias");
  bad = sp;
  bad.min_tokens = 10;
  EXPECT_NE(msg(e.add_request("b2", prompt, bad)).find("min_tokens"), std::string::npos);
  EXPECT_EQ(param(e.add_request("b2", prompt, bad)), "min_tokens");
  bad = sp;
  bad.stop_token_ids = {-1};
  EXPECT_NE(msg(e.add_request("b3", prompt, bad)).find("stop_token_ids"), std::string::npos);
  EXPECT_EQ(param(e.add_request("b3", prompt, bad)), "stop_token_ids");
  bad = sp;
  bad.n = 1000;
  EXPECT_EQ(param(e.add_request("b4", prompt, bad)), "n");
  EXPECT_EQ(param(e.add_request("b5", {}, sp)), "prompt");
  bad = sp;
  bad.structured_output = StructuredOutputSpec::regex("(");
  EXPECT_EQ(param(e.add_request("b6", prompt, bad)), "guided_regex") << "no vocabulary: structured output refused";
  EXPECT_EQ(param(e.add_request("b7", prompt, sp)), "<none>");
}
