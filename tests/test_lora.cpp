// LoRA adapters (model/lora.h): loading PEFT and GGUF forms, refusing hostile files by name, the unmerged product
// equal to the merged model (kvik merge-lora), the q/k row permutation against a Hugging Face base, and the
// engine: a batch mixing the base model and four adapters equal to each request alone, prefix-cache keys per adapter,
// --max-loras.
#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>

#include "core/error.h"
#include "engine/engine_core.h"
#include "engine/sample/logits_ops.h"
#include "engine/single_sequence.h"
#include "formats/gguf.h"
#include "formats/safetensors.h"
#include "model/llama.h"
#include "model/lora.h"
#include "model/lora_merge.h"
#include "model/synth.h"
#include "model/synth_lora.h"
#include "run_kvik.h"
#include "server/metrics.h"
#include "synth_models.h"
#include "validation_util.h"

using namespace kvik;

namespace {

const std::string kStories = KVIK_SOURCE_DIR "/models/stories260K.gguf";

// Per process: ctest -j runs each test case as its own process, and they must not write each other's files.
std::string tmp(const std::string& name) {
  return ::testing::TempDir() + "kvik_lora_" + std::to_string(::getpid()) + "_" + name;
}

// Removes this process's temp files when the tests are done.
class RemoveTempFiles : public ::testing::Environment {
 public:
  void TearDown() override {
    const std::string prefix = "kvik_lora_" + std::to_string(::getpid()) + "_";
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(::testing::TempDir(), ec))
      if (e.path().filename().string().rfind(prefix, 0) == 0) std::filesystem::remove_all(e.path(), ec);
  }
};
const auto* const kRemoveTempFiles = ::testing::AddGlobalTestEnvironment(new RemoveTempFiles);

std::string synth_gqa_path() {
  static const std::string path =
      test_models::write_synth_gqa("kvik_lora_" + std::to_string(::getpid()) + "_gqa.gguf", 11);
  return path;
}

// A random adapter for `base` written as GGUF (or PEFT with peft), seed-determined.
std::string write_adapter(const std::string& base, const std::string& name, bool peft, uint64_t seed,
                          DType type = DType::F32, int64_t rank = 8) {
  SynthLoraOptions o;
  o.out = tmp(name);
  o.peft = peft;
  o.seed = seed;
  o.type = type;
  o.rank = rank;
  std::filesystem::remove_all(o.out);
  synth_lora(o, LlamaModel::load(base, LoadOptions{false})->config());
  return o.out;
}

std::vector<int32_t> prompt_of(int64_t vocab, uint32_t seed, int len) {
  std::mt19937 rng(seed);
  std::vector<int32_t> p = {1};
  for (int i = 0; i < len; ++i) p.push_back(3 + static_cast<int32_t>(rng() % (vocab - 3)));
  return p;
}

struct Greedy {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;  // the row each token was chosen from
};

Greedy greedy(LlamaModel& m, const std::vector<int32_t>& prompt, int n, std::shared_ptr<const LoraAdapter> lora = {}) {
  SingleSequence s(m, 512);
  s.set_lora(std::move(lora));
  Greedy g;
  std::vector<float> logits = s.append(prompt);
  for (int i = 0; i < n; ++i) {
    g.logits.push_back(logits);
    g.tokens.push_back(argmax(logits));
    const int32_t one[1] = {g.tokens.back()};
    logits = s.append(one);
  }
  return g;
}

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::abs(a[i] - b[i]));
  return d;
}

