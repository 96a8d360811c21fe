// Speculative decoding: --speculative-config parsing, the n-gram proposer, the rejection sampler's output
// distribution (unit level and through the engine), greedy output equality with and without speculation
// (alone and in a mixed batch of 32), and block accounting under speculation, preemption and aborts.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <random>
#include <regex>
#include <set>

#include "core/error.h"
#include "engine/engine_core.h"
#include "engine/sample/sampler.h"
#include "engine/single_sequence.h"
#include "engine/spec_decode.h"
#include "engine/structured/structured_output.h"
#include "engine/suffix_cache.h"
#include "model/llama.h"
#include "model/synth.h"
#include "server/metrics.h"
#include "synth_models.h"
#include "tokenizer/tokenizer.h"
#include "validation_util.h"

using namespace kvik;

namespace {

std::string parse_error(const std::string& json) {
  try {
    parse_speculative_config(json);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(SpecDecodeConfig, ParsesVllmSpellingWithItsDefaults) {
  SpeculativeConfig c = parse_speculative_config(
      R"({"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2})");
  EXPECT_EQ(c.method, SpeculativeConfig::Method::kNgram);
  EXPECT_EQ(c.num_speculative_tokens, 4);
  EXPECT_EQ(c.prompt_lookup_max, 4);
  EXPECT_EQ(c.prompt_lookup_min, 2);
  c = parse_speculative_config(R"({"method": "ngram", "num_speculative_tokens": 3})");
  EXPECT_EQ(c.prompt_lookup_min, 5);
  EXPECT_EQ(c.prompt_lookup_max, 5);
  c = parse_speculative_config(R"({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3})");
  EXPECT_EQ(c.prompt_lookup_min, 3);
  EXPECT_TRUE(c.adaptive);  // kvik's extension, on by default
  EXPECT_FALSE(
      parse_speculative_config(R"({"method": "ngram", "num_speculative_tokens": 3, "adaptive": false})").adaptive);
  EXPECT_FALSE(parse_speculative_config("").enabled());
}

TEST(SpecDecodeConfig, ErrorsNameWhatIsWrong) {
  EXPECT_NE(parse_error("{method: ngram}").find("not valid JSON"), std::string::npos);
  EXPECT_NE(parse_error("[1]").find("JSON object"), std::string::npos);
  EXPECT_NE(parse_error(R"({"num_speculative_tokens": 4})").find("\"method\""), std::string::npos);
  EXPECT_NE(parse_error(R"({"method": "eagle", "num_speculative_tokens": 4})").find("unknown method \"eagle\""),
            std::string::npos);
  EXPECT_NE(
      parse_error(R"({"method": "ngram", "num_speculative_tokens": 4, "lookup": 2})").find("unknown key \"lookup\""),
      std::string::npos);
  EXPECT_NE(parse_error(R"({"method": "ngram"})").find("num_speculative_tokens"), std::string::npos);
  EXPECT_NE(parse_error(R"({"method": "ngram", "num_speculative_tokens": 0})").find("must be in 1..32"),
            std::string::npos);
  EXPECT_NE(parse_error(R"({"method": "ngram", "num_speculative_tokens": "4"})").find("must be an integer"),
            std::string::npos);
  EXPECT_NE(parse_error(R"({"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 4,
                            "prompt_lookup_max": 2})")
                .find("\"prompt_lookup_min\" (4) is larger than \"prompt_lookup_max\" (2)"),
            std::string::npos);
  EXPECT_NE(
      parse_error(R"({"method": "ngram", "num_speculative_tokens": 2, "adaptive": 1})").find("\"adaptive\" must be"),
      std::string::npos);
}

TEST(SpecDecodeNgram, ProposesWhatFollowedTheLongestMostRecentMatch) {
  std::vector<int32_t> out;
  // Suffix [7 8] occurs at 1 (followed by 9 4) and at 5 (followed by 5): the most recent wins.
  const std::vector<int32_t> a = {6, 7, 8, 9, 4, 7, 8, 5, 3, 7, 8};
  EXPECT_EQ(ngram_propose(a, 2, 2, 3, out), 3);
  EXPECT_EQ(out, (std::vector<int32_t>{5, 3, 7}));
  // The longer suffix [9 7 8]... does not occur; [4 7 8] does not either; with max 3 the 2-gram still matches.
  EXPECT_EQ(ngram_propose(a, 2, 3, 2, out), 2);
  EXPECT_EQ(out, (std::vector<int32_t>{5, 3}));
  // A longer match beats a more recent shorter one: suffix [1 2 3] matches at 0, [2 3] alone more recently.
  const std::vector<int32_t> b = {1, 2, 3, 9, 2, 3, 8, 1, 2, 3};
  EXPECT_EQ(ngram_propose(b, 2, 3, 2, out), 2);
  EXPECT_EQ(out, (std::vector<int32_t>{9, 2}));
  EXPECT_EQ(ngram_propose(b, 2, 2, 2, out), 2);
  EXPECT_EQ(out, (std::vector<int32_t>{8, 1}));
  // A loop of period 2 continues for all k tokens (the copy runs into its own output).
  const std::vector<int32_t> c = {5, 1, 2, 1, 2};
  EXPECT_EQ(ngram_propose(c, 2, 2, 5, out), 5);
  EXPECT_EQ(out, (std::vector<int32_t>{1, 2, 1, 2, 1}));
  // No match, too short, k = 0.
  const std::vector<int32_t> d = {1, 2, 3, 4};
  EXPECT_EQ(ngram_propose(d, 1, 3, 4, out), 0);
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(ngram_propose(std::vector<int32_t>{4}, 1, 3, 4, out), 0);
  EXPECT_EQ(ngram_propose(c, 2, 2, 0, out), 0);
}

TEST(SpecDecodeGate, PausesARequestWhoseAcceptanceStaysLowLongerEachTime) {
  SpecDecodeGate g;
  const int32_t w = SpecDecodeGate::kWindow;
  const int64_t pause = SpecDecodeGate::kPauseTokens;
  EXPECT_TRUE(g.allows(0));
  g.record(w, 0, 10);  // a window with nothing accepted
  EXPECT_FALSE(g.allows(10));
  EXPECT_FALSE(g.allows(10 + pause - 1));
  EXPECT_TRUE(g.allows(10 + pause));
  g.record(w, 1, 100);  // fails again: twice the pause
  EXPECT_FALSE(g.allows(100 + 2 * pause - 1));
  EXPECT_TRUE(g.allows(100 + 2 * pause));
  for (int i = 0; i < 10; ++i) g.record(w, 0, 1000);  // the pause stops doubling
  EXPECT_TRUE(g.allows(1000 + (pause << SpecDecodeGate::kMaxBackoff)));
  g.record(w, w, 5000);  // a good window: no pause, and the next failure starts over
  EXPECT_TRUE(g.allows(5000));
  g.record(w, 0, 6000);
  EXPECT_TRUE(g.allows(6000 + pause));
  SpecDecodeGate h;
  for (int i = 0; i < 8; ++i) h.record(4, 2, i);  // 50 %: keeps going
  EXPECT_TRUE(h.allows(8));
  h.record(w / 2, 0, 9);  // half a window: not judged yet
  EXPECT_TRUE(h.allows(9));
}

// The acceptance estimate: successes over trials of each verification (a accepted of d drafts: a successes in
// a + (a < d) trials), older verifications decayed, from a prior of 1 in 2; a pause forgets it.
TEST(SpecDecodeGate, AcceptanceEstimateFromVerifications) {
  SpecDecodeGate g;
  EXPECT_DOUBLE_EQ(g.acceptance(), 0.5);
  EXPECT_FALSE(g.has_evidence());
  g.observe_verification(4, 4);  // 4 of 4 trials succeed
  EXPECT_TRUE(g.has_evidence());
  EXPECT_NEAR(g.acceptance(), (0.8 + 4) / (1.6 + 4), 1e-12);
  for (int i = 0; i < 40; ++i) g.observe_verification(4, 1);  // 1 success, then a rejection: 1 in 2
  EXPECT_NEAR(g.acceptance(), 0.5, 1e-3);
  for (int i = 0; i < 40; ++i) g.observe_verification(4, 0);
  EXPECT_LT(g.acceptance(), 1e-3);
  g.pause(100);
  EXPECT_FALSE(g.allows(100));
  EXPECT_FALSE(g.has_evidence());
  EXPECT_DOUBLE_EQ(g.acceptance(), 0.5);
}

TEST(SpecDecodeCost, StepCostModelInterpolatesAndExtrapolates) {
  StepCostModel c;
  EXPECT_FALSE(c.calibrated());
  EXPECT_EQ(c.predict(5), 0);
  c.observe(1, 0.010);
  EXPECT_FALSE(c.calibrated());
  c.observe(9, 0.020);
  ASSERT_TRUE(c.calibrated());
  EXPECT_DOUBLE_EQ(c.predict(1), 0.010);
  EXPECT_NEAR(c.predict(5), 0.015, 1e-12);   // between the two sizes seen
  EXPECT_NEAR(c.predict(17), 0.030, 1e-12);  // beyond: the slope of the two largest
  EXPECT_NEAR(c.predict(5000), 0.020 + 0.00125 * 4991, 1e-9);
  c.observe(1, 0.014);  // a moving average: a quarter of the new observation
  EXPECT_NEAR(c.predict(1), 0.011, 1e-12);
  c.observe(0, 1.0), c.observe(3, -1.0), c.observe(3, std::nan(""));  // ignored
  EXPECT_NEAR(c.predict(3), 0.011 + (0.020 - 0.011) * 2 / 8, 1e-12);
}

// The draft length that maximizes expected tokens per second: long when steps are memory-bound (a query token
// costs little) and drafts are accepted, none when each query token costs a whole step (compute-bound: no
// acceptance rate pays) or when drafts are rarely accepted, shorter when proposing costs time.
TEST(SpecDecodeCost, ChoosesTheDraftLengthThatPays) {
  EXPECT_DOUBLE_EQ(expected_tokens_per_step(1.0, 4), 5.0);
  EXPECT_NEAR(expected_tokens_per_step(0.5, 4), 1.9375, 1e-12);
  EXPECT_DOUBLE_EQ(expected_tokens_per_step(0.0, 4), 1.0);
  StepCostModel memory_bound, compute_bound;
  for (int n : {1, 2, 64}) {
    memory_bound.observe(n, 0.020 + 0.0005 * n);  // 1B-shaped decode: weights read once for all tokens
    compute_bound.observe(n, 0.001 * n);
  }
  EXPECT_EQ(choose_num_drafts(StepCostModel{}, 1, 1, 0.0, 4, 0), 4);  // nothing measured yet: probe with k
  EXPECT_EQ(choose_num_drafts(memory_bound, 1, 1, 0.95, 8, 0), 8);
  EXPECT_EQ(choose_num_drafts(memory_bound, 1, 1, 0.02, 8, 0), 0);
  const int32_t mid = choose_num_drafts(memory_bound, 1, 1, 0.6, 8, 0);
  EXPECT_GT(mid, 0);
  EXPECT_LT(mid, 8);
  for (double a : {0.5, 0.9, 0.999}) EXPECT_EQ(choose_num_drafts(compute_bound, 1, 1, a, 8, 0), 0) << a;
  EXPECT_LT(choose_num_drafts(memory_bound, 1, 1, 0.8, 8, 0.004), choose_num_drafts(memory_bound, 1, 1, 0.8, 8, 0));
  EXPECT_EQ(choose_num_drafts(memory_bound, 1, 1, 0.95, 0, 0), 0);
}
// ---- the rejection sampler, unit level ----

// Pearson's chi-square of observed counts against expected probabilities (bins with expectation < 5 merged).
double chi_square(const std::map<int32_t, int64_t>& counts, const std::vector<std::pair<int32_t, float>>& p, int64_t n,
                  int* dof) {
  double stat = 0, merged_obs = 0, merged_exp = 0;
  int bins = 0;
  int64_t seen = 0;
  for (const auto& [t, prob] : p) {
    const double e = prob * static_cast<double>(n);
    const auto it = counts.find(t);
    const double o = it == counts.end() ? 0.0 : static_cast<double>(it->second);
    seen += static_cast<int64_t>(o);
    if (e < 5) {
      merged_obs += o, merged_exp += e;
      continue;
    }
    stat += (o - e) * (o - e) / e, ++bins;
  }
  if (merged_exp > 0) stat += (merged_obs - merged_exp) * (merged_obs - merged_exp) / merged_exp, ++bins;
  if (seen != n) stat = 1e30;  // a token outside p's support
  *dof = bins - 1;
  return stat;
}

// Upper 0.1 % point of chi-square with `dof` degrees of freedom (Wilson–Hilferty).
double chi_square_critical(int dof) {
  const double z = 3.090, k = dof;
  const double a = 1 - 2 / (9 * k) + z * std::sqrt(2 / (9 * k));
  return k * a * a * a;
}

std::vector<float> test_logits(int V, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0, 1.5f);
  std::vector<float> l(static_cast<size_t>(V));
  for (float& x : l) x = nd(rng);
  return l;
}

