// Random-weight Llama GGUF writer: deterministic, loadable, right shapes, tokenizer copy, option validation.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/error.h"
#include "formats/gguf.h"
#include "model/synth.h"

namespace kvik {
namespace {

namespace fs = std::filesystem;
const std::string kStories = KVIK_SOURCE_DIR "/models/stories260K.gguf";

std::string temp_path(const std::string& tag) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return (fs::temp_directory_path() /
          fmt::format("kvik_synth_{}_{}_{}_{}.gguf", getpid(), info->test_suite_name(), info->name(), tag))
      .string();
}

std::vector<char> slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

struct TempFile {
  std::string path;
  explicit TempFile(const std::string& tag) : path(temp_path(tag)) {}
  ~TempFile() { std::remove(path.c_str()); }
};

void expect_tensor(const GgufFile& g, const std::string& name, DType type, std::vector<int64_t> shape) {
  const GgufTensorInfo* t = g.find_tensor(name);
  ASSERT_NE(t, nullptr) << name;
  EXPECT_EQ(t->dtype, type) << name;
  EXPECT_EQ(t->shape, shape) << name;
}

// Checks every key and tensor the options imply.
void expect_model(const SynthOptions& o) {
  auto g = GgufFile::open(o.out_path);
  const int64_t hd = o.head_dim ? o.head_dim : o.dim / o.heads;
  EXPECT_EQ(g->version(), 3u);
  EXPECT_EQ(g->require_string("general.architecture"), "llama");
  EXPECT_TRUE(g->get_string("general.name").has_value());
  EXPECT_EQ(g->require_int("llama.context_length"), o.context);
  EXPECT_EQ(g->require_int("llama.embedding_length"), o.dim);
  EXPECT_EQ(g->require_int("llama.block_count"), o.layers);
  EXPECT_EQ(g->require_int("llama.feed_forward_length"), o.ff);
  EXPECT_EQ(g->require_int("llama.attention.head_count"), o.heads);
  EXPECT_EQ(g->require_int("llama.attention.head_count_kv"), o.kv_heads);
  EXPECT_FLOAT_EQ(*g->get_float("llama.attention.layer_norm_rms_epsilon"), o.rms_eps);
  EXPECT_FLOAT_EQ(*g->get_float("llama.rope.freq_base"), o.rope_freq_base);
  EXPECT_EQ(g->require_int("llama.rope.dimension_count"), hd);
  EXPECT_EQ(g->require_int("llama.vocab_size"), o.vocab);
  if (hd * o.heads != o.dim) {
    EXPECT_EQ(g->require_int("llama.attention.key_length"), hd);
    EXPECT_EQ(g->require_int("llama.attention.value_length"), hd);
  } else {
    EXPECT_EQ(g->find("llama.attention.key_length"), nullptr);
  }
  const int64_t ftype = g->require_int("general.file_type");
  switch (o.type) {
    case DType::F32: EXPECT_EQ(ftype, 0); break;
    case DType::F16: EXPECT_EQ(ftype, 1); break;
    case DType::Q4_0: EXPECT_EQ(ftype, 2); break;
    case DType::Q8_0: EXPECT_EQ(ftype, 7); break;
    case DType::BF16: EXPECT_EQ(ftype, 32); break;
    default: ADD_FAILURE();
  }
  EXPECT_EQ(g->require_array("tokenizer.ggml.tokens", GgufType::STRING).count, static_cast<uint64_t>(o.vocab));

  EXPECT_EQ(g->tensors().size(), 3u + 9u * o.layers);
  const DType t = o.type;
  expect_tensor(*g, "token_embd.weight", t, {o.dim, o.vocab});
  expect_tensor(*g, "output_norm.weight", DType::F32, {o.dim});
  expect_tensor(*g, "output.weight", t, {o.dim, o.vocab});
  for (int l = 0; l < o.layers; ++l) {
    const std::string p = fmt::format("blk.{}.", l);
    expect_tensor(*g, p + "attn_norm.weight", DType::F32, {o.dim});
    expect_tensor(*g, p + "attn_q.weight", t, {o.dim, o.heads * hd});
    expect_tensor(*g, p + "attn_k.weight", t, {o.dim, o.kv_heads * hd});
    expect_tensor(*g, p + "attn_v.weight", t, {o.dim, o.kv_heads * hd});
    expect_tensor(*g, p + "attn_output.weight", t, {o.heads * hd, o.dim});
    expect_tensor(*g, p + "ffn_norm.weight", DType::F32, {o.dim});
    expect_tensor(*g, p + "ffn_gate.weight", t, {o.dim, o.ff});
    expect_tensor(*g, p + "ffn_up.weight", t, {o.dim, o.ff});
    expect_tensor(*g, p + "ffn_down.weight", t, {o.ff, o.dim});
  }
}

TEST(Synth, SameOptionsWriteByteIdenticalFiles) {
  TempFile a("a"), b("b"), c("c");
  SynthOptions o;
  o.type = DType::Q4_0;
  o.out_path = a.path;
  synth_llama_gguf(o);
  o.out_path = b.path;
  synth_llama_gguf(o);
  const auto ba = slurp(a.path), bb = slurp(b.path);
  ASSERT_GT(ba.size(), 1000u);
  EXPECT_TRUE(ba == bb);
  o.out_path = c.path;
  o.seed = 2;
  synth_llama_gguf(o);
  EXPECT_FALSE(slurp(c.path) == ba) << "another seed must give other weights";
}

TEST(Synth, EveryWeightTypeReopensWithTheRightShapes) {
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0}) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    TempFile f(std::string(dtype_name(t)));
    SynthOptions o;
    o.out_path = f.path;
    o.type = t;
    synth_llama_gguf(o);
    expect_model(o);
  }
}

