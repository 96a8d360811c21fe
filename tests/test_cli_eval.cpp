// The quantization-judging commands as a user runs them: kvik perplexity (--json keys, --reference, errors),
// kvik eval quant-error --json, kvik inspect --fit, and --kv-cache-dtype on generate.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "run_kvik.h"

namespace {

using kvik::test::Result;
using kvik::test::run;

const std::string kModel = KVIK_SOURCE_DIR "/models/stories260K.gguf";
const std::string kText = KVIK_SOURCE_DIR "/tests/data/stories.txt";

std::set<std::string> keys(const nlohmann::json& j) {
  std::set<std::string> k;
  for (auto it = j.begin(); it != j.end(); ++it) k.insert(it.key());
  return k;
}

}  // namespace

TEST(CliEval, PerplexityJson) {
  auto r = run("perplexity -m " + kModel + " -f " + kText + " -c 128 --chunks 4 --json", false);
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(keys(j), (std::set<std::string>{"ppl", "ppl_stderr", "tokens", "chunks"}));
  EXPECT_EQ(j["chunks"], 4);
  EXPECT_EQ(j["tokens"], 4 * 63);
  EXPECT_GT(j["ppl"].get<double>(), 1.0);
  r = run("perplexity -m " + kModel + " -f " + kText + " -c 128 --chunks 2 --reference " + kModel + " --json", false);
  ASSERT_EQ(r.code, 0) << r.out;
  const auto k = nlohmann::json::parse(r.out);
  EXPECT_EQ(keys(k), (std::set<std::string>{"ppl", "ppl_stderr", "tokens", "chunks", "kld_mean", "top1_agreement",
                                            "delta_p_rms"}));
  EXPECT_GE(k["top1_agreement"].get<double>(), 0.99);
  EXPECT_LE(k["top1_agreement"].get<double>(), 1.0);
}

TEST(CliEval, PerplexityErrorsNameTheProblem) {
  auto r = run("perplexity -m " + kModel + " -f /nonexistent.txt");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("/nonexistent.txt"), std::string::npos) << r.out;
  r = run("perplexity -m " + kModel + " -f " + kText + " -c 100000");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("fewer than one window"), std::string::npos) << r.out;
  r = run("perplexity -m " + kModel + " -f " + kText + " --kv-cache-dtype q4");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("q4"), std::string::npos) << r.out;
  r = run("generate -m " + kModel + " --prompt hi --kv-cache-dtype int3");
  EXPECT_NE(r.code, 0);
}

TEST(CliEval, QuantErrorJson) {
  auto r = run("eval quant-error -m " + kModel + " -f " + kText +
                   " -c 128 --chunks 4 --schemes 'int8 per-row,int4 per-tensor' --json",
               false);
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["schemes"].size(), 2u);
  EXPECT_EQ(j["schemes"][0]["scheme"], "int8 per-row");
  EXPECT_LT(j["schemes"][0]["ppl"].get<double>(), j["schemes"][1]["ppl"].get<double>());
  EXPECT_EQ(j["outliers"]["layers"].size(), 5u);
  r = run("eval quant-error -m " + kModel + " -f " + kText + " --schemes int2");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("int2"), std::string::npos);
}

TEST(CliEval, InspectFitTable) {
  const std::string path = ::testing::TempDir() + "kvik_fit_synth.gguf";
  // d 256, 4 layers, 2 KV heads of 64: KV f16 2·4·128·2 = 2048 B/token, q8_0 2·4·(128/32·34) = 1088.
  auto r = run("synth " + path +
               " --dim 256 --layers 4 --heads 4 --kv-heads 2 --ff 512 --vocab 512 --context 1024 --type f16");
  ASSERT_EQ(r.code, 0) << r.out;
  r = run("inspect " + path + " --fit 0.01 --max-model-len 1024", false);
  ASSERT_EQ(r.code, 0) << r.out;
  for (const char* s : {"F16", "Q8_0", "Q6_K", "Q4_K_M", "Q4_0", "IQ4_NL", " 2048 ", " 1088 ", "sequences"})
    EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.out;
  r = run("inspect " + path + " --fit 0.001", false);
  EXPECT_NE(r.out.find("does not fit"), std::string::npos) << r.out;
}