struct DrawStats {
  std::map<int32_t, int64_t> counts;
  int64_t accepted = 0;
};

DrawStats draw_verified(Sampler& s, const std::vector<float>& logits, const SamplingParams& p, int32_t draft, int n,
                        bool always_accept) {
  DrawStats d;
  const std::vector<int32_t> prompt = {1}, output;
  for (int i = 0; i < n; ++i) {
    RequestRng rng(1000 + static_cast<uint64_t>(i));
    SampleInput in{0, &p, prompt, output, {}, &rng, nullptr};
    bool ok = false;
    SampleResult r = s.verify_draft(logits, in, draft, ok);
    if (always_accept) r.token = draft;  // the negative control: a verifier that ignores p
    ++d.counts[r.token];
    d.accepted += ok;
  }
  return d;
}

TEST(SpecDecodeRejectionSampler, OutputIsDistributedAsTheTarget) {
  const int V = 40, n = 40000;
  const std::vector<float> logits = test_logits(V, 7);
  Sampler s(V);
  for (float top_p : {1.0f, 0.8f}) {
    SamplingParams p;
    p.temperature = 1.0f;
    p.top_p = top_p;
    const auto dist = sampling_distribution(logits, p);
    SamplingParams all = p;
    all.top_p = 1.0f;
    const int32_t least_likely = sampling_distribution(logits, all).back().first;  // outside top-p 0.8's support
    // A likely draft, a middling one, and the least likely one.
    for (int32_t draft : {dist[0].first, dist[dist.size() / 2].first, least_likely}) {
      SCOPED_TRACE(fmt::format("top_p {} draft {}", top_p, draft));
      const DrawStats d = draw_verified(s, logits, p, draft, n, false);
      int dof = 0;
      const double stat = chi_square(d.counts, dist, n, &dof);
      EXPECT_LT(stat, chi_square_critical(dof)) << "dof " << dof;
      double p_draft = 0;
      for (const auto& [t, q] : dist)
        if (t == draft) p_draft = q;
      EXPECT_NEAR(static_cast<double>(d.accepted) / n, p_draft, 4 * std::sqrt(p_draft * (1 - p_draft) / n) + 1e-9);
      // The same test rejects a verifier that always accepts: it can fail.
      const DrawStats bad = draw_verified(s, logits, p, draft, n, true);
      EXPECT_GT(chi_square(bad.counts, dist, n, &dof), chi_square_critical(dof));
    }
  }
}