TEST(Synth, GqaMqaAndHeadDims) {
  struct Case {
    int heads, kv_heads, head_dim;
  };
  for (Case c : {Case{4, 2, 0}, Case{4, 1, 0}, Case{4, 4, 0}, Case{4, 2, 32}, Case{2, 1, 64}, Case{4, 1, 128}}) {
    SCOPED_TRACE(fmt::format("heads {} kv {} hd {}", c.heads, c.kv_heads, c.head_dim));
    TempFile f("m");
    SynthOptions o;
    o.out_path = f.path;
    o.type = DType::Q8_0;
    o.heads = c.heads;
    o.kv_heads = c.kv_heads;
    o.head_dim = c.head_dim;
    o.layers = 1;
    synth_llama_gguf(o);
    expect_model(o);
  }
}

TEST(Synth, WeightsAreNormalWithTheIntendedScale) {
  TempFile f("w");
  SynthOptions o;
  o.out_path = f.path;
  synth_llama_gguf(o);
  auto g = GgufFile::open(f.path);
  auto stats = [&](const std::string& name) {
    const GgufTensorInfo* t = g->find_tensor(name);
    const auto* x = reinterpret_cast<const float*>(t->data);
    double s = 0, s2 = 0;
    for (int64_t i = 0; i < t->numel(); ++i) {
      s += x[i];
      s2 += double(x[i]) * x[i];
    }
    const double mean = s / t->numel();
    return std::pair{mean, std::sqrt(s2 / t->numel() - mean * mean)};
  };
  auto [m1, s1] = stats("blk.0.ffn_down.weight");  // std 1/sqrt(ff)
  EXPECT_NEAR(m1, 0.0, 0.01);
  EXPECT_NEAR(s1, 1.0 / std::sqrt(128.0), 0.01);
  auto [m2, s2] = stats("blk.1.attn_norm.weight");  // 1 + 0.1 noise
  EXPECT_NEAR(m2, 1.0, 0.05);
  EXPECT_NEAR(s2, 0.1, 0.04);
}

