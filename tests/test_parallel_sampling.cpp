// Parallel sampling (SamplingParams::n > 1): the prompt is prefilled once, the request forks into n
// sequences sharing the prompt's KV blocks, and the partly filled last block is copied on write. Every
// sequence must equal the request run alone with seed + i (tokens and logprobs, so the KV each one reads is
// exactly the unshared one), and the block accounting must come back to an empty pool.
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <random>
#include <regex>
#include <set>

#include <fmt/format.h>

#include "engine/engine_core.h"
#include "engine/structured/vocab_trie.h"
#include "model/llama.h"
#include "model/synth.h"
#include "synth_models.h"
#include "tokenizer/tokenizer.h"
#include "validation_util.h"

using namespace kvik;

namespace {

const std::string kStories = KVIK_SOURCE_DIR "/models/stories260K.gguf";

std::string synth_gqa_path() {
  static const std::string path = test_models::write_synth_gqa("kvik_parallel_gqa.gguf", 11);
  return path;
}

std::vector<int32_t> make_prompt(int len, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> p = {1};
  while (static_cast<int>(p.size()) < len) p.push_back(3 + static_cast<int32_t>(rng() % (vocab - 3)));
  return p;
}

struct Seq {
  std::vector<int32_t> tokens;
  std::vector<TokenLogprobs> logprobs;
  std::string finish;
  int64_t preemptions = 0;
  int64_t num_finals = 0;  // final outputs received (must be exactly 1)
};

void collect(std::map<std::string, Seq>& out, const std::vector<RequestOutput>& outputs) {
  for (const RequestOutput& o : outputs) {
    Seq& s = out[o.request_id];
    s.tokens.insert(s.tokens.end(), o.new_token_ids.begin(), o.new_token_ids.end());
    s.logprobs.insert(s.logprobs.end(), o.logprobs.begin(), o.logprobs.end());
    if (o.finished) {
      s.finish = o.finish_reason;
      s.preemptions = o.stats.num_preemptions;
      ++s.num_finals;
    }
  }
}

std::map<std::string, Seq> drain(EngineCore& e, std::map<std::string, Seq> out = {}) {
  int guard = 0;
  while (e.has_unfinished()) {
    collect(out, e.step());
    if (++guard > 100000) {
      ADD_FAILURE() << "engine did not finish";
      break;
    }
  }
  return out;
}

void expect_same(const Seq& got, const Seq& want, const std::string& what) {
  EXPECT_EQ(got.tokens, want.tokens) << what;
  EXPECT_EQ(got.finish, want.finish) << what;
  ASSERT_EQ(got.logprobs.size(), want.logprobs.size()) << what;
  for (size_t t = 0; t < got.logprobs.size(); ++t) {
    // Exact: the same logits row bit for bit (max diff 0), hence the same KV read.
    EXPECT_EQ(got.logprobs[t].token, want.logprobs[t].token) << what << " token " << t;
    EXPECT_EQ(got.logprobs[t].logprob, want.logprobs[t].logprob) << what << " token " << t;
    EXPECT_EQ(got.logprobs[t].top, want.logprobs[t].top) << what << " token " << t;
  }
}

// Sequence i of an n-request, run as its own request with seed + i in a fresh engine.
std::vector<Seq> run_separately(LlamaModel& m, const EngineConfig& cfg, const std::vector<int32_t>& prompt,
                                const SamplingParams& sp, int n, std::vector<std::string> token_bytes = {}) {
  std::vector<Seq> out;
  for (int i = 0; i < n; ++i) {
    EngineCore e(m, cfg, {2});
    if (!token_bytes.empty()) e.enable_structured_output(token_bytes);
    SamplingParams one = sp;
    one.n = 1;
    one.seed = *sp.seed + static_cast<uint64_t>(i);
    EXPECT_EQ(msg(e.add_request("alone", prompt, one)), "");
    out.push_back(drain(e)["alone"]);
  }
  return out;
}

EngineConfig config(int32_t block_size, int64_t num_blocks) {
  EngineConfig c;
  c.max_model_len = 256;
  c.block_size = block_size;
  c.num_kv_blocks = num_blocks;
  c.log_stats = false;
  return c;
}

int64_t blocks_in_use(const EngineCore& e) {
  const BlockPool& p = e.kv_cache_manager().pool();
  return p.num_blocks() - p.num_free_blocks();
}

void expect_pool_empty(const EngineCore& e) {
  const BlockPool& p = e.kv_cache_manager().pool();
  EXPECT_EQ(p.num_free_blocks(), p.num_blocks());
  for (int32_t b = 0; b < p.num_blocks(); ++b) ASSERT_EQ(p.block(b).ref_cnt, 0) << "block " << b;
  EXPECT_EQ(e.kv_cache_manager().num_requests(), 0);
}

void expect_n_equals_separate(LlamaModel& m) {
  const int n = 4;
  for (int32_t bs : {1, 16})
    for (int len : {37, 32})
      for (float temperature : {0.0f, 1.0f}) {
        const std::string what = fmt::format("block {} prompt {} temperature {}", bs, len, temperature);
        const EngineConfig cfg = config(bs, 4096 / bs);
        const auto prompt = make_prompt(len, m.config().vocab_size, 5 + static_cast<uint32_t>(len));
        SamplingParams sp;
        sp.n = n;
        sp.temperature = temperature;
        sp.seed = 1234;
        sp.max_tokens = 40;
        sp.logprobs = 3;
        const std::vector<Seq> want = run_separately(m, cfg, prompt, sp, n);
        EngineCore e(m, cfg, {2});
        ASSERT_EQ(msg(e.add_request("g", prompt, sp)), "");
        std::map<std::string, Seq> got;
        collect(got, e.step());
        EXPECT_EQ(e.last_step_tokens(), len) << what << ": the prompt is prefilled once";
        while (e.has_unfinished()) {
          collect(got, e.step());
          EXPECT_LE(e.last_step_tokens(), n) << what << ": then one token per sequence";
        }
        for (int i = 0; i < n; ++i) {
          const std::string id = sequence_id("g", i, n);
          EXPECT_EQ(got[id].num_finals, 1) << what << " " << id;
          expect_same(got[id], want[i], what + " sequence " + std::to_string(i));
        }
        EXPECT_EQ(got.size(), static_cast<size_t>(n));
        expect_pool_empty(e);
      }
}

}  // namespace