TEST(SpecDecodeRejectionSampler, GreedyAcceptsExactlyTheArgmaxAndAppliesTheFilterChain) {
  const int V = 30;
  std::vector<float> logits = test_logits(V, 3);
  Sampler s(V);
  SamplingParams p;
  p.temperature = 0;
  const std::vector<int32_t> prompt = {1}, output;
  RequestRng rng(1);
  SampleInput in{0, &p, prompt, output, {}, &rng, nullptr};
  const int32_t best = argmax(logits);
  bool ok = false;
  EXPECT_EQ(s.verify_draft(logits, in, best, ok).token, best);
  EXPECT_TRUE(ok);
  EXPECT_EQ(s.verify_draft(logits, in, (best + 1) % V, ok).token, best);
  EXPECT_FALSE(ok);
  // Logit bias moves the argmax: the verifier sees the biased row, as the Sampler does.
  p.logit_bias = {{(best + 1) % V, 100.0f}};
  EXPECT_EQ(s.verify_draft(logits, in, (best + 1) % V, ok).token, (best + 1) % V);
  EXPECT_TRUE(ok);
}

// ---- through the engine ----

std::unique_ptr<LlamaModel> stories() { return LlamaModel::load(KVIK_SOURCE_DIR "/models/stories260K.gguf"); }

std::string synth_path() {
  static const std::string path = test_models::write_synth_gqa("kvik_spec_gqa.gguf", 11);
  return path;
}

// Fixed k (adaptive off) unless asked: tests that count drafts need every allowed step to draft.
SpeculativeConfig ngram(int k, int min_n, int max_n, bool adaptive = false) {
  SpeculativeConfig c;
  c.adaptive = adaptive;
  c.method = SpeculativeConfig::Method::kNgram;
  c.num_speculative_tokens = k;
  c.prompt_lookup_min = min_n;
  c.prompt_lookup_max = max_n;
  return c;
}

SpeculativeConfig draft_model(const std::string& path, int k, bool adaptive = false) {
  SpeculativeConfig c;
  c.adaptive = adaptive;
  c.method = SpeculativeConfig::Method::kDraftModel;
  c.model = path;
  c.num_speculative_tokens = k;
  return c;
}

EngineConfig engine_config(const SpeculativeConfig& spec, int64_t blocks = 1024) {
  EngineConfig c;
  c.max_model_len = 512;
  c.num_kv_blocks = blocks;
  c.max_num_batched_tokens = 96;  // small: drafts compete with prefill chunks for the budget
  c.log_stats = false;
  c.kv_cache_dtype = DType::F32;
  c.speculative = spec;
  return c;
}

// A prompt that repeats itself: lookup proposes, and the model (which copies, or loops) accepts some.
std::vector<int32_t> repeating_prompt(int64_t vocab, uint32_t seed, int period, int len) {
  std::mt19937 rng(seed);
  std::vector<int32_t> unit;
  for (int i = 0; i < period; ++i) unit.push_back(3 + static_cast<int32_t>(rng() % (vocab - 3)));
  std::vector<int32_t> p = {1};
  while (static_cast<int>(p.size()) < len) p.push_back(unit[(p.size() - 1) % unit.size()]);
  return p;
}

std::vector<int32_t> random_prompt(int64_t vocab, uint32_t seed, int len) {
  std::mt19937 rng(seed);
  std::vector<int32_t> p = {1};
  while (static_cast<int>(p.size()) < len) p.push_back(3 + static_cast<int32_t>(rng() % (vocab - 3)));
  return p;
}

// An input-grounded prompt (its continuation copies spans of it) from a seed, about `len` tokens long.
using PromptFn = std::function<std::vector<int32_t>(uint32_t seed, int len)>;

// stories260K copies text it has seen: sentences of a small story, the prompt repeating them.
PromptFn story_prompts() {
  static const std::vector<std::string> sentences = {
      "Once upon a time, there was a little girl named Lily. ", "She loved to play outside in the park. ",
      "One day, she saw a big red ball under a tree. ",         "Tom was a happy dog who liked to run. ",
      "The sun was shining and the birds were singing. ",       "Mom said, \"Let us go home and eat some cake.\" ",
      "Ben and his friend built a tall tower of blocks. ",      "The cat was sad because it lost its toy. "};
  auto tok = std::shared_ptr<Tokenizer>(load_tokenizer(KVIK_SOURCE_DIR "/models/stories260K.gguf"));
  return [tok](uint32_t seed, int len) {
    std::mt19937 rng(seed);
    std::string story;
    for (int i = 0; i < 3; ++i) story += sentences[rng() % sentences.size()];
    std::string text = story;
    while (static_cast<int>(tok->encode(text, true, false).size()) < len) text += story;
    return tok->encode(text, true, false);
  };
}

