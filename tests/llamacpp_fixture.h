// The llama.cpp reference fixtures (tests/fixtures/ref_*.json, written by the tools/make_*fixture*.sh scripts from
// node-llama-cpp) as the parity tests read them: a fixture entry records the `kvik synth` options of the model
// llama.cpp ran (and its size and SHA-256), the prompt's token ids, llama.cpp's greedy tokens and, per step, its
// top-k ids with their probabilities.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/single_sequence.h"
#include "model/llama.h"
#include "model/synth.h"
#include "sha256.h"
#include "tensor/dtype.h"

namespace kvik::test {

inline nlohmann::json read_fixture(const std::string& path, const std::string& script) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path + " (" + script + " writes it)");
  return nlohmann::json::parse(in);
}

// The file's SHA-256, as `sha256sum` prints it (the fixtures record it).
inline std::string sha256_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return sha256_hex(bytes);
}

// The synth options a fixture entry records, writing to `out_path`, the tokenizer from stories260K. The type may be
// q4_k_m (the Q4_K mix) or "f32>MIX" (synth writes F32, the test quantizes: only the part before '>' is used here);
// arch, experts, expert width, sliding window and output scale are optional.
inline SynthOptions synth_options(const nlohmann::json& so, const std::string& out_path) {
  SynthOptions o;
  o.out_path = out_path;
  const std::string type = so.at("type");
  const std::string synth_type = type.substr(0, type.find('>'));
  o.q4_k_m = synth_type == "q4_k_m";
  o.type = o.q4_k_m ? DType::Q4_K : *dtype_from_name(synth_type);
  o.arch = so.value("arch", std::string("llama"));
  o.dim = so.at("dim"), o.layers = so.at("layers"), o.heads = so.at("heads"), o.kv_heads = so.at("kv_heads");
  o.head_dim = so.at("head_dim"), o.ff = so.at("ff"), o.vocab = so.at("vocab"), o.seed = so.at("seed");
  o.experts = so.value("experts", 0), o.experts_used = so.value("experts_used", 0);
  o.expert_ff = so.value("expert_ff", 0);
  o.sliding_window = so.value("sliding_window", 0);
  o.output_scale = so.value("output_scale", 1.0f);
  EXPECT_EQ(so.at("tokenizer_from").get<std::string>(), "stories260K.gguf");
  o.tokenizer_from = KVIK_SOURCE_DIR "/models/stories260K.gguf";
  return o;
}

// Writes the model of fixture entry `m` as DIR/NAME.gguf into *o and checks that synth still writes the file the
// fixture was made with (its size); a failure names `script`, which regenerates the fixture.
inline ::testing::AssertionResult write_fixture_model(const nlohmann::json& m, const std::string& dir,
                                                      const std::string& script, SynthOptions* o) {
  *o = synth_options(m.at("synth"), dir + "/" + m.at("name").get<std::string>() + ".gguf");
  synth_llama_gguf(*o);
  std::ifstream f(o->out_path, std::ios::binary | std::ios::ate);
  const auto size = static_cast<int64_t>(f.tellg());
  if (size == m.at("size").get<int64_t>()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << o->out_path << " has " << size << " bytes, the fixture's model "
                                       << m.at("size").get<int64_t>()
                                       << ": synth no longer writes the model the fixture was made with: rerun "
                                       << script;
}

// kvik's logits with llama.cpp's greedy tokens fed back (teacher forcing): one append of the prompt and all generated
// tokens but the last; row i (of the entry's N generated) predicts generated[i].
inline std::vector<float> teacher_forced_logits(LlamaModel& m, const nlohmann::json& entry, DType kv) {
  std::vector<int32_t> all = entry.at("prompt_ids").get<std::vector<int32_t>>();
  const auto gen = entry.at("generated").get<std::vector<int32_t>>();
  all.insert(all.end(), gen.begin(), gen.end() - 1);
  SingleSequence seq(m, static_cast<int64_t>(all.size()), kv);
  return seq.append(all, static_cast<int64_t>(gen.size()));
}

// Probabilities of a logits row, in double.
inline std::vector<double> probabilities(std::span<const float> logits) {
  const float mx = *std::max_element(logits.begin(), logits.end());
  std::vector<double> p(logits.size());
  double sum = 0;
  for (size_t i = 0; i < logits.size(); ++i) sum += p[i] = std::exp(static_cast<double>(logits[i]) - mx);
  for (double& x : p) x /= sum;
  return p;
}

// max |p_kvik − p_llama.cpp| over the ids of one step's top list ([[id, p], ...]).
inline double top_deviation(const std::vector<double>& p, const nlohmann::json& top) {
  double dev = 0;
  for (const auto& e : top) dev = std::max(dev, std::fabs(p[e.at(0).get<int32_t>()] - e.at(1).get<double>()));
  return dev;
}

// kvik's teacher-forced logits (teacher_forced_logits) held against a fixture entry, position by position: how
// often kvik's argmax is llama.cpp's token, how far the probabilities of llama.cpp's top ids are off (max and mean of
// the per-position max), and how many misses fall outside llama.cpp's top 3. Misses, and positions that deviate by
// more than print_dev, are printed; so is a summary line under `name`.
struct Agreement {
  int64_t agree = 0, far_misses = 0, n = 0;
  double max_dev = 0, mean_dev = 0;
  double rate() const { return static_cast<double>(agree) / static_cast<double>(n); }
};
inline Agreement agreement(const std::string& name, const std::vector<float>& logits, int64_t V,
                           const nlohmann::json& entry, double print_dev = INFINITY) {
  const auto gen = entry.at("generated").get<std::vector<int32_t>>();
  const auto& top = entry.at("top");
  Agreement a;
  a.n = static_cast<int64_t>(gen.size());
  double sum_dev = 0;
  for (int64_t i = 0; i < a.n; ++i) {
    const std::span<const float> row(&logits[i * V], V);
    const auto p = probabilities(row);
    const int32_t tok = static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
    a.agree += tok == gen[i];
    const double dev = top_deviation(p, top.at(i));
    a.max_dev = std::max(a.max_dev, dev), sum_dev += dev;
    if (tok != gen[i] || dev > print_dev)
      std::printf("  pos %lld: kvik %d (p %.4f), llama.cpp %d (kvik p %.4f), |dp| %.3g, llama.cpp top %s\n",
                  static_cast<long long>(i), tok, p[tok], gen[i], p[gen[i]], dev, top.at(i).dump().c_str());
    if (tok != gen[i]) {
      bool in_top3 = false;
      for (size_t j = 0; j < 3 && j < top.at(i).size(); ++j) in_top3 |= tok == top.at(i).at(j).at(0).get<int32_t>();
      a.far_misses += !in_top3;
    }
  }
  a.mean_dev = sum_dev / static_cast<double>(a.n);
  std::printf("%-14s agreement with llama.cpp %lld/%lld = %.2f%%, top |dp| max %.3g mean %.3g\n", name.c_str(),
              static_cast<long long>(a.agree), static_cast<long long>(a.n), 100 * a.rate(), a.max_dev, a.mean_dev);
  return a;
}

}  // namespace kvik::test