TEST(ParallelSampling, SequencesEqualSeparateSeededRequestsStories) {
  auto m = LlamaModel::load(kStories);
  expect_n_equals_separate(*m);
}

TEST(ParallelSampling, SequencesEqualSeparateSeededRequestsSynthGqa) {
  auto m = LlamaModel::load(synth_gqa_path());
  expect_n_equals_separate(*m);
}

// A Gemma 3 with a window of 8 on its local layers, which keep their KV in a pool of their own: the forked
// sequences share and copy-on-write blocks in both pools.
TEST(ParallelSampling, SequencesEqualSeparateSeededRequestsSynthGemma) {
  auto m = LlamaModel::load(test_models::write_synth_family("kvik_parallel_gemma3.gguf", "gemma3", 8, 21));
  expect_n_equals_separate(*m);
}

TEST(ParallelSampling, PromptBlocksSharedAndPartialBlockCopiedOnWrite) {
  auto m = LlamaModel::load(kStories);
  const int n = 4;
  struct Case {
    int32_t block_size;
    int len;
    int64_t after_fork, after_first_decode, copies;
  };
  // 37 tokens, blocks of 16: 3 blocks (the last holds 5 slots) shared by all 4; at the first decode 3
  // sequences copy the partial block, the last writer keeps it: 3 + 3. 32 tokens: no partial block, each
  // sequence starts a new block: 2 + 4, no copy. Blocks of 1: never a partial block: 37 + 4.
  for (const Case c : {Case{16, 37, 3, 6, 3}, Case{16, 32, 2, 6, 0}, Case{1, 37, 37, 41, 0}}) {
    const std::string what = fmt::format("block {} prompt {}", c.block_size, c.len);
    EngineCore e(*m, config(c.block_size, 2048 / c.block_size), {2});
    SamplingParams sp;
    sp.n = n;
    sp.seed = 7;
    sp.max_tokens = 30;
    sp.ignore_eos = true;
    ASSERT_EQ(msg(e.add_request("g", make_prompt(c.len, 512, 3), sp)), "");
    const auto& kv = e.kv_cache_manager();
    std::map<std::string, Seq> got;
    collect(got, e.step());  // prefill, sample 4 times, fork
    ASSERT_EQ(got.size(), static_cast<size_t>(n)) << what;
    EXPECT_EQ(blocks_in_use(e), c.after_fork) << what;
    EXPECT_EQ(e.scheduler().num_running(), n) << what;
    const std::vector<int32_t> shared = kv.block_ids(sequence_id("g", 0, n));
    for (int i = 0; i < n; ++i) EXPECT_EQ(kv.block_ids(sequence_id("g", i, n)), shared) << what;
    for (int32_t b : shared) EXPECT_EQ(kv.pool().block(b).ref_cnt, n) << what << " block " << b;

    collect(got, e.step());  // every sequence decodes one token
    EXPECT_EQ(blocks_in_use(e), c.after_first_decode) << what;
    EXPECT_EQ(kv.num_block_copies_total(), c.copies) << what;
    const int64_t full = c.len / c.block_size;
    for (int i = 0; i < n; ++i) {
      const std::vector<int32_t> ids = kv.block_ids(sequence_id("g", i, n));
      for (int64_t b = 0; b < full; ++b) EXPECT_EQ(ids[b], shared[b]) << what << ": full prompt blocks stay shared";
      for (size_t b = full; b < ids.size(); ++b) EXPECT_EQ(kv.pool().block(ids[b]).ref_cnt, 1) << what;
      if (c.copies > 0) {
        // The last sequence to write kept the original partial block; the others hold private copies.
        if (i == n - 1)
          EXPECT_EQ(ids[full], shared[full]) << what;
        else
          EXPECT_NE(ids[full], shared[full]) << what;
      }
    }
    got = drain(e, got);
    for (int i = 0; i < n; ++i) EXPECT_EQ(got[sequence_id("g", i, n)].tokens.size(), 30u) << what;
    EXPECT_EQ(kv.prefix_cache_stats().queries, c.len) << what << ": one prefix-cache lookup, for the prompt";
    expect_pool_empty(e);
  }
}