// Adapter output == the merged model's: greedy tokens equal, logits within float tolerance; and the adapter does
// change the output (else the comparison could not fail).
void expect_adapter_equals_merged(const std::string& base_path, bool peft, DType type) {
  SCOPED_TRACE(base_path + (peft ? " PEFT " : " GGUF ") + std::string(dtype_name(type)));
  const std::string adapter = write_adapter(base_path, peft ? "peft_m" : "gguf_m.gguf", peft, 5, type);
  MergeLoraOptions mo;
  mo.base_path = base_path;
  mo.adapter_path = adapter;
  mo.out_path = tmp("merged.gguf");
  mo.type = DType::F32;
  EXPECT_EQ(merge_lora(mo), 7 * LlamaModel::load(base_path, LoadOptions{false})->config().n_layers);
  auto base = LlamaModel::load(base_path, LoadOptions{false});
  auto merged = LlamaModel::load(mo.out_path, LoadOptions{false});
  auto lora = load_lora_adapter(adapter, base->config());
  const auto prompt = prompt_of(base->config().vocab_size, 3, 20);
  const Greedy plain = greedy(*base, prompt, 24);
  const Greedy with = greedy(*base, prompt, 24, lora);
  const Greedy ref = greedy(*merged, prompt, 24);
  EXPECT_NE(with.tokens, plain.tokens) << "the adapter does not change the output: the test could not fail";
  EXPECT_EQ(with.tokens, ref.tokens);
  // The unmerged product rounds its input to the adapter's partner type (f16 / bf16 activations, as ggml does), the
  // merged F32 matrix does not: the tolerance follows that rounding (2^-11, 2^-8 relative).
  const float tol = type == DType::F32 ? 2e-3f : type == DType::F16 ? 5e-3f : 2e-2f;
  for (size_t i = 0; i < with.logits.size(); ++i) ASSERT_LT(max_abs_diff(with.logits[i], ref.logits[i]), tol) << i;
}

TEST(Lora, AdapterEqualsMergedModelStoriesPeft) { expect_adapter_equals_merged(kStories, true, DType::F32); }
TEST(Lora, AdapterEqualsMergedModelStoriesGguf) { expect_adapter_equals_merged(kStories, false, DType::F32); }
TEST(Lora, AdapterEqualsMergedModelGqaPeft) { expect_adapter_equals_merged(synth_gqa_path(), true, DType::BF16); }
TEST(Lora, AdapterEqualsMergedModelGqaGguf) { expect_adapter_equals_merged(synth_gqa_path(), false, DType::F16); }

// The same adapter as a PEFT directory (HF row order) and as GGUF (q/k lora_B permuted as the converter does)
// gives the same logits on a GGUF base: the PEFT loader permutes q/k exactly as convert_lora_to_gguf.py.
TEST(Lora, PeftAndGgufFormsAgree) {
  auto m = LlamaModel::load(kStories);
  const auto peft = load_lora_adapter(write_adapter(kStories, "peft_same", true, 9), m->config());
  const auto gguf = load_lora_adapter(write_adapter(kStories, "gguf_same.gguf", false, 9), m->config());
  const auto prompt = prompt_of(m->config().vocab_size, 4, 30);
  EXPECT_EQ(greedy(*m, prompt, 8, peft).logits, greedy(*m, prompt, 8, gguf).logits);
}

// A Hugging Face directory and its GGUF twin (synth_hf: q/k permuted by the converter's rule) give the same logits
// under the same PEFT adapter: the permutation applied to lora_B on the GGUF base is the converter's. The GGUF
// adapter on the HF base gets the inverse permutation.
TEST(Lora, HfBaseAndGgufTwinAgreeUnderOneAdapter) {
  SynthOptions o;
  o.hf_dir = tmp("hf_base");
  o.out_path = tmp("hf_twin.gguf");
  o.dim = 64, o.layers = 2, o.heads = 4, o.kv_heads = 2, o.ff = 128, o.vocab = 256, o.context = 256, o.seed = 3;
  std::filesystem::remove_all(o.hf_dir);
  synth_hf(o);
  auto hf = LlamaModel::load(o.hf_dir, LoadOptions{false});
  auto gg = LlamaModel::load(o.out_path, LoadOptions{false});
  const std::string peft = write_adapter(o.hf_dir, "hf_peft", true, 21);
  const std::string gguf = write_adapter(o.hf_dir, "hf_gguf.gguf", false, 21);
  const auto prompt = prompt_of(256, 5, 25);
  const Greedy a = greedy(*hf, prompt, 8, load_lora_adapter(peft, hf->config()));
  const Greedy b = greedy(*gg, prompt, 8, load_lora_adapter(peft, gg->config()));
  const Greedy c = greedy(*hf, prompt, 8, load_lora_adapter(gguf, hf->config()));
  const Greedy plain = greedy(*hf, prompt, 8);
  EXPECT_NE(a.tokens, plain.tokens);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.tokens, c.tokens);
  for (size_t i = 0; i < a.logits.size(); ++i) {
    EXPECT_LT(max_abs_diff(a.logits[i], b.logits[i]), 1e-3f) << i;
    EXPECT_EQ(a.logits[i], c.logits[i]) << i;  // same base weights, same adapter rows: bit for bit
  }
}