TEST(Synth, ByteVocabularyHasSpecialsBytesAndPadding) {
  TempFile f("v");
  SynthOptions o;
  o.out_path = f.path;
  o.vocab = 400;
  synth_llama_gguf(o);
  auto g = GgufFile::open(f.path);
  EXPECT_EQ(g->require_string("tokenizer.ggml.model"), "llama");
  const GgufValue& tok = g->require_array("tokenizer.ggml.tokens", GgufType::STRING);
  const GgufValue& type = g->require_array("tokenizer.ggml.token_type", GgufType::I32);
  const GgufValue& score = g->require_array("tokenizer.ggml.scores", GgufType::F32);
  ASSERT_EQ(tok.count, 400u);
  ASSERT_EQ(type.count, 400u);
  ASSERT_EQ(score.count, 400u);
  EXPECT_EQ(tok.strings[0], "<unk>");
  EXPECT_EQ(tok.strings[1], "<s>");
  EXPECT_EQ(tok.strings[2], "</s>");
  EXPECT_EQ(tok.strings[3], "<0x00>");
  EXPECT_EQ(tok.strings[3 + 0x41], "<0x41>");
  EXPECT_EQ(type.array_i(3 + 0xFF), 6);
  EXPECT_EQ(tok.strings[259], "\xE2\x96\x81");
  EXPECT_EQ(tok.strings[260], "!");
  EXPECT_EQ(tok.strings[399], "<unused399>");
  EXPECT_EQ(type.array_i(399), 5);
  EXPECT_EQ(g->require_int("tokenizer.ggml.bos_token_id"), 1);
  EXPECT_EQ(g->require_int("tokenizer.ggml.eos_token_id"), 2);
}

TEST(Synth, TokenizerCopiedFromStoriesIsPaddedToVocab) {
  auto src = GgufFile::open(kStories);
  const GgufValue& stok = src->require_array("tokenizer.ggml.tokens", GgufType::STRING);
  ASSERT_EQ(stok.count, 512u);
  TempFile f("t");
  SynthOptions o;
  o.out_path = f.path;
  o.tokenizer_from = kStories;
  o.vocab = 544;
  synth_llama_gguf(o);
  expect_model(o);
  auto g = GgufFile::open(f.path);
  const GgufValue& tok = g->require_array("tokenizer.ggml.tokens", GgufType::STRING);
  const GgufValue& score = g->require_array("tokenizer.ggml.scores", GgufType::F32);
  const GgufValue& type = g->require_array("tokenizer.ggml.token_type", GgufType::I32);
  ASSERT_EQ(tok.count, 544u);
  ASSERT_EQ(score.count, 544u);
  ASSERT_EQ(type.count, 544u);
  const GgufValue& sscore = src->require_array("tokenizer.ggml.scores", GgufType::F32);
  const GgufValue& stype = src->require_array("tokenizer.ggml.token_type", GgufType::I32);
  for (uint64_t k = 0; k < 512; ++k) {
    EXPECT_EQ(tok.strings[k], stok.strings[k]);
    EXPECT_EQ(score.array_f(k), sscore.array_f(k));
    EXPECT_EQ(type.array_i(k), stype.array_i(k));
  }
  for (uint64_t k = 512; k < 544; ++k) {
    EXPECT_EQ(tok.strings[k], fmt::format("<unused{}>", k));
    EXPECT_EQ(score.array_f(k), 0.0);
    EXPECT_EQ(type.array_i(k), 5);
  }
  // Every other tokenizer key is copied byte for byte.
  int copied = 0;
  for (const auto& [key, v] : src->metadata()) {
    if (!key.starts_with("tokenizer.ggml.")) continue;
    const GgufValue* w = g->find(key);
    ASSERT_NE(w, nullptr) << key;
    if (key == "tokenizer.ggml.tokens" || key == "tokenizer.ggml.scores" || key == "tokenizer.ggml.token_type")
      continue;
    EXPECT_TRUE(std::equal(v.raw.begin(), v.raw.end(), w->raw.begin(), w->raw.end())) << key;
    ++copied;
  }
  EXPECT_GT(copied, 0);

  // Same vocab size: the arrays are copied unchanged.
  TempFile f2("t2");
  o.out_path = f2.path;
  o.vocab = 512;
  synth_llama_gguf(o);
  auto g2 = GgufFile::open(f2.path);
  const GgufValue* t2 = g2->find("tokenizer.ggml.tokens");
  EXPECT_TRUE(std::equal(stok.raw.begin(), stok.raw.end(), t2->raw.begin(), t2->raw.end()));
}

