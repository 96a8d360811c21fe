// The kvik binary's commands, run as a user would run them.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "run_kvik.h"

namespace {

using kvik::test::Result;
using kvik::test::run;

Result run_stdout(const std::string& args) { return run(args, false); }

const std::string kModel = KVIK_SOURCE_DIR "/models/stories260K.gguf";

}  // namespace

TEST(Cli, GenerateJsonGreedyMatchesLlamaCpp) {
  auto r =
      run_stdout("generate --model " + kModel + " --prompt 'Once upon a time' --temperature 0 --max-tokens 8 --json");
  ASSERT_EQ(r.code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["prompt_token_ids"], nlohmann::json({1, 403, 407, 261, 378}));
  EXPECT_EQ(j["token_ids"], nlohmann::json({432, 383, 286, 261, 376, 298, 315, 421}));  // llama.cpp's greedy ids
  EXPECT_EQ(j["text"], ", there was a little girl");
  EXPECT_EQ(j["finish_reason"], "length");
  for (const char* k : {"prefill_ms", "decode_ms", "prefill_tok_s", "decode_tok_s"})
    EXPECT_TRUE(j["timings"].contains(k)) << k;
}

// --speculative-config on generate: greedy ids identical to the plain run above, drafts counted per request;
// a malformed config fails before loading, naming the key.
TEST(Cli, GenerateWithSpeculativeConfig) {
  const std::string base = "generate --model " + kModel +
                           " --prompt 'Once upon a time, there was a little girl. Once upon a time, there was a little'"
                           " --temperature 0 --max-tokens 24 --json";
  auto plain = run_stdout(base);
  auto spec = run_stdout(base +
                         " --speculative-config '{\"method\": \"ngram\", \"num_speculative_tokens\": 4, "
                         "\"prompt_lookup_max\": 3, \"prompt_lookup_min\": 1}'");
  ASSERT_EQ(plain.code, 0) << plain.out;
  ASSERT_EQ(spec.code, 0) << spec.out;
  const auto a = nlohmann::json::parse(plain.out), b = nlohmann::json::parse(spec.out);
  EXPECT_EQ(b["token_ids"], a["token_ids"]);
  EXPECT_GT(b["spec_decode"]["accepted_tokens"].get<int>(), 0) << spec.out;
  EXPECT_EQ(a["spec_decode"]["draft_tokens"].get<int>(), 0);
  auto bad = run(base + " --speculative-config '{\"method\": \"ngram\", \"num_speculative_tokens\": 4, \"n\": 1}'");
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.out.find("unknown key \"n\""), std::string::npos) << bad.out;
}

TEST(Cli, GenerateStopsAtContextLength) {
  // (stories260K separates stories with BOS and practically never emits EOS; the engine test covers EOS.)
  Result r;
  nlohmann::json j;
  r = run_stdout("generate --model " + kModel +
                 " --prompt 'Once upon a time' --temperature 0 --max-tokens 1000 --max-model-len 32 --json");
  ASSERT_EQ(r.code, 0) << r.out;
  j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["finish_reason"], "length");
  EXPECT_EQ(j["prompt_token_ids"].size() + j["token_ids"].size(), 32u);
}

TEST(Cli, GenerateSeededSamplingIsReproducible) {
  const std::string a = "generate --model " + kModel +
                        " --prompt 'Lily' --temperature 1 --top-k 40 --top-p 0.9 --seed 5 --max-tokens 20 --json";
  auto r1 = run_stdout(a), r2 = run_stdout(a);
  ASSERT_EQ(r1.code, 0);
  EXPECT_EQ(nlohmann::json::parse(r1.out)["token_ids"], nlohmann::json::parse(r2.out)["token_ids"]);
}

TEST(Cli, GeneratePromptsFileKeepsInputOrder) {
  const std::string path = ::testing::TempDir() + "kvik_prompts.jsonl";
  std::ofstream(path) << R"({"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0})"
                      << "\n"
                      << R"({"prompt": "Lily and Tom", "max_tokens": 3, "temperature": 0})"
                      << "\n";
  auto r = run_stdout("generate --model " + kModel + " --prompts " + path);
  ASSERT_EQ(r.code, 0) << r.out;
  std::istringstream in(r.out);
  std::string l1, l2;
  std::getline(in, l1);
  std::getline(in, l2);
  EXPECT_EQ(nlohmann::json::parse(l1)["token_ids"], nlohmann::json({432, 383, 286, 261, 376, 298, 315, 421}));
  EXPECT_EQ(nlohmann::json::parse(l2)["token_ids"].size(), 3u);
  std::ofstream(path) << R"({"prompt": "x", "max_tokens": "many"})"
                      << "\n";
  r = run("generate --model " + kModel + " --prompts " + path);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find(":1"), std::string::npos) << r.out;
}

