// Sampling: greedy, temperature, top-k, top-p, min-p, seeds.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "engine/sample/sampler.h"
#include "validation_util.h"

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
  EXPECT_NE(msg(p.validate()).find("temperature"), std::string::npos);
  p = SamplingParams();
  p.top_p = 0;
  EXPECT_NE(msg(p.validate()).find("top_p"), std::string::npos);
  p = SamplingParams();
  p.max_tokens = 0;
  EXPECT_NE(msg(p.validate()).find("max_tokens"), std::string::npos);
}

namespace {

// The distribution each filter setting should give, computed here from the definitions (not through
// sampling_distribution): softmax(l / T), then top-k, top-p (smallest prefix of the sorted probabilities
// whose mass reaches p), min-p (p ≥ min_p · p_max), each step renormalised.
std::vector<double> analytic(const std::vector<float>& l, const SamplingParams& sp) {
  const size_t n = l.size();
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return l[a] > l[b]; });
  std::vector<double> p(n, 0.0);
  double z = 0;
  for (size_t i = 0; i < n; ++i) z += p[i] = std::exp((l[i] - l[order[0]]) / sp.temperature);
  for (auto& x : p) x /= z;
  auto renorm = [&] {
    double s = 0;
    for (double x : p) s += x;
    for (auto& x : p) x /= s;
  };
  if (sp.top_k > 0)
    for (size_t r = static_cast<size_t>(sp.top_k); r < n; ++r) p[order[r]] = 0;
  renorm();
  if (sp.top_p < 1.0f) {
    double cum = 0;
    size_t r = 0;
    for (; r < n && cum < sp.top_p; ++r) cum += p[order[r]];
    for (; r < n; ++r) p[order[r]] = 0;
    renorm();
  }
  if (sp.min_p > 0) {
    const double cut = sp.min_p * p[order[0]];
    for (auto& x : p)
      if (x < cut) x = 0;
    renorm();
  }
  return p;
}

// χ² critical values at p = 0.001 for 1..9 degrees of freedom.
constexpr double kChi2Critical001[] = {0, 10.83, 13.82, 16.27, 18.47, 20.52, 22.46, 24.32, 26.12, 27.88};

}  // namespace

// 20 000 draws per setting: the empirical frequencies match the analytic distribution (χ², p > 0.001) and
// filtered-out tokens never appear.
TEST(Sampler, FrequenciesMatchTheAnalyticDistributionForEachFilter) {
  const std::vector<float> l = {2.0f, 1.5f, 1.2f, 0.7f, 0.3f, 0.0f, -0.5f, -1.0f, -2.0f, 0.9f};
  struct Setting {
    const char* name;
    float temperature;
    int32_t top_k;
    float top_p;
    float min_p;
  };
  const Setting settings[] = {
      {"temperature 1", 1.0f, 0, 1.0f, 0.0f}, {"temperature 0.5", 0.5f, 0, 1.0f, 0.0f},
      {"temperature 2", 2.0f, 0, 1.0f, 0.0f}, {"top-k 4", 1.0f, 4, 1.0f, 0.0f},
      {"top-p 0.7", 1.0f, 0, 0.7f, 0.0f},     {"min-p 0.2", 1.0f, 0, 1.0f, 0.2f},
      {"all four", 0.8f, 6, 0.9f, 0.05f},
  };
  uint64_t seed = 100;
  for (const Setting& s : settings) {
    SamplingParams sp;
    sp.temperature = s.temperature;
    sp.top_k = s.top_k;
    sp.top_p = s.top_p;
    sp.min_p = s.min_p;
    const std::vector<double> p = analytic(l, sp);
    RequestRng rng(seed++);
    const int N = 20000;
    std::vector<int> n(l.size(), 0);
    for (int i = 0; i < N; ++i) ++n[sample_token(l, sp, rng)];
    double chi2 = 0;
    int kept = 0;
    for (size_t k = 0; k < l.size(); ++k) {
      if (p[k] == 0) {
        EXPECT_EQ(n[k], 0) << s.name << ": token " << k << " is filtered out but was drawn";
        continue;
      }
      ++kept;
      const double e = p[k] * N;
      chi2 += (n[k] - e) * (n[k] - e) / e;
    }
    ASSERT_GE(kept, 2) << s.name;
    EXPECT_LT(chi2, kChi2Critical001[kept - 1]) << s.name << ": chi-square " << chi2 << " with " << kept - 1 << " dof";
  }
}