void expect_error(SynthOptions o, const std::string& needle) {
  if (o.out_path.empty() && needle != "output path") o.out_path = temp_path("bad");
  try {
    synth_llama_gguf(o);
    ADD_FAILURE() << "no error; expected one mentioning " << needle;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(o.out_path)) << "no file may be written for bad options";
}

TEST(Synth, BadOptionsThrowNamingTheFlag) {
  SynthOptions o;
  expect_error(o, "output path");
  o = {};
  o.heads = 4, o.kv_heads = 3;
  expect_error(o, "--kv-heads 3");
  o = {};
  o.type = DType::Q8_0, o.ff = 100;
  expect_error(o, "--ff 100 must be a multiple of 32 for q8_0");
  o = {};
  o.type = DType::Q4_0, o.dim = 48, o.heads = 3, o.kv_heads = 1;
  expect_error(o, "--dim 48 must be a multiple of 32 for q4_0");
  o = {};
  o.type = DType::Q4_0, o.heads = 4, o.head_dim = 4;
  expect_error(o, "--head-dim");
  o = {};
  o.layers = 0;
  expect_error(o, "--layers 0 must be positive");
  o = {};
  o.dim = -64;
  expect_error(o, "--dim -64");
  o = {};
  o.vocab = 100;
  expect_error(o, "--vocab 100");
  o = {};
  o.dim = 60, o.heads = 8;
  expect_error(o, "--dim 60 must be a multiple of --heads 8");
  o = {};
  o.head_dim = 7;
  expect_error(o, "--head-dim 7 must be even");
  o = {};
  o.type = DType::Q3_K;  // no synth support (Q4_K/Q5_K/Q6_K have it)
  expect_error(o, "--type q3_K");
  o = {};
  o.tokenizer_from = kStories, o.vocab = 300;
  expect_error(o, "--vocab 300 is smaller than the 512 tokens");
}

// Not a check: writes the models used to compare with llama.cpp when KVIK_SYNTH_PEER_DIR is set, e.g.
//   KVIK_SYNTH_PEER_DIR=/tmp/synth ./test_synth --gtest_filter=Synth.WritePeerModels
//   cp tools/llamacpp_ref_greedy.mjs "$KVIK_PEER_DIR/" &&
//   node "$KVIK_PEER_DIR/llamacpp_ref_greedy.mjs" /tmp/synth/q8_0.gguf "Once upon a time" 8 5
TEST(Synth, WritePeerModels) {
  const char* dir = std::getenv("KVIK_SYNTH_PEER_DIR");
  if (!dir) GTEST_SKIP() << "set KVIK_SYNTH_PEER_DIR to write models for the llama.cpp comparison";
  fs::create_directories(dir);
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0}) {
    SynthOptions o;
    o.out_path = fmt::format("{}/{}.gguf", dir, dtype_name(t));
    o.type = t;
    o.tokenizer_from = kStories;
    synth_llama_gguf(o);
  }
  SynthOptions o;
  o.out_path = fmt::format("{}/hd128.gguf", dir);
  o.tokenizer_from = kStories;
  o.type = DType::Q8_0;
  o.heads = 4, o.kv_heads = 1, o.head_dim = 128;
  synth_llama_gguf(o);
  o.out_path = fmt::format("{}/bytevocab.gguf", dir);
  o.tokenizer_from = "";
  o.type = DType::F16;
  o.head_dim = 0;
  synth_llama_gguf(o);
  o.out_path = fmt::format("{}/big.gguf", dir);
  o.dim = 256, o.layers = 4, o.heads = 8, o.kv_heads = 2, o.ff = 704, o.vocab = 4096, o.type = DType::Q4_0;
  synth_llama_gguf(o);
}

}  // namespace
}  // namespace kvik