TEST(ParallelSampling, KvBlocksAndPrefillSavedForEightSequences) {
  // n = 8 on a 200-token prompt vs eight separate requests admitted together (no prefix-cache help: they
  // all miss in the same step). Reports the peak KV blocks and prefill tokens of both.
  auto m = LlamaModel::load(kStories);
  const auto prompt = make_prompt(200, 512, 9);
  SamplingParams sp;
  sp.seed = 3;
  sp.max_tokens = 8;
  sp.ignore_eos = true;
  auto measure = [&](bool parallel, int64_t* peak, int64_t* tokens) {
    EngineCore e(*m, config(16, 512), {2});
    if (parallel) {
      SamplingParams p = sp;
      p.n = 8;
      EXPECT_EQ(msg(e.add_request("g", prompt, p)), "");
    } else {
      for (int i = 0; i < 8; ++i) {
        SamplingParams p = sp;
        p.seed = *sp.seed + static_cast<uint64_t>(i);
        EXPECT_EQ(msg(e.add_request("r" + std::to_string(i), prompt, p)), "");
      }
    }
    *peak = *tokens = 0;
    while (e.has_unfinished()) {
      e.step();
      *peak = std::max(*peak, blocks_in_use(e));
      *tokens += e.last_step_tokens();
    }
  };
  int64_t peak_n, tokens_n, peak_sep, tokens_sep;
  measure(true, &peak_n, &tokens_n);
  measure(false, &peak_sep, &tokens_sep);
  // 200 tokens = 12 full blocks + 8 slots; 8 tokens more fill that 13th block in every sequence.
  EXPECT_EQ(peak_n, 13 + 7);    // shared prompt blocks + 7 copies of the partial one
  EXPECT_EQ(peak_sep, 8 * 13);  // every request its own prompt blocks
  EXPECT_EQ(tokens_n, 200 + 7 * 8);
  EXPECT_EQ(tokens_sep, 8 * 200 + 7 * 8);
  std::printf(
      "n=8, 200-token prompt: peak KV blocks %lld (parallel) vs %lld (separate); "
      "tokens computed %lld vs %lld\n",
      static_cast<long long>(peak_n), static_cast<long long>(peak_sep), static_cast<long long>(tokens_n),
      static_cast<long long>(tokens_sep));
}