// Random-weight models loop; a prompt that repeats a random unit starts them in one.
PromptFn looping_prompts(int64_t vocab) {
  return [vocab](uint32_t seed, int len) { return repeating_prompt(vocab, seed, 3 + static_cast<int>(seed % 9), len); };
}

struct Job {
  std::vector<int32_t> prompt;
  SamplingParams params;
};

struct Outcome {
  std::map<std::string, std::vector<int32_t>> tokens;
  std::map<std::string, std::string> finish;
  SpecDecodeStats spec;
};

Outcome run_jobs(LlamaModel& m, const EngineConfig& cfg, const std::vector<Job>& jobs, const Tokenizer* tok = nullptr) {
  EngineCore e(m, cfg, {2});
  if (tok) e.enable_structured_output(structured::VocabTrie::token_bytes_of(*tok));
  for (size_t i = 0; i < jobs.size(); ++i)
    EXPECT_EQ(msg(e.add_request("r" + std::to_string(i), jobs[i].prompt, jobs[i].params)), "");
  Outcome r;
  for (int guard = 0; e.has_unfinished() && guard < 100000; ++guard)
    for (auto& o : e.step()) {
      auto& v = r.tokens[o.request_id];
      v.insert(v.end(), o.new_token_ids.begin(), o.new_token_ids.end());
      if (o.finished) r.finish[o.request_id] = o.finish_reason;
    }
  EXPECT_FALSE(e.has_unfinished());
  EXPECT_EQ(e.kv_cache_manager().pool().num_free_blocks(), cfg.num_kv_blocks);
  r.spec = e.spec_decode_stats();
  return r;
}

SamplingParams greedy(int max_tokens) {
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = max_tokens;
  return p;
}

// Greedy decoding with speculation gives token for token what it gives without, for one request alone
// and for a batch of 32 in which some requests speculate and others do not (random prompts lookup rarely
// matches, one-token requests, sampled requests, an n = 2 request); drafts are both accepted and rejected.
void expect_greedy_equality(LlamaModel& m, const PromptFn& grounded) {
  const int64_t V = m.config().vocab_size;
  const SpeculativeConfig spec = ngram(4, 1, 3);
  const std::vector<Job> alone = {{grounded(5, 40), greedy(60)}};
  const Outcome a0 = run_jobs(m, engine_config({}), alone);
  const Outcome a1 = run_jobs(m, engine_config(spec), alone);
  EXPECT_EQ(a1.tokens, a0.tokens);
  EXPECT_EQ(a1.finish, a0.finish);
  EXPECT_GT(a1.spec.num_accepted_tokens, 0);

  std::vector<Job> batch;
  for (int i = 0; i < 32; ++i) {
    Job j;
    if (i % 4 == 3) {
      j.prompt = random_prompt(V, 100 + i, 5 + i);
      j.params = greedy(i % 8 == 3 ? 1 : 40);  // some never get to speculate
    } else if (i % 8 == 2) {
      j.prompt = grounded(200 + i, 30);
      j.params.temperature = 0.9f, j.params.seed = i, j.params.max_tokens = 30;  // sampled, speculating
      if (i == 2) j.params.n = 2;
    } else {
      j.prompt = grounded(300 + i, 12 + 3 * i);
      j.params = greedy(20 + i);
      if (i % 5 == 0) j.params.ignore_eos = true;
    }
    batch.push_back(j);
  }
  const Outcome b0 = run_jobs(m, engine_config({}), batch);
  const Outcome b1 = run_jobs(m, engine_config(spec), batch);
  for (size_t i = 0; i < batch.size(); ++i) {
    const std::string id = "r" + std::to_string(i);
    if (batch[i].params.temperature != 0) continue;  // sampled: equal in distribution, tested below
    EXPECT_EQ(b1.tokens.at(id), b0.tokens.at(id)) << id;
    EXPECT_EQ(b1.finish.at(id), b0.finish.at(id)) << id;
  }
  EXPECT_GT(b1.spec.num_accepted_tokens, 0);
  EXPECT_LT(b1.spec.num_accepted_tokens, b1.spec.num_draft_tokens) << "no draft was rejected";
  // Adaptive draft lengths (whatever the step costs measured here make them): the same tokens.
  const Outcome b2 = run_jobs(m, engine_config(ngram(4, 1, 3, true)), batch);
  for (size_t i = 0; i < batch.size(); ++i)
    if (batch[i].params.temperature == 0)
      EXPECT_EQ(b2.tokens.at("r" + std::to_string(i)), b0.tokens.at("r" + std::to_string(i)));
  EXPECT_GT(b2.spec.num_drafts, 0);
}

TEST(SpecDecodeEngine, GreedyOutputIdenticalStories) {
  auto m = stories();
  expect_greedy_equality(*m, story_prompts());
}

TEST(SpecDecodeEngine, GreedyOutputIdenticalSynthGqa) {
  auto m = LlamaModel::load(synth_path());
  expect_greedy_equality(*m, looping_prompts(m->config().vocab_size));
}

// A model that copies (synth --induction): on prompts that repeat a random unit, prompt lookup's drafts are
// what the model says, so nearly every draft is accepted; greedy output is still exactly the plain one.
TEST(SpecDecodeEngine, AModelThatCopiesAcceptsNearlyEveryDraft) {
  SynthOptions o;
  o.out_path = (std::filesystem::temp_directory_path() / "kvik_spec_induction.gguf").string();
  o.induction = true;
  synth_llama_gguf(o);
  auto m = LlamaModel::load(o.out_path);
  const PromptFn copying = [](uint32_t seed, int len) { return repeating_prompt(512, seed, 30 + seed % 20, len + 40); };
  expect_greedy_equality(*m, copying);
  const Outcome a = run_jobs(*m, engine_config(ngram(4, 2, 4)), {{copying(7, 40), greedy(100)}});
  EXPECT_GT(a.spec.num_accepted_tokens, 0.9 * static_cast<double>(a.spec.num_draft_tokens));
  // Nearly all 100 tokens came out of verification steps (accepted drafts plus each step's own token).
  EXPECT_GE(a.spec.num_accepted_tokens + a.spec.num_drafts, 95);
}

// A Gemma 3 whose local layers keep their KV in a pool of their own (window 8): rejected drafts roll back in both
// pools, and the greedy output stays the plain engine's.
TEST(SpecDecodeEngine, GreedyOutputIdenticalSynthGemma) {
  auto m = LlamaModel::load(test_models::write_synth_family("kvik_spec_gemma3.gguf", "gemma3", 8, 31));
  expect_greedy_equality(*m, looping_prompts(m->config().vocab_size));
}