TEST(Lora, ScaleZeroIsTheBaseModelAndScaleIsApplied) {
  auto m = LlamaModel::load(kStories);
  const std::string path = write_adapter(kStories, "scaled.gguf", false, 13);
  LoraLoadOptions zero;
  zero.scale = 0;
  const auto prompt = prompt_of(m->config().vocab_size, 6, 12);
  EXPECT_EQ(greedy(*m, prompt, 6, load_lora_adapter(path, m->config(), zero)).logits, greedy(*m, prompt, 6).logits);
  LoraLoadOptions half;
  half.scale = 0.5f;
  const auto a = load_lora_adapter(path, m->config(), half);
  const auto b = load_lora_adapter(path, m->config());
  EXPECT_FLOAT_EQ(a->weight(0, LoraTarget::kQ).scale * 2, b->weight(0, LoraTarget::kQ).scale);
  EXPECT_FLOAT_EQ(b->weight(0, LoraTarget::kQ).scale, 16.0f / 8.0f);  // α / r
}

// ---- hostile adapters: each refused with an error naming what is wrong ----

std::string load_error(const std::string& path, const ModelConfig& c, const LoraLoadOptions& o = {}) {
  try {
    load_lora_adapter(path, c, o);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Rewrites a GGUF adapter with `edit` applied to its tensor list and metadata.
std::string rewrite_gguf(const std::string& src_path, const std::string& name,
                         const std::function<void(GgufWriter&, const GgufFile&)>& edit) {
  auto src = GgufFile::open(src_path);
  GgufWriter w;
  edit(w, *src);
  const std::string out = tmp(name);
  w.write(out);
  return out;
}

void copy_meta(GgufWriter& w, const GgufFile& src, const std::string& skip = "") {
  for (const auto& [k, v] : src.metadata())
    if (k != skip) w.set_raw(k, v.raw);
}

TEST(LoraHostile, GgufErrorsNameTheProblem) {
  const ModelConfig c = LlamaModel::load(kStories, LoadOptions{false})->config();
  const std::string good = write_adapter(kStories, "good.gguf", false, 1);
  ASSERT_EQ(load_error(good, c), "");
  const auto all_tensors = [](GgufWriter& w, const GgufFile& s, const std::string& drop = "") {
    for (const auto& t : s.tensors())
      if (t.name != drop) w.add_tensor(t.name, t.dtype, t.shape, {t.data, t.nbytes});
  };
  // missing tensor
  auto p = rewrite_gguf(good, "missing.gguf", [&](GgufWriter& w, const GgufFile& s) {
    copy_meta(w, s);
    all_tensors(w, s, "blk.1.attn_v.weight.lora_b");
  });
  EXPECT_NE(load_error(p, c).find("missing tensor"), std::string::npos) << load_error(p, c);
  // unknown targets: the LM head, the embeddings, something else
  for (const std::string& extra :
       {"output.weight.lora_a", "token_embd.weight.lora_a", "blk.0.ffn_norm.weight.lora_a"}) {
    p = rewrite_gguf(good, "extra.gguf", [&](GgufWriter& w, const GgufFile& s) {
      copy_meta(w, s);
      all_tensors(w, s);
      std::vector<float> z(64 * 8, 0.f);
      w.add_tensor(extra, DType::F32, {64, 8}, {reinterpret_cast<const uint8_t*>(z.data()), z.size() * 4});
    });
    const std::string e = load_error(p, c);
    EXPECT_NE(e.find(extra), std::string::npos) << e;
    EXPECT_NE(e.find("cannot apply a LoRA"), std::string::npos) << e;
  }
  // NaN alpha
  p = rewrite_gguf(good, "nan_alpha.gguf", [&](GgufWriter& w, const GgufFile& s) {
    copy_meta(w, s, "adapter.lora.alpha");
    w.set_f32("adapter.lora.alpha", std::nanf(""));
    all_tensors(w, s);
  });
  EXPECT_NE(load_error(p, c).find("adapter.lora.alpha is not finite"), std::string::npos) << load_error(p, c);
  // NaN user scale
  LoraLoadOptions nan_scale;
  nan_scale.scale = std::nanf("");
  EXPECT_NE(load_error(good, c, nan_scale).find("not finite"), std::string::npos);
  // not an adapter
  EXPECT_NE(load_error(kStories, c).find("general.type"), std::string::npos) << load_error(kStories, c);
  // wrong architecture
  p = rewrite_gguf(good, "arch.gguf", [&](GgufWriter& w, const GgufFile& s) {
    copy_meta(w, s, "general.architecture");
    w.set_string("general.architecture", "qwen2");
    all_tensors(w, s);
  });
  EXPECT_NE(load_error(p, c).find("base-model mismatch"), std::string::npos) << load_error(p, c);
  // truncated file
  const std::string trunc = tmp("truncated.gguf");
  std::filesystem::copy_file(good, trunc, std::filesystem::copy_options::overwrite_existing);
  std::filesystem::resize_file(trunc, std::filesystem::file_size(good) / 2);
  EXPECT_NE(load_error(trunc, c), "");
  // an adapter for another model (shapes), and a rank above --max-lora-rank
  const std::string other = write_adapter(synth_gqa_path(), "other.gguf", false, 1);
  EXPECT_NE(load_error(other, c).find("shape mismatch"), std::string::npos) << load_error(other, c);
  LoraLoadOptions small;
  small.max_rank = 4;
  EXPECT_NE(load_error(good, c, small).find("--max-lora-rank"), std::string::npos) << load_error(good, c, small);
}

// Rewrites a PEFT adapter: config edited as JSON, tensors through `edit_tensors`.
std::string rewrite_peft(const std::string& src, const std::string& name,
                         const std::function<void(nlohmann::json&)>& edit_config,
                         const std::function<void(std::vector<SafetensorsWriteTensor>&)>& edit_tensors = {}) {
  const std::string out = tmp(name);
  std::filesystem::remove_all(out);
  std::filesystem::create_directories(out);
  std::ifstream in(src + "/adapter_config.json");
  nlohmann::json j = nlohmann::json::parse(in);
  edit_config(j);
  std::ofstream(out + "/adapter_config.json") << j.dump();
  auto st = SafetensorsFile::open(src + "/adapter_model.safetensors");
  std::vector<SafetensorsWriteTensor> ts;
  for (const auto& [n, t] : st->tensors()) ts.push_back({n, t.dtype, t.shape, {t.data, t.data + t.nbytes}});
  if (edit_tensors) edit_tensors(ts);
  write_safetensors(out + "/adapter_model.safetensors", ts);
  return out;
}

TEST(LoraHostile, PeftErrorsNameTheProblem) {
  const ModelConfig c = LlamaModel::load(kStories, LoadOptions{false})->config();
  const std::string good = write_adapter(kStories, "good_peft", true, 1);
  ASSERT_EQ(load_error(good, c), "");
  const auto expect = [&](const std::string& path, const std::string& needle) {
    const std::string e = load_error(path, c);
    EXPECT_NE(e.find(needle), std::string::npos) << "expected '" << needle << "' in: " << e;
  };
  expect(rewrite_peft(good, "p_rank", [](nlohmann::json& j) { j["r"] = 4; }), "adapter_config.json says r = 4");
  expect(rewrite_peft(good, "p_dora", [](nlohmann::json& j) { j["use_dora"] = true; }), "DoRA");
  expect(rewrite_peft(good, "p_alpha", [](nlohmann::json& j) { j["lora_alpha"] = "x"; }), "lora_alpha");
  expect(rewrite_peft(good, "p_target", [](nlohmann::json& j) { j["target_modules"].push_back("embed_tokens"); }),
         "embed_tokens");
  expect(rewrite_peft(good, "p_save", [](nlohmann::json& j) { j["modules_to_save"] = {"lm_head"}; }),
         "modules_to_save");
  const auto drop = [](const std::string& name) {
    return [name](std::vector<SafetensorsWriteTensor>& ts) {
      std::erase_if(ts, [&](const SafetensorsWriteTensor& t) { return t.name == name; });
    };
  };
  expect(
      rewrite_peft(
          good, "p_missing", [](nlohmann::json&) {}, drop("base_model.model.model.layers.2.mlp.up_proj.lora_A.weight")),
      "missing tensor");
  const auto add = [](const std::string& name, std::vector<int64_t> shape, float value) {
    return [=](std::vector<SafetensorsWriteTensor>& ts) {
      std::vector<float> v(static_cast<size_t>(shape[0] * shape[1]), value);
      const auto* b = reinterpret_cast<const uint8_t*>(v.data());
      ts.push_back({name, DType::F32, shape, {b, b + v.size() * 4}});
    };
  };
  expect(rewrite_peft(
             good, "p_embed", [](nlohmann::json&) {},
             add("base_model.model.model.embed_tokens.lora_embedding_A", {8, 512}, 0.f)),
         "token embeddings");
  expect(rewrite_peft(
             good, "p_head", [](nlohmann::json&) {}, add("base_model.model.lm_head.lora_A.weight", {8, 64}, 0.f)),
         "LM head");
  expect(rewrite_peft(
             good, "p_mag", [](nlohmann::json&) {},
             add("base_model.model.model.layers.0.self_attn.q_proj.lora_magnitude_vector", {1, 64}, 1.f)),
         "DoRA");
  // wrong shape: lora_A of layer 0's q_proj replaced by one of the wrong input width
  expect(rewrite_peft(
             good, "p_shape", [](nlohmann::json&) {},
             [&](std::vector<SafetensorsWriteTensor>& ts) {
               drop("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight")(ts);
               add("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight", {8, 32}, 0.f)(ts);
             }),
         "shape mismatch");
  // NaN weights
  expect(rewrite_peft(
             good, "p_nan", [](nlohmann::json&) {},
             [&](std::vector<SafetensorsWriteTensor>& ts) {
               drop("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight")(ts);
               add("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight", {8, 64}, std::nanf(""))(ts);
             }),
         "NaN");
  // truncated safetensors
  const std::string trunc = rewrite_peft(good, "p_trunc", [](nlohmann::json&) {});
  std::filesystem::resize_file(trunc + "/adapter_model.safetensors",
                               std::filesystem::file_size(trunc + "/adapter_model.safetensors") - 100);
  EXPECT_NE(load_error(trunc, c), "");
  std::filesystem::remove(trunc + "/adapter_model.safetensors");
  expect(trunc, "adapter_model.safetensors is missing");
}

// ---- the engine ----

struct EngineRun {
  std::map<std::string, std::vector<int32_t>> tokens;
  std::map<std::string, int64_t> cached;
  int64_t max_adapters_in_a_step = 0;
};

struct Job {
  std::string id;
  std::vector<int32_t> prompt;
  std::shared_ptr<const LoraAdapter> lora;
};

EngineRun run(EngineCore& e, const std::vector<Job>& jobs, int max_tokens) {
  SamplingParams sp;
  sp.temperature = 0;
  sp.max_tokens = max_tokens;
  sp.ignore_eos = true;
  for (const Job& j : jobs) {
    sp.lora = j.lora;
    EXPECT_EQ(msg(e.add_request(j.id, j.prompt, sp)), "");
  }
  EngineRun r;
  while (e.has_unfinished()) {
    for (auto& o : e.step()) {
      auto& v = r.tokens[o.request_id];
      v.insert(v.end(), o.new_token_ids.begin(), o.new_token_ids.end());
      if (o.finished) r.cached[o.request_id] = o.stats.num_cached_tokens;
    }
    std::set<const LoraAdapter*> seen;
    for (const Request* q : e.scheduler().running())
      if (q->sampling_params.lora) seen.insert(q->sampling_params.lora.get());
    r.max_adapters_in_a_step = std::max<int64_t>(r.max_adapters_in_a_step, static_cast<int64_t>(seen.size()));
  }
  return r;
}

EngineConfig engine_config(int64_t max_loras) {
  EngineConfig cfg;
  cfg.max_model_len = 512;
  cfg.num_kv_blocks = 256;
  cfg.max_num_batched_tokens = 64;  // chunked prefills beside decodes
  cfg.log_stats = false;
  cfg.max_loras = max_loras;
  cfg.kv_cache_dtype = DType::F32;  // as SingleSequence, the reference
  return cfg;
}

// Base model + four adapters (PEFT and GGUF, F32/F16/BF16) in one batch: every request's tokens equal that request
// run alone (SingleSequence, no batching), and each adapter changes the output.
void expect_mixed_batch_equals_alone(const std::string& base_path) {
  SCOPED_TRACE(base_path);
  auto m = LlamaModel::load(base_path);
  const ModelConfig& c = m->config();
  std::vector<std::shared_ptr<const LoraAdapter>> loras = {
      nullptr, load_lora_adapter(write_adapter(base_path, "mix0", true, 100), c),
      load_lora_adapter(write_adapter(base_path, "mix1.gguf", false, 101, DType::F16), c),
      load_lora_adapter(write_adapter(base_path, "mix2", true, 102, DType::BF16, 4), c),
      load_lora_adapter(write_adapter(base_path, "mix3.gguf", false, 103, DType::F32, 16), c)};
  std::vector<Job> jobs;
  for (int i = 0; i < 10; ++i)
    jobs.push_back({"r" + std::to_string(i), prompt_of(c.vocab_size, 50 + i % 5, 10 + 7 * i), loras[i % 5]});
  EngineCore e(*m, engine_config(4), {2});
  const EngineRun r = run(e, jobs, 12);
  EXPECT_GE(r.max_adapters_in_a_step, 2);
  for (const Job& j : jobs) {
    const Greedy alone = greedy(*m, j.prompt, 12, j.lora);
    EXPECT_EQ(r.tokens.at(j.id), alone.tokens) << j.id;
    if (j.lora) EXPECT_NE(alone.tokens, greedy(*m, j.prompt, 12).tokens) << j.id << ": the adapter changes nothing";
  }
}

TEST(LoraEngine, MixedBatchEqualsEachAloneStories) { expect_mixed_batch_equals_alone(kStories); }
TEST(LoraEngine, MixedBatchEqualsEachAloneGqa) { expect_mixed_batch_equals_alone(synth_gqa_path()); }

TEST(LoraEngine, MaxLorasBoundsAdaptersPerStepAndAllFinish) {
  auto m = LlamaModel::load(kStories);
  std::vector<Job> jobs;
  for (int i = 0; i < 6; ++i)
    jobs.push_back(
        {"r" + std::to_string(i), prompt_of(512, 70 + i, 12),
         load_lora_adapter(write_adapter(kStories, "cap" + std::to_string(i) + ".gguf", false, 200 + i), m->config())});
  jobs.push_back({"base", prompt_of(512, 99, 12), nullptr});
  EngineCore e(*m, engine_config(2), {2});
  const EngineRun r = run(e, jobs, 6);
  EXPECT_EQ(r.max_adapters_in_a_step, 2);
  for (const Job& j : jobs) EXPECT_EQ(r.tokens.at(j.id), greedy(*m, j.prompt, 6, j.lora).tokens) << j.id;
}

// The same 64-token prompt: under the same adapter the second request hits every full block but the last token's;
// under another adapter, or the base model, none.
TEST(LoraEngine, PrefixCacheKeysIncludeTheAdapter) {
  auto m = LlamaModel::load(kStories);
  const auto a = load_lora_adapter(write_adapter(kStories, "pc_a.gguf", false, 300), m->config());
  const auto b = load_lora_adapter(write_adapter(kStories, "pc_b", true, 301), m->config());
  const auto prompt = prompt_of(512, 7, 64);  // 65 tokens: 4 full blocks of 16
  EngineCore e(*m, engine_config(4), {2});
  const auto one = [&](const std::string& id, std::shared_ptr<const LoraAdapter> l) {
    return run(e, {{id, prompt, std::move(l)}}, 4);
  };
  EXPECT_EQ(one("a1", a).cached.at("a1"), 0);
  const EngineRun a2 = one("a2", a);
  EXPECT_EQ(a2.cached.at("a2"), 64);
  EXPECT_EQ(one("b1", b).cached.at("b1"), 0);
  EXPECT_EQ(one("base1", nullptr).cached.at("base1"), 0);
  EXPECT_EQ(one("b2", b).cached.at("b2"), 64);
  EXPECT_EQ(one("base2", nullptr).cached.at("base2"), 64);
  EXPECT_EQ(a2.tokens.at("a2"), greedy(*m, prompt, 4, a).tokens);
}

TEST(LoraEngine, AdapterForAnotherModelIsRefusedWithTheModelField) {
  auto m = LlamaModel::load(kStories);
  auto other = LlamaModel::load(synth_gqa_path());
  EngineCore e(*m, engine_config(4), {2});
  SamplingParams sp;
  sp.lora = load_lora_adapter(write_adapter(synth_gqa_path(), "foreign.gguf", false, 1), other->config());
  const auto err = e.add_request("x", {1, 5, 6}, sp);
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(err->param, "model");
}

}  // namespace

namespace {

// kvik:lora_requests_info names the adapters running and waiting: with --max-loras 1 and two adapters, the first
// runs while the second waits behind it (the base request runs beside it: it needs no slot).
TEST(LoraEngine, MetricsNameRunningAndWaitingAdaptersUnderMaxLoras) {
  auto m = LlamaModel::load(kStories);
  LoraLoadOptions oa, ob;
  oa.name = "alpha";
  ob.name = "beta";
  EngineCore e(*m, engine_config(1), {2});
  server::ServerMetrics metrics("stories");
  metrics.enable_lora_info(1);
  const std::vector<Job> jobs = {
      {"a", prompt_of(512, 1, 8), load_lora_adapter(write_adapter(kStories, "m_a.gguf", false, 400), m->config(), oa)},
      {"b", prompt_of(512, 2, 8), load_lora_adapter(write_adapter(kStories, "m_b.gguf", false, 401), m->config(), ob)},
      {"base", prompt_of(512, 3, 8), nullptr}};
  SamplingParams sp;
  sp.temperature = 0;
  sp.max_tokens = 4;
  for (const Job& j : jobs) {
    sp.lora = j.lora;
    ASSERT_EQ(msg(e.add_request(j.id, j.prompt, sp)), "");
  }
  metrics.on_step(e, e.step());
  EXPECT_EQ(e.scheduler().num_running(), 2);  // alpha and the base request; beta waits for the slot
  const std::string text = metrics.render();
  EXPECT_NE(text.find("kvik:lora_requests_info{model_name=\"stories\",max_lora=\"1\",running_lora_adapters=\"alpha\","
                      "waiting_lora_adapters=\"beta\"}"),
            std::string::npos)
      << text;
  while (e.has_unfinished()) metrics.on_step(e, e.step());
  EXPECT_NE(metrics.render().find("running_lora_adapters=\"\",waiting_lora_adapters=\"\"}"), std::string::npos);
}

}  // namespace

namespace {

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The commands as a user runs them: synth-lora writes what synth_lora writes, merge-lora what merge_lora writes,
// generate --lora prints the adapter's greedy continuation, and bad input is an error naming the flag or file.
TEST(LoraCli, SynthMergeAndGenerateCommands) {
  const std::string peft = tmp("cli_peft"), gguf = tmp("cli.gguf"), merged = tmp("cli_merged.gguf");
  std::filesystem::remove_all(peft);
  auto r = test::run(fmt::format("synth-lora {} {} --peft --seed 9 --rank 4 --targets q,v,down", kStories, peft));
  ASSERT_EQ(r.code, 0) << r.out;
  r = test::run(fmt::format("synth-lora {} {} --seed 9 --rank 4 --targets q,v,down", kStories, gguf));
  ASSERT_EQ(r.code, 0) << r.out;
  SynthLoraOptions o;
  std::filesystem::create_directories(tmp("cli_ref"));
  o.out = tmp("cli_ref") + "/" + std::filesystem::path(gguf).filename().string();  // general.name is the file's
  o.seed = 9, o.rank = 4, o.targets = parse_lora_targets("q,v,down");
  synth_lora(o, LlamaModel::load(kStories, LoadOptions{false})->config());
  EXPECT_TRUE(read_bytes(gguf) == read_bytes(o.out)) << "synth-lora and synth_lora wrote different files";
  r = test::run(fmt::format("merge-lora {} {} {} --scale 3", kStories, peft, merged));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("15 matrices merged"), std::string::npos) << r.out;  // 5 layers x 3 targets
  constexpr const char* gen =
      "generate -m {} -p 'Once upon a time' -n 12 --temperature 0 --json --kv-cache-dtype f32 {}";
  const auto lora_run =
      test::run(fmt::format(fmt::runtime(gen), kStories, "--lora " + peft + " --lora-scale 3"), false);
  const auto merged_run = test::run(fmt::format(fmt::runtime(gen), merged, ""), false);
  const auto base_run = test::run(fmt::format(fmt::runtime(gen), kStories, ""), false);
  const auto ids = [](const std::string& out) { return nlohmann::json::parse(out).at("token_ids"); };
  EXPECT_EQ(ids(lora_run.out), ids(merged_run.out));
  EXPECT_NE(ids(lora_run.out), ids(base_run.out));
  r = test::run(fmt::format("synth-lora {} {} --targets q,embed", kStories, tmp("bad.gguf")));
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("--targets: 'embed'"), std::string::npos) << r.out;
  r = test::run(fmt::format("generate -m {} -p x --lora {}", kStories, kStories));
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("general.type"), std::string::npos) << r.out;
}

}  // namespace