TEST(ParallelSampling, AbortOneSequenceOthersContinueIdentically) {
  auto m = LlamaModel::load(kStories);
  const EngineConfig cfg = config(16, 256);
  const auto prompt = make_prompt(37, 512, 21);
  SamplingParams sp;
  sp.n = 4;
  sp.seed = 99;
  sp.max_tokens = 30;
  sp.ignore_eos = true;
  sp.logprobs = 1;
  const std::vector<Seq> want = run_separately(*m, cfg, prompt, sp, 4);

  EngineCore e(*m, cfg, {2});
  ASSERT_EQ(msg(e.add_request("g", prompt, sp)), "");
  std::map<std::string, Seq> got;
  for (int s = 0; s < 6; ++s) collect(got, e.step());
  e.abort("g-1");
  got = drain(e, got);
  EXPECT_EQ(got["g-1"].finish, "abort");
  EXPECT_EQ(got["g-1"].num_finals, 1);
  ASSERT_LT(got["g-1"].tokens.size(), want[1].tokens.size());
  EXPECT_TRUE(std::equal(got["g-1"].tokens.begin(), got["g-1"].tokens.end(), want[1].tokens.begin()));
  for (int i : {0, 2, 3}) expect_same(got[sequence_id("g", i, 4)], want[i], "sequence " + std::to_string(i));
  expect_pool_empty(e);

  // Abort all by the request's id.
  ASSERT_EQ(msg(e.add_request("h", prompt, sp)), "");
  got.clear();
  for (int s = 0; s < 3; ++s) collect(got, e.step());
  e.abort("h");
  got = drain(e, got);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(got[sequence_id("h", i, 4)].finish, "abort");
    EXPECT_EQ(got[sequence_id("h", i, 4)].num_finals, 1);
  }
  expect_pool_empty(e);
  EXPECT_FALSE(e.has_unfinished());
  EXPECT_EQ(msg(e.add_request("h", prompt, sp)), "") << "the id is free again";
  e.abort("h");
  drain(e);
}

TEST(ParallelSampling, AbortBeforeTheForkStrikesTheSequence) {
  // Chunked prefill (8 tokens a step) keeps the request before its fork for a few steps.
  auto m = LlamaModel::load(kStories);
  EngineConfig cfg = config(16, 256);
  cfg.long_prefill_token_threshold = 8;
  const auto prompt = make_prompt(37, 512, 22);
  SamplingParams sp;
  sp.n = 4;
  sp.seed = 5;
  sp.max_tokens = 12;
  sp.temperature = 0.9f;
  const std::vector<Seq> want = run_separately(*m, cfg, prompt, sp, 4);

  EngineCore e(*m, cfg, {2});
  ASSERT_EQ(msg(e.add_request("g", prompt, sp)), "");
  std::map<std::string, Seq> got;
  collect(got, e.step());
  EXPECT_TRUE(got.empty());
  e.abort("g-2");
  collect(got, e.step());
  ASSERT_EQ(got.count("g-2"), 1u) << "the aborted sequence is reported at once";
  EXPECT_EQ(got["g-2"].finish, "abort");
  EXPECT_TRUE(got["g-2"].tokens.empty());
  got = drain(e, got);
  EXPECT_EQ(got["g-2"].num_finals, 1);
  EXPECT_TRUE(got["g-2"].tokens.empty());
  for (int i : {0, 1, 3}) expect_same(got[sequence_id("g", i, 4)], want[i], "sequence " + std::to_string(i));
  expect_pool_empty(e);

  // Every sequence aborted one by one before the fork: the prompt's blocks go too.
  ASSERT_EQ(msg(e.add_request("h", prompt, sp)), "");
  e.step();
  EXPECT_GT(blocks_in_use(e), 0);
  for (int i = 0; i < 4; ++i) e.abort(sequence_id("h", i, 4));
  got = drain(e);
  EXPECT_EQ(got.size(), 4u);
  for (auto& [id, s] : got) EXPECT_EQ(s.finish, "abort") << id;
  EXPECT_EQ(e.scheduler().num_running() + e.scheduler().num_waiting(), 0);
  expect_pool_empty(e);
}