TEST(SpecDecodeEngine, NeverEmitsPastMaxTokensOrAStop) {
  auto m = LlamaModel::load(synth_path());
  const int64_t V = m->config().vocab_size;
  const SpeculativeConfig spec = ngram(8, 1, 2);
  std::vector<Job> jobs;
  for (int mt = 1; mt <= 12; ++mt) jobs.push_back({repeating_prompt(V, 9, 2, 20), greedy(mt)});
  const Outcome plain = run_jobs(*m, engine_config({}), jobs);
  const Outcome sp = run_jobs(*m, engine_config(spec), jobs);
  EXPECT_EQ(sp.tokens, plain.tokens);
  for (size_t i = 0; i < jobs.size(); ++i) EXPECT_LE(sp.tokens.at("r" + std::to_string(i)).size(), i + 1);
  // A stop id inside an accepted run: output ends before it, as without speculation.
  const std::vector<int32_t>& longest = plain.tokens.at("r11");
  ASSERT_GE(longest.size(), 6u);
  std::vector<Job> stops = {{repeating_prompt(V, 9, 2, 20), greedy(12)}};
  stops[0].params.stop_token_ids = {longest[5]};
  EXPECT_EQ(run_jobs(*m, engine_config(spec), stops).tokens, run_jobs(*m, engine_config({}), stops).tokens);
  EXPECT_GT(sp.spec.num_accepted_tokens, 0);
}

// Structured output does not speculate (a draft would have to advance and roll back the grammar matcher):
// a constrained request in a speculating engine gets no drafts, gives the plain engine's output, and that
// output matches its regex; an unconstrained request beside it still speculates.
TEST(SpecDecodeEngine, StructuredOutputDoesNotSpeculate) {
  auto m = stories();
  auto tok = load_tokenizer(KVIK_SOURCE_DIR "/models/stories260K.gguf");
  const std::string pattern = "(la ){2,4}la\\.";
  Job constrained{tok->encode("la la la la la la la la la la la la", true, false), greedy(60)};
  constrained.params.structured_output = StructuredOutputSpec::regex(pattern);
  const SpeculativeConfig spec = ngram(4, 1, 3);
  const Outcome alone = run_jobs(*m, engine_config(spec), {constrained}, tok.get());
  EXPECT_EQ(alone.spec.num_drafts, 0);
  EXPECT_EQ(alone.tokens, run_jobs(*m, engine_config({}), {constrained}, tok.get()).tokens);
  EXPECT_EQ(alone.finish.at("r0"), "stop");
  std::string text;
  for (int32_t t : alone.tokens.at("r0")) text += tok->token_to_piece(t);
  EXPECT_TRUE(std::regex_match(text, std::regex(pattern))) << text;
  const std::vector<Job> mixed = {constrained, {story_prompts()(3, 60), greedy(40)}};
  const Outcome with = run_jobs(*m, engine_config(spec), mixed, tok.get());
  EXPECT_EQ(with.tokens, run_jobs(*m, engine_config({}), mixed, tok.get()).tokens);
  EXPECT_GT(with.spec.num_accepted_tokens, 0);
}

// Two-sample chi-square (counts a and b of equal totals) at the 0.1 % level, bins with < 10 merged.
bool same_distribution(const std::map<int32_t, int64_t>& a, const std::map<int32_t, int64_t>& b, double* stat_out) {
  std::set<int32_t> keys;
  for (const auto& [k, v] : a) keys.insert(k);
  for (const auto& [k, v] : b) keys.insert(k);
  double stat = 0, ma = 0, mb = 0;
  int bins = 0;
  auto add = [&](double x, double y) {
    stat += (x - y) * (x - y) / (x + y);
    ++bins;
  };
  for (int32_t k : keys) {
    const double x = a.count(k) ? static_cast<double>(a.at(k)) : 0, y = b.count(k) ? static_cast<double>(b.at(k)) : 0;
    if (x + y < 10)
      ma += x, mb += y;
    else
      add(x, y);
  }
  if (ma + mb > 0) add(ma, mb);
  *stat_out = stat;
  return bins < 2 || stat < chi_square_critical(bins - 1);
}

// Sampled output through the engine: the token at the first position a draft can cover and at a later
// one, over many seeds, is distributed as without speculation (temperature 1, with and without top-p).
TEST(SpecDecodeEngine, SampledTokenDistributionMatchesPlainSampling) {
  auto m = stories();
  const int64_t V = m->config().vocab_size;
  const int n = 1500, len = 6;
  const std::vector<int32_t> prompt = story_prompts()(21, 60);
  for (float top_p : {1.0f, 0.9f}) {
    SCOPED_TRACE(fmt::format("top_p {}", top_p));
    std::vector<Job> jobs;
    for (int i = 0; i < n; ++i) {
      Job j{prompt, {}};
      j.params.temperature = 1.0f, j.params.top_p = top_p, j.params.seed = 7000 + i, j.params.max_tokens = len;
      j.params.ignore_eos = true;
      jobs.push_back(j);
    }
    EngineConfig cfg0 = engine_config({}, 4096), cfg1 = engine_config(ngram(3, 1, 2), 4096);
    cfg0.max_num_seqs = cfg1.max_num_seqs = 256;
    cfg0.max_num_batched_tokens = cfg1.max_num_batched_tokens = 2048;
    const Outcome plain = run_jobs(*m, cfg0, jobs), sp = run_jobs(*m, cfg1, jobs);
    // Both paths of the rejection sampler run often: stories260K at temperature 1 accepts a few % of drafts.
    EXPECT_GT(sp.spec.num_accepted_tokens, n / 40);
    EXPECT_GT(sp.spec.num_draft_tokens - sp.spec.num_accepted_tokens, n / 2);
    for (int pos : {1, len - 1}) {
      std::map<int32_t, int64_t> a, b;
      for (const auto& [id, t] : plain.tokens) ++a[t.at(static_cast<size_t>(pos))];
      for (const auto& [id, t] : sp.tokens) ++b[t.at(static_cast<size_t>(pos))];
      double stat = 0;
      EXPECT_TRUE(same_distribution(a, b, &stat)) << "position " << pos << " chi-square " << stat;
    }
  }
}