namespace {

// n > 1 under an adapter: the prompt is prefilled once under it and every sequence keeps it — sequence i equals a
// request of seed + i under the same adapter, and differs from the base model's.
TEST(LoraEngine, ParallelSamplingKeepsTheAdapter) {
  auto m = LlamaModel::load(kStories);
  const auto lora = load_lora_adapter(write_adapter(kStories, "par.gguf", false, 500), m->config());
  const auto prompt = prompt_of(512, 11, 20);
  const auto collect = [&](EngineCore& e) {
    std::map<std::string, std::vector<int32_t>> out;
    while (e.has_unfinished())
      for (auto& o : e.step())
        out[o.request_id].insert(out[o.request_id].end(), o.new_token_ids.begin(), o.new_token_ids.end());
    return out;
  };
  SamplingParams sp;
  sp.n = 3, sp.seed = 5, sp.temperature = 1, sp.max_tokens = 10, sp.ignore_eos = true, sp.lora = lora;
  EngineCore e(*m, engine_config(4), {2});
  ASSERT_EQ(msg(e.add_request("p", prompt, sp)), "");
  const auto forked = collect(e);
  for (int i = 0; i < 3; ++i) {
    SamplingParams one = sp;
    one.n = 1, one.seed = 5 + i;
    EngineCore alone(*m, engine_config(4), {2});
    ASSERT_EQ(msg(alone.add_request("s", prompt, one)), "");
    EXPECT_EQ(forked.at("p-" + std::to_string(i)), collect(alone).at("s")) << i;
    one.lora = nullptr;
    EngineCore base(*m, engine_config(4), {2});
    ASSERT_EQ(msg(base.add_request("b", prompt, one)), "");
    EXPECT_NE(forked.at("p-" + std::to_string(i)), collect(base).at("b")) << i;
  }
}

}  // namespace

