// Sampling: greedy, temperature, top-k, top-p, min-p, seeds.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "engine/sampler.h"

using namespace kvik;

TEST(Sampler, GreedyIsArgmaxLowestIdOnTies) {
  std::vector<float> l = {0.1f, 2.0f, -1.0f, 2.0f};
  SamplingParams p;
  p.temperature = 0;
  RequestRng rng(1);
  EXPECT_EQ(sample_token(l, p, rng), 1);
  EXPECT_EQ(argmax(l), 1);
}

TEST(Sampler, TopKKeepsOnlyTheKMostLikely) {
  std::vector<float> l = {1.0f, 5.0f, 3.0f, 4.0f, 2.0f};
  SamplingParams p;
  p.top_k = 2;
  auto d = sampling_distribution(l, p);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].first, 1);
  EXPECT_EQ(d[1].first, 3);
  EXPECT_NEAR(d[0].second, 1.0 / (1.0 + std::exp(-1.0)), 1e-6);
}

TEST(Sampler, TopPKeepsTheSmallestPrefixReachingP) {
  // softmax of log(0.5), log(0.3), log(0.15), log(0.05) = 0.5, 0.3, 0.15, 0.05
  std::vector<float> l = {std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
  SamplingParams p;
  p.top_p = 0.75f;
  auto d = sampling_distribution(l, p);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_NEAR(d[0].second, 0.5 / 0.8, 1e-5);
  p.top_p = 0.85f;
  EXPECT_EQ(sampling_distribution(l, p).size(), 3u);
}

TEST(Sampler, MinPDropsTokensBelowAFractionOfTheTop) {
  std::vector<float> l = {std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
  SamplingParams p;
  p.min_p = 0.31f;  // cut = 0.155: keeps 0.5, 0.3
  EXPECT_EQ(sampling_distribution(l, p).size(), 2u);
}

TEST(Sampler, TemperatureSharpensAndFlattens) {
  std::vector<float> l = {1.0f, 0.0f};
  SamplingParams p;
  p.temperature = 0.5f;
  EXPECT_NEAR(sampling_distribution(l, p)[0].second, 1.0 / (1.0 + std::exp(-2.0)), 1e-6);
  p.temperature = 2.0f;
  EXPECT_NEAR(sampling_distribution(l, p)[0].second, 1.0 / (1.0 + std::exp(-0.5)), 1e-6);
}

TEST(Sampler, SameSeedSameDrawsAndFrequenciesMatch) {
  std::vector<float> l = {std::log(0.6f), std::log(0.3f), std::log(0.1f)};
  SamplingParams p;
  RequestRng a(42), b(42), c(43);
  std::vector<int32_t> da, db, dc;
  for (int i = 0; i < 200; ++i) {
    da.push_back(sample_token(l, p, a));
    db.push_back(sample_token(l, p, b));
    dc.push_back(sample_token(l, p, c));
  }
  EXPECT_EQ(da, db);
  EXPECT_NE(da, dc);
  // 20 000 draws: chi-square against (0.6, 0.3, 0.1) with 2 degrees of freedom; 13.8 is p = 0.001.
  RequestRng r(7);
  std::map<int32_t, int> n;
  const int N = 20000;
  for (int i = 0; i < N; ++i) ++n[sample_token(l, p, r)];
  const double e[3] = {0.6 * N, 0.3 * N, 0.1 * N};
  double chi2 = 0;
  for (int k = 0; k < 3; ++k) chi2 += (n[k] - e[k]) * (n[k] - e[k]) / e[k];
  EXPECT_LT(chi2, 13.8);
}

TEST(Sampler, ValidateNamesTheField) {
  SamplingParams p;
  p.temperature = -1;
  EXPECT_NE(p.validate().find("temperature"), std::string::npos);
  p = SamplingParams();
  p.top_p = 0;
  EXPECT_NE(p.validate().find("top_p"), std::string::npos);
  p = SamplingParams();
  p.max_tokens = 0;
  EXPECT_NE(p.validate().find("max_tokens"), std::string::npos);
}