// Random adds, aborts and steps with speculation on a tiny pool (preemption): after every operation each
// block's ref_cnt equals its holders, a speculating request holds no block past its computed tokens, and
// every block comes back at the end. Then the prefix cache filled meanwhile serves the greedy prompts again
// with output identical to a plain engine's: no rejected draft's KV reached a cached block.
void randomized_block_accounting(const SpeculativeConfig& spec) {
  auto m = stories();
  EngineConfig cfg = engine_config(spec, 40);
  cfg.max_model_len = 256;
  cfg.max_num_seqs = 8;
  EngineCore e(*m, cfg, {2});
  std::mt19937 rng(99);
  std::set<std::string> live;
  std::vector<Job> greedy_jobs;
  int next_id = 0;
  for (int iter = 0; iter < 1500; ++iter) {
    const uint32_t op = rng() % 10;
    if (op < 3) {
      Job j{repeating_prompt(m->config().vocab_size, rng(), 2 + static_cast<int>(rng() % 6), 4 + rng() % 100), {}};
      j.params.temperature = (rng() % 2) ? 0.0f : 0.8f;
      j.params.seed = rng();
      j.params.max_tokens = 1 + static_cast<int>(rng() % 40);
      const std::string id = "q" + std::to_string(next_id++);
      ASSERT_EQ(msg(e.add_request(id, j.prompt, j.params)), "");
      live.insert(id);
      if (j.params.temperature == 0) greedy_jobs.push_back(j);
    } else if (op == 3 && !live.empty()) {
      auto it = live.begin();
      std::advance(it, rng() % live.size());
      e.abort(*it);
    } else {
      for (auto& o : e.step())
        if (o.finished) live.erase(o.request_id);
    }
    // Block accounting: ref_cnt == holders, free ⇔ ref_cnt 0, no block past a request's computed tokens
    // but the one its next token goes into.
    const auto& kv = e.kv_cache_manager();
    std::vector<int> holders(static_cast<size_t>(cfg.num_kv_blocks), 0);
    for (const Request* r : e.scheduler().running()) {
      const auto& blocks = kv.blocks_of(r->request_id);
      for (const KVCacheBlock* b : blocks) ++holders[static_cast<size_t>(b->block_id)];
      ASSERT_LE(static_cast<int64_t>(blocks.size()), r->num_computed_tokens / cfg.block_size + 1) << r->request_id;
      ASSERT_TRUE(r->spec_token_ids.empty());
    }
    for (const Request* r : e.scheduler().waiting()) ASSERT_TRUE(kv.blocks_of(r->request_id).empty());
    const std::vector<int32_t> free_ids = kv.pool().free_queue().block_ids();
    const std::set<int32_t> free_set(free_ids.begin(), free_ids.end());
    ASSERT_EQ(free_set.size(), free_ids.size());
    for (int32_t b = 0; b < cfg.num_kv_blocks; ++b) {
      ASSERT_EQ(kv.pool().block(b).ref_cnt, holders[static_cast<size_t>(b)]) << "block " << b;
      ASSERT_EQ(free_set.count(b) == 1, holders[static_cast<size_t>(b)] == 0) << "block " << b;
    }
  }
  while (e.has_unfinished()) e.step();
  EXPECT_EQ(e.kv_cache_manager().pool().num_free_blocks(), cfg.num_kv_blocks);
  EXPECT_EQ(e.kv_cache_manager().num_requests(), 0);
  EXPECT_GT(e.scheduler().num_preemptions_total(), 0);
  EXPECT_GT(e.spec_decode_stats().num_accepted_tokens, 0);
  EXPECT_LT(e.spec_decode_stats().num_accepted_tokens, e.spec_decode_stats().num_draft_tokens);

  // The same engine (its prefix cache warm from the run) against a fresh plain one, one request at a time.
  EngineConfig plain_cfg = cfg;
  plain_cfg.speculative = {};
  EngineCore p(*m, plain_cfg, {2});
  for (size_t i = 0; i < greedy_jobs.size() && i < 20; ++i) {
    std::vector<int32_t> got, want;
    ASSERT_EQ(msg(e.add_request("g" + std::to_string(i), greedy_jobs[i].prompt, greedy_jobs[i].params)), "");
    ASSERT_EQ(msg(p.add_request("g" + std::to_string(i), greedy_jobs[i].prompt, greedy_jobs[i].params)), "");
    while (e.has_unfinished())
      for (auto& o : e.step()) got.insert(got.end(), o.new_token_ids.begin(), o.new_token_ids.end());
    while (p.has_unfinished())
      for (auto& o : p.step()) want.insert(want.end(), o.new_token_ids.begin(), o.new_token_ids.end());
    EXPECT_EQ(got, want) << "greedy job " << i;
  }
  EXPECT_GT(e.kv_cache_manager().prefix_cache_stats().hits, 0);
}

TEST(SpecDecodeEngine, RandomizedBlockAccountingWithPreemptionAndAborts) {
  randomized_block_accounting(ngram(4, 1, 3));
}

// The draft model's KV in the same blocks: the same invariants under preemption and aborts (stories260K drafting
// for itself: greedy drafts are accepted, sampled ones partly), and greedy output equal to the plain engine's.
TEST(SpecDecodeDraftModel, RandomizedBlockAccountingWithPreemptionAndAborts) {
  randomized_block_accounting(draft_model(KVIK_SOURCE_DIR "/models/stories260K.gguf", 4));
}

}  // namespace

namespace {

// /metrics carries vLLM's spec_decode counters (kvik: prefix) equal to the engine's, only when speculation is on.
TEST(SpecDecodeMetrics, CountersRenderedWithVllmNames) {
  auto m = stories();
  for (bool on : {true, false}) {
    EngineCore e(*m, engine_config(on ? ngram(3, 1, 3) : SpeculativeConfig{}), {2});
    server::ServerMetrics metrics("stories");
    ASSERT_EQ(msg(e.add_request("a", story_prompts()(5, 40), greedy(60))), "");
    while (e.has_unfinished()) metrics.on_step(e, e.step());
    const std::string text = metrics.render();
    const SpecDecodeStats& s = e.spec_decode_stats();
    if (!on) {
      EXPECT_EQ(text.find("spec_decode"), std::string::npos);
      continue;
    }
    ASSERT_GT(s.num_accepted_tokens, 0);
    auto line = [](const std::string& name, const std::string& labels, int64_t v) {
      return fmt::format("kvik:{}{{model_name=\"stories\"{}}} {}\n", name, labels, v);
    };
    EXPECT_NE(text.find("# TYPE kvik:spec_decode_num_drafts_total counter\n"), std::string::npos);
    EXPECT_NE(text.find(line("spec_decode_num_drafts_total", "", s.num_drafts)), std::string::npos) << text;
    EXPECT_NE(text.find(line("spec_decode_num_draft_tokens_total", "", s.num_draft_tokens)), std::string::npos);
    EXPECT_NE(text.find(line("spec_decode_num_accepted_tokens_total", "", s.num_accepted_tokens)), std::string::npos);
    int64_t sum = 0;
    for (size_t i = 0; i < s.accepted_per_pos.size(); ++i) {
      EXPECT_NE(text.find(line("spec_decode_num_accepted_tokens_per_pos_total", fmt::format(",position=\"{}\"", i),
                               s.accepted_per_pos[i])),
                std::string::npos);
      sum += s.accepted_per_pos[i];
      if (i > 0) EXPECT_LE(s.accepted_per_pos[i], s.accepted_per_pos[i - 1]);  // position i needs i − 1 accepted
    }
    EXPECT_EQ(sum, s.num_accepted_tokens);
    EXPECT_NEAR(s.mean_accepted_len(), 1.0 + static_cast<double>(sum) / static_cast<double>(s.num_drafts), 1e-12);
  }
}

}  // namespace