TEST(ParallelSampling, PreemptedSequencesResumeIdentically) {
  // A pool of 14 blocks of 16 for two n = 3 requests whose sequences each grow to 7 blocks: forked
  // sequences (and requests before their fork) are preempted and recomputed.
  auto m = LlamaModel::load(kStories);
  EngineConfig tiny = config(16, 14);
  tiny.max_model_len = 128;
  const EngineConfig roomy = config(16, 512);
  const auto pa = make_prompt(37, 512, 31), pb = make_prompt(45, 512, 32);
  SamplingParams sp;
  sp.n = 3;
  sp.seed = 17;
  sp.max_tokens = 70;
  sp.ignore_eos = true;
  sp.temperature = 0.8f;
  sp.logprobs = 2;
  const std::vector<Seq> want_a = run_separately(*m, roomy, pa, sp, 3);
  SamplingParams sb = sp;
  sb.seed = 1000;
  sb.temperature = 0;
  const std::vector<Seq> want_b = run_separately(*m, roomy, pb, sb, 3);

  for (bool caching : {true, false}) {
    tiny.enable_prefix_caching = caching;
    const std::string what = caching ? " (prefix caching)" : " (no prefix caching)";
    EngineCore e(*m, tiny, {2});
    ASSERT_EQ(msg(e.add_request("a", pa, sp)), "");
    ASSERT_EQ(msg(e.add_request("b", pb, sb)), "");
    const auto got = drain(e);
    EXPECT_GT(e.scheduler().num_preemptions_total(), 0) << what;
    int64_t forked_preemptions = 0;
    for (int i = 0; i < 3; ++i) {
      expect_same(got.at(sequence_id("a", i, 3)), want_a[i], "a sequence " + std::to_string(i) + what);
      expect_same(got.at(sequence_id("b", i, 3)), want_b[i], "b sequence " + std::to_string(i) + what);
      forked_preemptions += got.at(sequence_id("a", i, 3)).preemptions + got.at(sequence_id("b", i, 3)).preemptions;
    }
    EXPECT_GT(forked_preemptions, 0) << "meant to preempt forked sequences" << what;
    expect_pool_empty(e);
  }
}

TEST(ParallelSampling, StructuredOutputEachSequenceHasItsOwnMatcher) {
  auto m = LlamaModel::load(kStories);
  auto tok = load_tokenizer(kStories);
  const auto token_bytes = structured::VocabTrie::token_bytes_of(*tok);
  const EngineConfig cfg = config(16, 256);
  const std::string pattern = "[a-z]{2,8} (cat|dog|bird)s? [0-9]{2,3}";
  SamplingParams sp;
  sp.n = 6;
  sp.seed = 2024;
  sp.max_tokens = 40;
  sp.temperature = 1.0f;
  sp.structured_output = StructuredOutputSpec::regex(pattern);
  const auto prompt = tok->encode("Once upon a time", true, false);
  const std::vector<Seq> want = run_separately(*m, cfg, prompt, sp, 6, token_bytes);

  EngineCore e(*m, cfg, {tok->eos_id()});
  e.enable_structured_output(token_bytes);
  ASSERT_EQ(msg(e.add_request("g", prompt, sp)), "");
  const auto got = drain(e);
  std::set<std::string> distinct;
  for (int i = 0; i < 6; ++i) {
    const Seq& s = got.at(sequence_id("g", i, 6));
    expect_same(s, want[i], "sequence " + std::to_string(i));
    std::string text;
    for (int32_t t : s.tokens) text += tok->token_to_piece(t);
    EXPECT_EQ(s.finish, "stop") << text;
    EXPECT_TRUE(std::regex_match(text, std::regex(pattern))) << "sequence " << i << ": '" << text << "'";
    distinct.insert(text);
  }
  EXPECT_GT(distinct.size(), 1u) << "temperature 1 with 6 streams should differ somewhere";
  expect_pool_empty(e);
}

TEST(ParallelSampling, RejectsNBeyondMaxNumSeqsAndIdsInUse) {
  auto m = LlamaModel::load(kStories);
  EngineConfig cfg = config(16, 256);
  cfg.max_num_seqs = 4;
  EngineCore e(*m, cfg, {2});
  SamplingParams sp;
  sp.n = 5;
  EXPECT_NE(msg(e.add_request("g", {1, 5, 6}, sp)).find("max-num-seqs"), std::string::npos);
  sp.n = 0;
  EXPECT_NE(msg(e.add_request("g", {1, 5, 6}, sp)).find("n must"), std::string::npos);
  sp.n = 1;
  ASSERT_EQ(msg(e.add_request("g-1", {1, 5, 6}, sp)), "");
  sp.n = 2;
  EXPECT_NE(msg(e.add_request("g", {1, 5, 6}, sp)).find("'g-1' is already in use"), std::string::npos);
  ASSERT_EQ(msg(e.add_request("h", {1, 5, 6}, sp)), "");
  EXPECT_NE(msg(e.add_request("h-0", {1, 5, 6}, SamplingParams{})).find("in use"), std::string::npos);
  drain(e);
  expect_pool_empty(e);
}
