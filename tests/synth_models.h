// Random-weight models the tests share, written once per test process with kvik's own GGUF writer.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "formats/gguf.h"
#include "model/synth.h"
#include "tokenizer/tokenizer.h"

namespace kvik::test_models {

// A small GQA Llama (d 128, 2 layers, 8 query / 2 KV heads, d_ff 256, vocab 512, context 1024) in the test's temp
// directory under `name`, with weights from `seed`; sliding_window > 0: Mistral-style attention over that many keys.
inline std::string write_synth_gqa(const std::string& name, uint64_t seed, int sliding_window = 0) {
  SynthOptions o;
  o.out_path = ::testing::TempDir() + name;
  o.dim = 128;
  o.layers = 2;
  o.heads = 8;
  o.kv_heads = 2;
  o.ff = 256;
  o.vocab = 512;
  o.context = 1024;
  o.seed = seed;
  o.sliding_window = sliding_window;
  synth_llama_gguf(o);
  return o.out_path;
}

// A small mixture of experts: Mixtral-shaped (arch "mixtral": 8 experts, 2 used, d_ff 256) or Qwen3-MoE-shaped
// ("qwen3moe": 16 experts of width 256, 4 used, q/k norm); d 256, 2 layers, 4 query / 2 KV heads, vocab 512,
// context 1024, weights in `type` (Q4_K and Q8_0 run through the packed kernels).
inline std::string write_synth_moe(const std::string& name, const std::string& arch, DType type, uint64_t seed) {
  SynthOptions o;
  o.out_path = ::testing::TempDir() + name;
  o.arch = arch;
  o.dim = 256;
  o.layers = 2;
  o.heads = 4;
  o.kv_heads = 2;
  o.ff = 256;
  o.experts = arch == "mixtral" ? 8 : 16;
  o.experts_used = arch == "mixtral" ? 2 : 4;
  o.expert_ff = arch == "mixtral" ? 0 : 256;
  o.vocab = 512;
  o.context = 1024;
  o.type = type;
  o.seed = seed;
  synth_llama_gguf(o);
  return o.out_path;
}

// A small model of one of the families `kvik synth --arch` writes on its own: a Gemma (arch "gemma2": local and global
// layers alternating, soft-caps; "gemma3": every 6th layer global, q/k norms, local and global rope) with a window of
// `sliding_window` positions on the local layers, or a Phi-3 ("phi3": fused qkv and gate_up, LongRoPE's long factors
// for a context twice the original; window 0). 7 layers, d 128, 4 query / 2 KV heads of 32, d_ff 256, vocab 512,
// context 1024.
inline std::string write_synth_family(const std::string& name, const std::string& arch, int sliding_window,
                                      uint64_t seed, DType type = DType::F32) {
  SynthOptions o;
  o.out_path = ::testing::TempDir() + name;
  o.arch = arch;
  o.dim = 128;
  o.layers = 7;
  o.heads = 4;
  o.kv_heads = 2;
  o.head_dim = 32;
  o.ff = 256;
  o.vocab = 512;
  o.context = 1024;
  o.sliding_window = sliding_window;
  o.type = type;
  o.seed = seed;
  synth_llama_gguf(o);
  return o.out_path;
}

// stories260K's tokenizer, optionally with a chat template added to its metadata.
inline std::unique_ptr<Tokenizer> stories_tokenizer(const std::string& chat_template) {
  auto src = GgufFile::open(KVIK_SOURCE_DIR "/models/stories260K.gguf");
  GgufWriter w;
  for (const auto& [key, value] : src->metadata())
    if (key.rfind("tokenizer.", 0) == 0) w.set_raw(key, value.raw);
  if (!chat_template.empty()) w.set_string("tokenizer.chat_template", chat_template);
  static std::vector<std::vector<uint8_t>> keep;  // GgufFile::parse views the bytes
  keep.push_back(w.to_bytes());
  static std::vector<std::unique_ptr<GgufFile>> files;
  files.push_back(GgufFile::parse(keep.back(), "chat-template-test"));
  return load_tokenizer_from_gguf(*files.back());
}

}  // namespace kvik::test_models
