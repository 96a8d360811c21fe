// kvik's unmerged LoRA against llama.cpp's (llama_adapter_lora via node-llama-cpp), token for token. Reference:
// tests/fixtures/ref_lora.json, made by tools/make_lora_fixture.sh: GGUF LoRA files written by `kvik synth-lora`
// (options, size and sha256 recorded; the test writes each again and checks it is the file llama.cpp ran) applied at
// a scale to stories260K and to a `kvik synth` GQA model; 32 greedy tokens and the top-5 probabilities per step.
#include <gtest/gtest.h>

#include <unistd.h>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/sample/logits_ops.h"
#include "engine/single_sequence.h"
#include "llamacpp_fixture.h"
#include "model/llama.h"
#include "model/lora.h"
#include "model/synth.h"
#include "model/synth_lora.h"

using namespace kvik;
namespace fs = std::filesystem;

namespace {

constexpr const char* kStories = KVIK_SOURCE_DIR "/models/stories260K.gguf";
constexpr const char* kFixture = KVIK_SOURCE_DIR "/tests/fixtures/ref_lora.json";

using test::sha256_file;

std::string gqa_base(const nlohmann::json& so, const fs::path& dir) {
  SynthOptions o;
  o.out_path = (dir / "gqa.gguf").string();
  o.dim = so.at("dim"), o.layers = so.at("layers"), o.heads = so.at("heads"), o.kv_heads = so.at("kv_heads");
  o.ff = so.at("ff"), o.vocab = so.at("vocab"), o.seed = so.at("seed");
  o.tokenizer_from = kStories;
  if (!fs::exists(o.out_path)) synth_llama_gguf(o);
  return o.out_path;
}

std::string write_lora(const nlohmann::json& lo, const ModelConfig& c, const std::string& out) {
  SynthLoraOptions o;
  o.out = out;
  o.seed = lo.at("seed");
  o.rank = lo.at("rank");
  o.type = *dtype_from_name(lo.at("type").get<std::string>());
  o.b_std = lo.at("b_std");
  o.targets = parse_lora_targets(lo.at("targets").get<std::string>());
  synth_lora(o, c);
  return out;
}

}  // namespace

// Bounds: every case but one gives llama.cpp's 32 greedy ids, any divergence at a near-tie (llama.cpp's top-2 within
// 3e-3, kvik picking its runner-up); the probabilities kvik gives llama.cpp's top-5 ids deviate by at most 4e-3, mean
// 2e-4. Measured (f32 KV cache in kvik, llama.cpp's f16 flash attention): 6 of 6 cases identical, max 3.2e-3, mean
// 1.6e-4 (2.6e-3 / 1.4e-4 with kvik's f16 KV cache); the max is s_f32_r4_qv, whose q/v adapter sharpens stories'
// distributions. The base model alone deviates by up to 2.3e-3 for the same reason (tests/test_llamacpp_parity.cpp:
// llama.cpp rounds Q to f16 and sums V in f16), so the adapter adds no error of its own beyond that attention.
TEST(LoraParity, GgufAdaptersGreedyAndTop5EqualLlamaCpp) {
  const auto fx = test::read_fixture(kFixture, "tools/make_lora_fixture.sh");
  const fs::path dir = fs::temp_directory_path() / ("kvik_lora_parity_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  double max_dev = 0, sum_dev = 0;
  int64_t n_dev = 0;
  int identical = 0;
  const auto& cases = fx.at("cases");
  ASSERT_GE(cases.size(), 6u);
  for (const auto& c : cases) {
    const std::string name = c.at("name");
    SCOPED_TRACE("case " + name + " " + c.at("prompt").dump());
    const std::string base = c.at("base") == "gqa" ? gqa_base(c.at("base_synth"), dir) : std::string(kStories);
    auto model = LlamaModel::load(base);
    const std::string lora_path = write_lora(c.at("lora"), model->config(), (dir / (name + ".gguf")).string());
    ASSERT_EQ(sha256_file(lora_path), c.at("lora").at("sha256").get<std::string>())
        << "synth-lora no longer writes the adapter llama.cpp ran: rerun tools/make_lora_fixture.sh";
    LoraLoadOptions lo;
    lo.scale = c.at("scale");
    const auto prompt = c.at("prompt_ids").get<std::vector<int32_t>>();
    const auto expected = c.at("generated").get<std::vector<int32_t>>();
    const auto& top = c.at("top");
    SingleSequence seq(*model, static_cast<int64_t>(prompt.size() + expected.size() + 1), DType::F32);
    seq.set_lora(load_lora_adapter(lora_path, model->config(), lo));
    auto logits = seq.append(prompt);
    bool same = true;
    for (size_t i = 0; i < expected.size(); ++i) {
      const int32_t tok = argmax(logits);
      const auto p = softmax_probs(logits);
      for (const auto& e : top.at(i)) {
        const double dev = std::fabs(p[e.at(0).get<int32_t>()] - e.at(1).get<double>());
        max_dev = std::max(max_dev, dev);
        sum_dev += dev;
        ++n_dev;
      }
      if (tok != expected[i]) {
        same = false;
        const double p1 = top.at(i).at(0).at(1).get<double>(), p2 = top.at(i).at(1).at(1).get<double>();
        EXPECT_LE(p1 - p2, 3e-3) << "step " << i << ": kvik " << tok << " vs llama.cpp " << expected[i];
        EXPECT_EQ(tok, top.at(i).at(1).at(0).get<int32_t>()) << "step " << i << ": not llama.cpp's runner-up";
        break;  // the contexts differ from here on
      }
      const int32_t one[1] = {tok};
      logits = seq.append(one);
    }
    identical += same;
  }
  const double mean_dev = sum_dev / static_cast<double>(std::max<int64_t>(n_dev, 1));
  std::printf("LoRA vs llama.cpp: %d of %zu cases give its 32 greedy ids; top-5 |dp| max %.3g, mean %.3g\n", identical,
              cases.size(), max_dev, mean_dev);
  EXPECT_GE(identical, static_cast<int>(cases.size()) - 1);
  EXPECT_LE(max_dev, 4e-3);
  EXPECT_LE(mean_dev, 2e-4);
  fs::remove_all(dir);
}