TEST(Cli, TokenizeAndDetokenize) {
  auto r = run_stdout("tokenize --model " + kModel + " --text 'Hello world' --json");
  ASSERT_EQ(r.code, 0);
  EXPECT_EQ(nlohmann::json::parse(r.out)["ids"], nlohmann::json({1, 346, 306, 414, 263, 304, 341}));
  r = run_stdout("detokenize --model " + kModel + " --ids 1,346,306,414,263,304,341");
  ASSERT_EQ(r.code, 0);
  EXPECT_EQ(r.out, "Hello world\n");
  r = run("detokenize --model " + kModel + " --ids 1,99999");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("99999"), std::string::npos);
}

TEST(Cli, InspectShowsShapesParamsAndKvBytes) {
  auto r = run_stdout("inspect " + kModel);
  ASSERT_EQ(r.code, 0);
  for (const char* s : {"d  ", "L  ", "n_h", "n_kv", "d_h", "d_ff", "V  ", "parameters:", "KV bytes per token",
                        "1280 (f32)", "blk.0.attn_q.weight", "token_embd.weight"})
    EXPECT_NE(r.out.find(s), std::string::npos) << s;
}

TEST(Cli, SynthThenInspectAndGenerate) {
  const std::string path = ::testing::TempDir() + "kvik_cli_synth.gguf";
  auto r =
      run("synth " + path +
          " --dim 64 --layers 2 --heads 4 --kv-heads 1 --ff 128 --vocab 600 --type q8_0 --tokenizer-from " + kModel);
  ASSERT_EQ(r.code, 0) << r.out;
  r = run_stdout("inspect " + path);
  EXPECT_NE(r.out.find("MQA"), std::string::npos) << r.out;
  r = run_stdout("generate --model " + path + " --prompt 'Hi' --max-tokens 4 --temperature 0 --json");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(nlohmann::json::parse(r.out)["token_ids"].size(), 4u);
}

TEST(Cli, BadFilesGiveClearErrorsNotCrashes) {
  auto r = run("generate --model /nonexistent.gguf --prompt x");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("/nonexistent.gguf"), std::string::npos);
  const std::string trunc = ::testing::TempDir() + "kvik_truncated.gguf";
  {
    std::ifstream in(kModel, std::ios::binary);
    std::string head(5000, '\0');
    in.read(head.data(), head.size());
    std::ofstream(trunc, std::ios::binary) << head;
  }
  r = run("generate --model " + trunc + " --prompt x");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("byte offset"), std::string::npos) << r.out;
  r = run("inspect " + trunc);
  EXPECT_EQ(r.code, 1);
}

TEST(Cli, BenchJson) {
  auto r = run_stdout("bench --model " + kModel +
                      " --num-prompts 8 --input-len 40 --output-len 8 --shared-prefix-len 32 --concurrency 4 --json");
  ASSERT_EQ(r.code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  for (const char* k : {"requests", "duration_s", "output_tok_s", "total_tok_s", "ttft_ms", "itl_ms",
                        "prefix_cache_hit_rate", "preemptions", "kv_usage_peak"})
    EXPECT_TRUE(j.contains(k)) << k;
  EXPECT_EQ(j["requests"], 8);
  EXPECT_GT(j["prefix_cache_hit_rate"].get<double>(), 0.0);
}

// With --speculative-config, bench --json adds the acceptance figures (vLLM's spec_decode names); without, they are 0.
TEST(Cli, BenchJsonWithSpeculativeConfig) {
  const std::string base =
      "bench --model " + kModel + " --num-prompts 4 --input-len 16 --output-len 64 --no-bandwidth --json";
  auto spec = run_stdout(base +
                         " --speculative-config '{\"method\": \"ngram\", \"num_speculative_tokens\": 3, "
                         "\"prompt_lookup_max\": 2, \"prompt_lookup_min\": 1}'");
  auto plain = run_stdout(base);
  ASSERT_EQ(spec.code, 0) << spec.out;
  ASSERT_EQ(plain.code, 0) << plain.out;
  const auto s = nlohmann::json::parse(spec.out), p = nlohmann::json::parse(plain.out);
  EXPECT_GT(s["spec_num_drafts"].get<int64_t>(), 0) << spec.out;
  EXPECT_GT(s["spec_acceptance_rate"].get<double>(), 0.0);
  EXPECT_LE(s["spec_acceptance_rate"].get<double>(), 1.0);
  EXPECT_GT(s["spec_mean_accepted_len"].get<double>(), 1.0);
  EXPECT_LE(s["spec_mean_accepted_len"].get<double>(), 4.0);
  EXPECT_GT(s["request_decode_tok_s"].get<double>(), 0.0);
  EXPECT_EQ(p["spec_num_drafts"].get<int64_t>(), 0);
  EXPECT_EQ(p["spec_acceptance_rate"].get<double>(), 0.0);
  EXPECT_EQ(p["spec_mean_accepted_len"].get<double>(), 0.0);
}

TEST(Cli, RefusesWhenOneSequenceDoesNotFit) {
  auto r = run("generate --model " + kModel + " --prompt x --kv-cache-memory 0.0001");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("--max-model-len"), std::string::npos) << r.out;
}