namespace {

TEST(SpecDecodeConfig, ParsesDraftModel) {
  const SpeculativeConfig c =
      parse_speculative_config(R"({"method": "draft_model", "model": "small.gguf", "num_speculative_tokens": 3})");
  EXPECT_EQ(c.method, SpeculativeConfig::Method::kDraftModel);
  EXPECT_EQ(c.model, "small.gguf");
  EXPECT_EQ(c.num_speculative_tokens, 3);
  EXPECT_NE(parse_error(R"({"method": "draft_model", "num_speculative_tokens": 3})").find("\"model\""),
            std::string::npos);
  EXPECT_NE(
      parse_error(R"({"method": "draft_model", "model": "m", "num_speculative_tokens": 3, "prompt_lookup_max": 2})")
          .find("unknown key \"prompt_lookup_max\" for method \"draft_model\""),
      std::string::npos);
}

// The target as its own draft: every greedy draft is the target's argmax, so every draft is accepted (α = 1,
// k + 1 tokens per step) and the output is the plain one.
TEST(SpecDecodeDraftModel, TheTargetAsItsOwnDraftIsAlwaysAccepted) {
  auto m = stories();
  const std::vector<Job> jobs = {{story_prompts()(7, 30), greedy(41)}};
  const Outcome plain = run_jobs(*m, engine_config({}), jobs);
  const Outcome sp = run_jobs(*m, engine_config(draft_model(KVIK_SOURCE_DIR "/models/stories260K.gguf", 4)), jobs);
  EXPECT_EQ(sp.tokens, plain.tokens);
  EXPECT_GT(sp.spec.num_draft_tokens, 0);
  EXPECT_EQ(sp.spec.num_accepted_tokens, sp.spec.num_draft_tokens);
  EXPECT_EQ(sp.spec.num_drafts, 8);  // 41 tokens: 1 from the prefill, then 8 steps of 4 accepted + 1
  EXPECT_DOUBLE_EQ(sp.spec.mean_accepted_len(), 5.0);
}

// A different model of the same vocabulary drafts (random weights: mostly rejected): greedy output in a mixed
// batch is still the plain output, sampled requests run, and every block comes back.
TEST(SpecDecodeDraftModel, GreedyOutputIdenticalWithAnotherModelDrafting) {
  auto m = stories();
  ASSERT_EQ(LlamaModel::load(synth_path())->config().vocab_size, m->config().vocab_size);
  std::vector<Job> jobs;
  for (int i = 0; i < 12; ++i) {
    Job j{story_prompts()(40 + i, 20 + 4 * i), greedy(24 + i)};
    if (i % 4 == 1) j.params.temperature = 0.8f, j.params.seed = i;
    jobs.push_back(j);
  }
  const Outcome plain = run_jobs(*m, engine_config({}), jobs);
  const Outcome sp = run_jobs(*m, engine_config(draft_model(synth_path(), 3)), jobs);
  for (size_t i = 0; i < jobs.size(); ++i)
    if (jobs[i].params.temperature == 0)
      EXPECT_EQ(sp.tokens.at("r" + std::to_string(i)), plain.tokens.at("r" + std::to_string(i))) << i;
  EXPECT_GT(sp.spec.num_draft_tokens, sp.spec.num_accepted_tokens);
  // And the target as its own draft in the same batch: everything greedy accepted, output unchanged.
  const Outcome self = run_jobs(*m, engine_config(draft_model(KVIK_SOURCE_DIR "/models/stories260K.gguf", 3)), jobs);
  for (size_t i = 0; i < jobs.size(); ++i)
    if (jobs[i].params.temperature == 0)
      EXPECT_EQ(self.tokens.at("r" + std::to_string(i)), plain.tokens.at("r" + std::to_string(i))) << i;
}

TEST(SpecDecodeDraftModel, ADraftOfAnotherVocabularyIsRefused) {
  SynthOptions o;
  o.out_path = ::testing::TempDir() + "kvik_spec_vocab_300.gguf";
  o.dim = 64, o.layers = 1, o.heads = 4, o.kv_heads = 2, o.ff = 128, o.vocab = 300, o.context = 256;
  synth_llama_gguf(o);
  auto m = stories();
  try {
    EngineCore e(*m, engine_config(draft_model(o.out_path, 3)), {2});
    ADD_FAILURE() << "accepted a draft of another vocabulary";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("vocabulary of 300 tokens"), std::string::npos) << err.what();
  }
}

}  // namespace

namespace {

// The draft model's KV lives in the request's own blocks and rolls back with the rejected drafts: at every step
// the blocks hold a slot for every token the draft was fed, and those agree with the request's tokens but for the
// draft's unchecked proposals at the end; the pool's budget counts both models' bytes per token.
TEST(SpecDecodeDraftModel, DraftKvLivesInTheBlocksAndRollsBack) {
  auto m = stories();
  EngineCore e(*m, engine_config(draft_model(KVIK_SOURCE_DIR "/models/stories260K.gguf", 4)), {2});
  for (int i = 0; i < 6; ++i) {
    SamplingParams p;
    p.temperature = 1.0f, p.seed = 100 + i, p.max_tokens = 60, p.ignore_eos = true;  // sampled: drafts get rejected
    ASSERT_EQ(msg(e.add_request("s" + std::to_string(i), story_prompts()(60 + i, 30), p)), "");
  }
  int checked = 0;
  while (e.has_unfinished()) {
    e.step();
    for (const Request* r : e.scheduler().running()) {
      if (r->draft_fed.empty()) continue;
      const int64_t slots = e.kv_cache_manager().block_table(r->request_id).size() * e.kv_cache_manager().block_size();
      ASSERT_LE(static_cast<int64_t>(r->draft_fed.size()), slots) << r->request_id;
      const size_t agreed = std::min(r->draft_fed.size(), r->all_token_ids.size()) - 4;
      ASSERT_TRUE(std::equal(r->draft_fed.begin(), r->draft_fed.begin() + static_cast<std::ptrdiff_t>(agreed),
                             r->all_token_ids.begin()))
          << r->request_id;
      ++checked;
    }
  }
  EXPECT_GT(checked, 0);
  EXPECT_LT(e.spec_decode_stats().num_accepted_tokens, e.spec_decode_stats().num_draft_tokens);
  EXPECT_GT(e.spec_decode_stats().num_accepted_tokens, 0);

  // The same KV memory holds half the blocks when the draft (stories260K itself: as many bytes per token) shares them.
  EngineConfig with = engine_config(draft_model(KVIK_SOURCE_DIR "/models/stories260K.gguf", 4), 0);
  EngineConfig without = engine_config({}, 0);
  with.kv_cache_memory_gib = without.kv_cache_memory_gib = 0.01;
  EngineCore a(*m, with, {2}), b(*m, without, {2});
  EXPECT_EQ(a.kv_cache_manager().pool().num_free_blocks(), b.kv_cache_manager().pool().num_free_blocks() / 2);
}

}  // namespace