namespace {

// Speculative decoding (n-gram drafts) under adapters: drafts are verified in the adapter's forward pass, so greedy
// output equals the plain engine's, request by request, in a batch mixing adapters and the base model.
TEST(LoraEngine, SpeculativeDecodingUnderAdaptersEqualsPlain) {
  auto m = LlamaModel::load(kStories);
  std::vector<Job> jobs;
  for (int i = 0; i < 6; ++i)
    jobs.push_back({"r" + std::to_string(i), prompt_of(512, 600 + i % 2, 30),
                    i % 3 == 0 ? nullptr
                               : load_lora_adapter(write_adapter(kStories, "spec" + std::to_string(i % 3) + ".gguf",
                                                                 false, 600 + i % 3),
                                                   m->config())});
  EngineConfig spec = engine_config(4);
  spec.speculative.method = SpeculativeConfig::Method::kNgram;
  spec.speculative.num_speculative_tokens = 3;
  spec.speculative.prompt_lookup_min = 1;
  spec.speculative.prompt_lookup_max = 3;
  EngineCore plain(*m, engine_config(4), {2}), drafted(*m, spec, {2});
  const EngineRun a = run(plain, jobs, 24), b = run(drafted, jobs, 24);
  EXPECT_GT(drafted.spec_decode_stats().num_draft_tokens, 0);
  for (const Job& j : jobs) EXPECT_EQ(a.tokens.at(j.id), b.tokens.at(j.id)) << j.id;
}

}  // namespace

