// Sampler penalties and logprobs against plain scalar references written from the formulas.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "engine/sample/sampler.h"
#include "validation_util.h"

using namespace kvik;

namespace {

std::vector<float> random_logits(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 3.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// vLLM's penalties, one vocabulary entry at a time.
std::vector<float> reference_penalties(std::vector<float> l, const std::vector<int32_t>& prompt,
                                       const std::vector<int32_t>& output, const SamplingParams& p) {
  for (int32_t v = 0; v < static_cast<int32_t>(l.size()); ++v) {
    int out_count = 0;
    bool in_prompt = false;
    for (int32_t t : output) out_count += t == v;
    for (int32_t t : prompt) in_prompt |= t == v;
    if (in_prompt || out_count > 0) l[v] = l[v] > 0 ? l[v] / p.repetition_penalty : l[v] * p.repetition_penalty;
    l[v] -= p.frequency_penalty * out_count;
    if (out_count > 0) l[v] -= p.presence_penalty;
  }
  return l;
}

}  // namespace

TEST(Penalties, MatchScalarReferenceOnRandomInputs) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    const int V = 1 + static_cast<int>(rng() % 300);
    std::vector<int32_t> prompt(rng() % 40), output(rng() % 40);
    for (auto& t : prompt) t = static_cast<int32_t>(rng() % V);
    for (auto& t : output) t = static_cast<int32_t>(rng() % V);
    SamplingParams p;
    p.presence_penalty = std::uniform_real_distribution<float>(-2, 2)(rng);
    p.frequency_penalty = std::uniform_real_distribution<float>(-2, 2)(rng);
    p.repetition_penalty = std::uniform_real_distribution<float>(0.5f, 2.0f)(rng);
    std::vector<float> logits = random_logits(V, trial);
    const std::vector<float> want = reference_penalties(logits, prompt, output, p);
    apply_penalties(logits, prompt, output, p);
    for (int v = 0; v < V; ++v) EXPECT_NEAR(logits[v], want[v], 1e-5f) << "trial " << trial << " token " << v;
  }
}

TEST(Penalties, NeutralValuesLeaveLogitsUnchanged) {
  std::vector<float> logits = random_logits(64, 1);
  const std::vector<float> before = logits;
  SamplingParams p;
  EXPECT_FALSE(p.has_penalties());
  apply_penalties(logits, std::vector<int32_t>{1, 2, 3}, std::vector<int32_t>{4, 4}, p);
  EXPECT_EQ(logits, before);
}

TEST(Penalties, RepetitionPenaltyAppliesOncePerToken) {
  std::vector<float> logits = {2.0f, -2.0f, 1.0f};
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  apply_penalties(logits, std::vector<int32_t>{0, 0, 1}, std::vector<int32_t>{0, 1, 1}, p);
  EXPECT_FLOAT_EQ(logits[0], 1.0f);   // positive: divided
  EXPECT_FLOAT_EQ(logits[1], -4.0f);  // negative: multiplied
  EXPECT_FLOAT_EQ(logits[2], 1.0f);   // unseen
}

TEST(Penalties, ValidateNamesTheField) {
  SamplingParams p;
  p.presence_penalty = 3;
  EXPECT_NE(msg(p.validate()).find("presence_penalty"), std::string::npos);
  p = {};
  p.frequency_penalty = -2.5f;
  EXPECT_NE(msg(p.validate()).find("frequency_penalty"), std::string::npos);
  p = {};
  p.repetition_penalty = 0;
  EXPECT_NE(msg(p.validate()).find("repetition_penalty"), std::string::npos);
  p = {};
  p.logprobs = kMaxLogprobs + 1;
  EXPECT_NE(msg(p.validate()).find("logprobs"), std::string::npos);
}

TEST(Logprobs, MatchDoubleLogSoftmaxAndTopKOrder) {
  for (int V : {1, 2, 7, 32000 % 997, 500}) {
    const std::vector<float> logits = random_logits(V, V);
    double mx = -INFINITY, z = 0;
    for (float l : logits) mx = std::max(mx, double(l));
    for (float l : logits) z += std::exp(double(l) - mx);
    const int32_t token = V / 2;
    const int32_t k = std::min(5, V);
    const TokenLogprobs r = compute_logprobs(logits, token, k);
    EXPECT_EQ(r.token, token);
    EXPECT_NEAR(r.logprob, logits[token] - mx - std::log(z), 1e-5);
    ASSERT_EQ(static_cast<int>(r.top.size()), k);
    for (int i = 0; i < k; ++i) {
      EXPECT_NEAR(r.top[i].second, logits[r.top[i].first] - mx - std::log(z), 1e-5);
      if (i > 0) EXPECT_GE(r.top[i - 1].second, r.top[i].second);
      // Nothing outside the top list is more likely than its last entry.
      int larger = 0;
      for (float l : logits) larger += l > logits[r.top[i].first];
      EXPECT_LE(larger, i);
    }
  }
}

TEST(Logprobs, ZeroTopGivesOnlyTheSampledToken) {
  const std::vector<float> logits = {0.0f, 0.0f};
  const TokenLogprobs r = compute_logprobs(logits, 1, 0);
  EXPECT_TRUE(r.top.empty());
  EXPECT_NEAR(r.logprob, std::log(0.5), 1e-6);
}
