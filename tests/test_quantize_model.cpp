// `kvik quantize` against llama.cpp's quantizer, whole files: for stories260K and random models written by
// `kvik synth` (F32, F16 and BF16 weights), every mix and a few option combinations must give the file
// llama.cpp's llama_model_quantize() gives (same metadata, tensor order, types, data and padding: equal SHA-256).
// Fixture: tests/fixtures/llama_quantize_hashes.json, made by `kvik_peer_tool quantize-fixture build/kvik OUT.json`
// (tools/peer_tool.cpp) from the peer's libllama.so (llama_model_quantize is the function llama-quantize's main()
// calls).
//
// Also: the recipe on a model shape with many layers (which layers' attn_v / ffn_down get more bits), streaming
// (peak RSS of the CLI stays far below the model size), bad input errors, and quantized models that load and run.
#include <gtest/gtest.h>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/error.h"
#include "formats/gguf.h"
#include "model/quant_recipe.h"
#include "model/quantize_model.h"
#include "model/synth.h"
#include "run_kvik.h"
#include "sha256.h"
#include "temp_dir.h"

using namespace kvik;
namespace fs = std::filesystem;

namespace {

constexpr const char* kStories = KVIK_SOURCE_DIR "/models/stories260K.gguf";
constexpr const char* kFixture = KVIK_SOURCE_DIR "/tests/fixtures/llama_quantize_hashes.json";

std::vector<uint8_t> read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

using kvik::test::TempDir;

// The fixture's synth arguments ("--dim", "256", ...) as SynthOptions.
SynthOptions synth_options(const nlohmann::json& args, const std::string& out) {
  SynthOptions o;
  o.out_path = out;
  o.tokenizer_from = kStories;
  for (size_t i = 0; i + 1 < args.size(); i += 2) {
    const std::string k = args[i], v = args[i + 1];
    if (k == "--dim")
      o.dim = std::stoi(v);
    else if (k == "--layers")
      o.layers = std::stoi(v);
    else if (k == "--heads")
      o.heads = std::stoi(v);
    else if (k == "--kv-heads")
      o.kv_heads = std::stoi(v);
    else if (k == "--ff")
      o.ff = std::stoi(v);
    else if (k == "--vocab")
      o.vocab = std::stoi(v);
    else if (k == "--seed")
      o.seed = std::stoull(v);
    else if (k == "--type")
      o.type = *dtype_from_name(v);
    else
      ADD_FAILURE() << "unknown synth argument " << k;
  }
  return o;
}

QuantizeOptions options_for(const nlohmann::json& run, const std::string& in, const std::string& out) {
  QuantizeOptions o;
  o.input = in, o.output = out, o.progress = false;
  o.mix = *quant_mix(run.at("mix").get<std::string>());
  const auto& opt = run.at("options");
  o.recipe.leave_output_tensor = opt.value("leave_output", false);
  if (opt.contains("output_type")) o.recipe.output_tensor_type = dtype_from_name(opt["output_type"].get<std::string>());
  if (opt.contains("embd_type")) o.recipe.token_embedding_type = dtype_from_name(opt["embd_type"].get<std::string>());
  return o;
}

// Per tensor: same name in the same place, same type, same bytes; then the whole file.
void expect_same_as_llama_cpp(const std::string& path, const nlohmann::json& run, const std::string& what) {
  const auto g = GgufFile::open(path);
  const auto& want = run.at("tensors");
  ASSERT_EQ(g->tensors().size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    const auto& t = g->tensors()[i];
    EXPECT_EQ(t.name, want[i].at("name").get<std::string>()) << what << ": tensor order differs at " << i;
    EXPECT_EQ(t.dtype, dtype_from_name(want[i].at("type").get<std::string>())) << what << ": " << t.name;
    EXPECT_EQ(test::sha256_hex({t.data, t.nbytes}).substr(0, 16), want[i].at("sha256_16").get<std::string>())
        << what << ": data of " << t.name;
  }
  const auto bytes = read_all(path);
  EXPECT_EQ(static_cast<int64_t>(bytes.size()), run.at("size").get<int64_t>()) << what;
  EXPECT_EQ(test::sha256_hex(bytes), run.at("sha256").get<std::string>()) << what << ": whole file";
}

const nlohmann::json& fixture() {
  static const nlohmann::json fx = [] {
    std::ifstream in(kFixture);
    if (!in)
      throw std::runtime_error(std::string(kFixture) +
                               " missing: kvik_peer_tool quantize-fixture (tools/peer_tool.cpp) writes it");
    return nlohmann::json::parse(in);
  }();
  return fx;
}

// One test per model of the fixture (stories260K, synth F32, F16, BF16), so ctest runs them side by side.
class LlamaQuantizeFiles : public ::testing::TestWithParam<int> {};

TEST_P(LlamaQuantizeFiles, EveryMixGivesLlamaQuantizesFileByteForByte) {
  const auto& models = fixture().at("models");
  ASSERT_EQ(models.size(), 4u);
  TempDir dir;
  int runs = 0;
  {
    const auto& m = models.at(static_cast<size_t>(GetParam()));
    const std::string name = m.at("name");
    std::string model = kStories;
    if (m.contains("synth")) {
      model = dir.file(name + ".gguf");
      synth_llama_gguf(synth_options(m.at("synth"), model));
    }
    ASSERT_EQ(test::sha256_hex(read_all(model)), m.at("input_sha256").get<std::string>())
        << name << ": the input differs from the one the fixture was made from (rerun kvik_peer_tool quantize-fixture)";
    for (const auto& run : m.at("runs")) {
      const std::string what = name + " " + run.at("mix").get<std::string>() + " " + run.at("options").dump();
      const std::string out = dir.file("out.gguf");
      quantize_model(options_for(run, model, out));
      expect_same_as_llama_cpp(out, run, what);
      ++runs;
    }
  }
  EXPECT_GE(runs, 13);
}
INSTANTIATE_TEST_SUITE_P(Models, LlamaQuantizeFiles, ::testing::Values(0, 1, 2, 3), [](const auto& info) {
  return fixture().at("models").at(static_cast<size_t>(info.param)).at("name").get<std::string>();
});

std::vector<RecipeTensor> layer_tensors(int layers, int64_t dim) {
  std::vector<RecipeTensor> t = {{"token_embd.weight", DType::F32, {dim, 1000}},
                                 {"output.weight", DType::F32, {dim, 1000}},
                                 {"output_norm.weight", DType::F32, {dim}}};
  for (int l = 0; l < layers; ++l)
    for (const char* n : {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"})
      t.push_back({"blk." + std::to_string(l) + "." + n + ".weight", DType::F16, {dim, dim}});
  return in_quantize_order(std::move(t));
}

// llama.cpp's use_more_bits() on 32 layers: layers 0–3 and 28–31, and every third layer from 6 on.
TEST(QuantizeModel, RecipeGivesMoreBitsToTheLayersLlamaCppPicks) {
  const auto tensors = layer_tensors(32, 4096);
  const RecipeModel model{"llama", 32, 32, 8};
  const auto types = quant_recipe(*quant_mix("q4_k_m"), model, tensors, {});
  std::vector<int> q6_v, q6_down;
  for (size_t i = 0; i < tensors.size(); ++i) {
    int layer = -1;
    std::sscanf(tensors[i].name.c_str(), "blk.%d.", &layer);
    if (tensors[i].name.find("attn_v") != std::string::npos && types[i].to == DType::Q6_K) q6_v.push_back(layer);
    if (tensors[i].name.find("ffn_down") != std::string::npos && types[i].to == DType::Q6_K) q6_down.push_back(layer);
    if (tensors[i].name == "output.weight") EXPECT_EQ(types[i].to, DType::Q6_K);
    if (tensors[i].name == "token_embd.weight") EXPECT_EQ(types[i].to, DType::Q4_K);
    if (tensors[i].name == "output_norm.weight") EXPECT_EQ(types[i].to, DType::F32);
    if (tensors[i].name.find("attn_q") != std::string::npos) EXPECT_EQ(types[i].to, DType::Q4_K);
  }
  const std::vector<int> want = {0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31};
  EXPECT_EQ(q6_v, want);
  EXPECT_EQ(q6_down, want);
  // q4_k_s: attn_v of the first four layers and ffn_down of the first eighth get Q5_K.
  const auto s = quant_recipe(*quant_mix("Q4_K_S"), model, tensors, {});
  for (size_t i = 0; i < tensors.size(); ++i) {
    int layer = -1;
    std::sscanf(tensors[i].name.c_str(), "blk.%d.", &layer);
    if (tensors[i].name.find("attn_v") != std::string::npos)
      EXPECT_EQ(s[i].to, layer < 4 ? DType::Q5_K : DType::Q4_K) << layer;
    if (tensors[i].name.find("ffn_down") != std::string::npos)
      EXPECT_EQ(s[i].to, layer < 4 ? DType::Q5_K : DType::Q4_K) << layer;
  }
  // iq4_nl with 4 query heads per KV head: attn_v Q5_K; ffn_down of the first eighth Q5_K.
  const auto nl = quant_recipe(*quant_mix("iq4_nl"), model, tensors, {});
  for (size_t i = 0; i < tensors.size(); ++i)
    if (tensors[i].name.find("attn_v") != std::string::npos) EXPECT_EQ(nl[i].to, DType::Q5_K);
  EXPECT_EQ(quant_mix("q4_k")->file_type, 15u);
  EXPECT_EQ(quant_mix("q5_k")->file_type, 17u);
  EXPECT_FALSE(quant_mix("q3_k_m"));
}

TEST(QuantizeModel, RowsTooShortForKQuantsFallBackAsLlamaCppDoes) {
  std::vector<RecipeTensor> t = {{"blk.0.attn_q.weight", DType::F32, {96, 96}},
                                 {"blk.0.ffn_down.weight", DType::F32, {100, 64}},
                                 {"blk.0.attn_k.weight", DType::F32, {512, 64}}};
  const RecipeModel model{"llama", 1, 4, 4};
  const auto q4 = quant_recipe(*quant_mix("q4_k_s"), model, t, {});
  EXPECT_EQ(q4[0].to, DType::Q5_0);
  EXPECT_TRUE(q4[0].fallback);
  EXPECT_EQ(q4[1].to, DType::F16);
  EXPECT_EQ(q4[2].to, DType::Q4_K);
  EXPECT_FALSE(q4[2].fallback);
  EXPECT_EQ(quant_recipe(*quant_mix("q5_k_m"), model, t, {})[0].to, DType::Q5_1);
  EXPECT_EQ(quant_recipe(*quant_mix("q6_k"), model, t, {})[0].to, DType::Q8_0);
  EXPECT_EQ(quant_recipe(*quant_mix("q4_0"), model, t, {})[1].to, DType::F16);
}

int run_kvik(const std::string& args, std::string* err = nullptr, long* peak_rss_kib = nullptr) {
  return test::run_measured(args, err, peak_rss_kib);
}

// The CLI streams: on a 150 MB F32 model its peak RSS stays a fraction of the model (the input pages of the
// tensor being converted, its output, the binary), and it reports progress per tensor with bytes and MB/s.
TEST(QuantizeModel, CliStreamsWithSmallPeakMemoryAndReportsProgress) {
  TempDir dir;
  SynthOptions s;
  s.out_path = dir.file("big.gguf");
  s.dim = 1024, s.layers = 2, s.heads = 8, s.kv_heads = 8, s.ff = 2048, s.vocab = 8192, s.tokenizer_from = kStories;
  synth_llama_gguf(s);
  const auto in_size = fs::file_size(s.out_path);
  std::string err;
  long rss = 0;
  ASSERT_EQ(run_kvik("quantize " + s.out_path + " " + dir.file("q.gguf") + " q4_k_m --threads 2", &err, &rss), 0)
      << err;
  std::printf("input %.1f MiB, output %.1f MiB, peak RSS %.1f MiB\n", in_size / 1048576.0,
              fs::file_size(dir.file("q.gguf")) / 1048576.0, rss / 1024.0);
#if !defined(__SANITIZE_ADDRESS__)  // ASan's shadow memory and quarantine are not the program's footprint
  EXPECT_LT(static_cast<double>(rss) * 1024, 0.5 * static_cast<double>(in_size)) << "peak RSS " << rss << " KiB";
#endif
  EXPECT_NE(err.find("[   1/  21] output.weight"), std::string::npos) << err;
  EXPECT_NE(err.find("MB/s"), std::string::npos) << err;
  const auto g = GgufFile::open(dir.file("q.gguf"));
  EXPECT_EQ(g->get_int("general.file_type"), 15);
  EXPECT_EQ(g->get_int("general.quantization_version"), 2);
}

TEST(QuantizeModel, BadInputGivesClearErrors) {
  TempDir dir;
  std::string err;
  EXPECT_EQ(run_kvik(std::string("quantize ") + kStories + " " + dir.file("o.gguf") + " q3_k_m", &err), 1);
  EXPECT_NE(err.find("unknown type 'q3_k_m'"), std::string::npos) << err;
  EXPECT_EQ(run_kvik("quantize " + fs::temp_directory_path().string() + " " + dir.file("o.gguf") + " q8_0", &err), 1);
  EXPECT_NE(err.find("no config.json"), std::string::npos) << err;  // a directory is read as a Hugging Face checkpoint
  EXPECT_EQ(run_kvik("quantize " + dir.file("missing.gguf") + " " + dir.file("o.gguf") + " q8_0", &err), 1);
  EXPECT_NE(err.find("missing.gguf"), std::string::npos) << err;
  // A quantized input: requantizing is refused, naming the tensor.
  ASSERT_EQ(run_kvik(std::string("quantize --quiet ") + kStories + " " + dir.file("q8.gguf") + " q8_0", &err), 0)
      << err;
  EXPECT_EQ(run_kvik("quantize " + dir.file("q8.gguf") + " " + dir.file("o.gguf") + " q4_0", &err), 1);
  EXPECT_NE(err.find("already q8_0"), std::string::npos) << err;
  // A forced type whose blocks do not divide the rows (stories260K's rows are 64 wide).
  EXPECT_EQ(
      run_kvik(std::string("quantize ") + kStories + " " + dir.file("o.gguf") + " q8_0 --token-embedding-type q6_k",
               &err),
      1);
  EXPECT_NE(err.find("token_embd.weight"), std::string::npos) << err;
  EXPECT_FALSE(fs::exists(dir.file("o.gguf")));
  EXPECT_FALSE(fs::exists(dir.file("o.gguf.tmp")));
}

}  // namespace