namespace kvik {
namespace {

// A mixture-of-experts block's MLP is its experts: an adapter with gate/up/down targets is refused by name on such
// a base, and one with attention targets only loads.
TEST(Lora, MlpTargetsAreRefusedOnAMixtureOfExpertsBase) {
  SynthOptions m;
  m.out_path = ::testing::TempDir() + "kvik_lora_moe_base.gguf";
  m.arch = "mixtral", m.experts = 4, m.experts_used = 2;
  m.dim = 64, m.layers = 2, m.heads = 4, m.kv_heads = 2, m.ff = 64, m.vocab = 300;
  synth_llama_gguf(m);
  const ModelConfig base = LlamaModel::load(m.out_path, LoadOptions{false})->config();
  ASSERT_TRUE(base.is_moe());
  SynthLoraOptions a;
  a.out = ::testing::TempDir() + "kvik_lora_moe_attn.gguf";
  a.targets = {LoraTarget::kQ, LoraTarget::kV};
  synth_lora(a, base);
  EXPECT_NE(load_lora_adapter(a.out, base), nullptr);
  a.out = ::testing::TempDir() + "kvik_lora_moe_mlp.gguf";
  a.targets = {LoraTarget::kQ, LoraTarget::kUp};
  synth_lora(a, base);
  try {
    load_lora_adapter(a.out, base);
    ADD_FAILURE() << "an MLP adapter loaded on a mixture-of-experts base";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("mixture of experts"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("ffn_up"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kvik