namespace {

// disable_by_batch_size (vLLM's key): with more requests in the engine than it allows nobody proposes; the same
// request alone speculates.
TEST(SpecDecodeEngine, DisableByBatchSize) {
  auto m = stories();
  SpeculativeConfig c = parse_speculative_config(
      R"({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3, "prompt_lookup_min": 1,
          "disable_by_batch_size": 3})");
  EXPECT_EQ(c.disable_by_batch_size, 3);
  const Job one{story_prompts()(5, 40), greedy(40)};
  EXPECT_GT(run_jobs(*m, engine_config(c), {one}).spec.num_drafts, 0);
  const std::vector<Job> four(4, one);
  const Outcome busy = run_jobs(*m, engine_config(c), four);
  EXPECT_EQ(busy.spec.num_drafts, 0);
  EXPECT_EQ(busy.tokens.at("r3"), run_jobs(*m, engine_config({}), {one}).tokens.at("r0"));
  EXPECT_NE(parse_error(R"({"method": "ngram", "num_speculative_tokens": 3, "disable_by_batch_size": 0})")
                .find("\"disable_by_batch_size\" must be in 1.."),
            std::string::npos);
}

}  // namespace

namespace {

// ---- suffix decoding ----

TEST(SpecDecodeSuffix, ProposesFromItsOwnTextThenFromRecentRequests) {
  SuffixCache c(/*max_depth=*/8, /*max_cached_requests=*/2, /*max_spec_factor=*/2.0);
  std::vector<int32_t> out;
  // Its own text: "5 6 ... 5 6" matches 2 tokens and proposes what followed, at most 2 × 2.
  const std::vector<int32_t> own = {1, 5, 6, 7, 8, 9, 10, 5, 6};
  EXPECT_EQ(c.propose(own, 8, out), 4);
  EXPECT_EQ(out, (std::vector<int32_t>{7, 8, 9, 10}));
  EXPECT_EQ(c.propose(own, 3, out), 3);  // and at most k
  // Nothing earlier: no proposal, until a recent request has the text.
  const std::vector<int32_t> fresh = {40, 41, 42, 43, 44};
  EXPECT_EQ(c.propose(fresh, 8, out), 0);
  c.add(std::vector<int32_t>{90, 42, 43, 44, 45, 46, 47, 48, 49});
  EXPECT_EQ(c.propose(fresh, 8, out), 5);  // "42 43 44" matched (3 tokens: up to 6), the cached text ends after 5
  EXPECT_EQ(out, (std::vector<int32_t>{45, 46, 47, 48, 49}));
  // The longest match wins over a more recent shorter one; the oldest request leaves past max_cached_requests.
  c.add(std::vector<int32_t>{7, 43, 44, 60, 61, 62});
  EXPECT_EQ(c.propose(fresh, 8, out), 5);
  EXPECT_EQ(out[0], 45);
  c.add(std::vector<int32_t>{1, 2, 3});
  EXPECT_EQ(c.num_cached(), 2);
  EXPECT_EQ(c.propose(fresh, 8, out), 3);  // "43 44" (2): the request that had "42 43 44" is gone
  EXPECT_EQ(out, (std::vector<int32_t>{60, 61, 62}));
  // A loop in its own text continues past its end, as lookup does.
  EXPECT_EQ(c.propose(std::vector<int32_t>{3, 4, 3, 4, 3, 4}, 6, out), 6);
  EXPECT_EQ(out, (std::vector<int32_t>{3, 4, 3, 4, 3, 4}));
}

TEST(SpecDecodeSuffix, ConfigUsesVllmKeys) {
  SpeculativeConfig c = parse_speculative_config(
      R"({"method": "suffix", "suffix_decoding_max_tree_depth": 16, "suffix_decoding_max_cached_requests": 50,
          "suffix_decoding_max_spec_factor": 1.5})");
  EXPECT_EQ(c.method, SpeculativeConfig::Method::kSuffix);
  EXPECT_EQ(c.num_speculative_tokens, 16);  // the depth, without num_speculative_tokens
  EXPECT_EQ(c.suffix_max_cached_requests, 50);
  EXPECT_DOUBLE_EQ(c.suffix_max_spec_factor, 1.5);
  EXPECT_NE(parse_error(R"({"method": "suffix", "suffix_decoding_min_token_prob": 0.1})").find("unknown key"),
            std::string::npos);
  EXPECT_NE(parse_error(R"({"method": "suffix", "suffix_decoding_max_spec_factor": -1})").find("(0, 64]"),
            std::string::npos);
}

// An agent loop: the same request again is proposed from the first one's text (acceptance high from its first
// step), with greedy output identical to the plain engine's, alone and in a batch.
TEST(SpecDecodeSuffix, RepeatedRequestsSpeculateFromEarlierOnesAndMatchPlain) {
  auto m = stories();
  SpeculativeConfig spec;
  spec.method = SpeculativeConfig::Method::kSuffix;
  spec.num_speculative_tokens = 6;
  spec.adaptive = false;
  EngineConfig cfg = engine_config(spec);
  EngineCore e(*m, cfg, {2});
  EngineCore p(*m, engine_config({}), {2});
  const std::vector<int32_t> prompt = story_prompts()(5, 20);
  for (int round = 0; round < 3; ++round) {
    std::vector<int32_t> got, want;
    const std::string id = "r" + std::to_string(round);
    ASSERT_EQ(msg(e.add_request(id, prompt, greedy(48))), "");
    ASSERT_EQ(msg(p.add_request(id, prompt, greedy(48))), "");
    while (e.has_unfinished())
      for (auto& o : e.step()) got.insert(got.end(), o.new_token_ids.begin(), o.new_token_ids.end());
    while (p.has_unfinished())
      for (auto& o : p.step()) want.insert(want.end(), o.new_token_ids.begin(), o.new_token_ids.end());
    EXPECT_EQ(got, want) << id;
  }
  const SpecDecodeStats& s = e.spec_decode_stats();
  EXPECT_GT(s.acceptance_rate(), 0.9) << s.num_accepted_tokens << " of " << s.num_draft_tokens;
  EXPECT_GT(s.mean_accepted_len(), 4.0);
  std::vector<Job> batch;
  for (int i = 0; i < 8; ++i) batch.push_back({story_prompts()(5 + i % 2, 20), greedy(30)});
  EXPECT_EQ(run_jobs(*m, engine_config(spec), batch).tokens, run_jobs(*m, engine_config({}), batch).tokens);
}

}  // namespace
