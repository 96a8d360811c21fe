// kvik eval quant-error on stories260K: the known qualitative result (int4 with one scale per tensor is far
// worse than int4 in groups of 128 and NF4; int8 stays close to the original), the fake quantizers themselves,
// and the outlier report's shape.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <sstream>

#include "eval/quant_error.h"
#include "tokenizer/tokenizer.h"

using namespace kvik;

namespace {

const std::string kStories = KVIK_SOURCE_DIR "/models/stories260K.gguf";

const FakeQuantScheme& scheme(const std::string& name) {
  static const std::vector<FakeQuantScheme> all = fake_quant_schemes();
  for (const auto& s : all)
    if (s.name == name) return s;
  throw std::runtime_error("no scheme " + name);
}

}  // namespace

TEST(QuantError, FakeQuantizers) {
  // Per-tensor int4: one outlier sets the step for everyone; groups of 128 confine it to its group.
  std::vector<float> w(2 * 256);
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.01f * std::sin(0.37f * i);
  w[3] = 1.0f;
  auto err = [&](const std::string& name) {
    std::vector<float> q = w;
    scheme(name).apply(q.data(), 2, 256);
    double s = 0;
    for (size_t i = 0; i < w.size(); ++i) s += (q[i] - w[i]) * (q[i] - w[i]);
    return std::sqrt(s / w.size());
  };
  EXPECT_GT(err("int4 per-tensor"), 1.8 * err("int4 group-128"));  // measured 0.0070 vs 0.0035
  EXPECT_GT(err("int4 per-row"), err("int4 group-128"));
  EXPECT_LT(err("int8 per-row"), err("int4 per-row"));
  EXPECT_EQ(err("q8_0") > 0, true);
  // NF4: every value lands on codebook × its group's absmax.
  std::vector<float> q = w;
  scheme("nf4 group-64").apply(q.data(), 2, 256);
  for (int64_t g = 0; g < 8; ++g) {
    float amax = 0;
    for (int i = 0; i < 64; ++i) amax = std::max(amax, std::fabs(w[g * 64 + i]));
    for (int i = 0; i < 64; ++i) {
      bool on_code = false;
      for (float c : kNf4Codebook) on_code |= q[g * 64 + i] == c * amax;
      EXPECT_TRUE(on_code) << g * 64 + i;
    }
  }
  // Zeros stay zero.
  std::vector<float> z(256, 0.0f);
  for (const auto& s : fake_quant_schemes()) {
    s.apply(z.data(), 1, 256);
    for (float v : z) EXPECT_EQ(v, 0.0f) << s.name;
  }
}

TEST(QuantError, Stories260kReproducesTheKnownOrdering) {
  std::ifstream in(KVIK_SOURCE_DIR "/tests/data/stories.txt");
  std::ostringstream text;
  text << in.rdbuf();
  auto tok = load_tokenizer(kStories);
  PerplexityOptions opt;
  opt.ctx = 128;
  const PerplexityWindows w = make_windows(*tok, text.str(), opt.ctx, -1);
  const QuantErrorReport r = quant_error([] { return LlamaModel::load(kStories); }, w, opt);
  std::map<std::string, QuantErrorRow> by;
  std::printf("%-16s %7s %11s %9s %7s\n", "scheme", "bits/w", "weight RMSE", "PPL", "top-1");
  std::printf("%-16s %7s %11s %9.4f\n", "original", "", "", r.base_ppl);
  for (const auto& row : r.rows) {
    by[row.scheme] = row;
    std::printf("%-16s %7.2f %11.3e %9.4f %6.2f%%  (%lld of %lld matrices skipped)\n", row.scheme.c_str(),
                row.bits_per_weight, row.weight_rmse, row.ppl, 100 * row.top1_agreement,
                (long long)row.skipped_matrices, (long long)row.matrices);
  }
  const double base = r.base_ppl;
  auto rise = [&](const std::string& s) { return by.at(s).ppl / base - 1; };
  // int8 is close to the original.
  EXPECT_LT(std::fabs(rise("int8 per-row")), 0.01);
  EXPECT_LT(std::fabs(rise("int8 per-tensor")), 0.03);
  EXPECT_GT(by.at("int8 per-row").top1_agreement, 0.95);
  // int4 with one scale per tensor is far worse than groups of 128 and NF4.
  EXPECT_GT(rise("int4 per-tensor"), 3 * rise("int4 group-128"));
  EXPECT_GT(rise("int4 per-tensor"), 3 * rise("nf4 group-64"));
  EXPECT_LT(by.at("int4 per-tensor").top1_agreement, by.at("int4 group-128").top1_agreement);
  EXPECT_GT(by.at("int4 per-tensor").weight_rmse, 2 * by.at("int4 group-128").weight_rmse);
  // One outlier report per layer.
  EXPECT_EQ(static_cast<int64_t>(r.outliers.size()), 5);
  for (const auto& l : r.outliers) EXPECT_GT(l.rms, 0);
}
