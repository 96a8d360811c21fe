// Random-weight Llama models written as GGUF v3, for tests and benchmarks of any shape without downloads.
// The file loads in kvik and in llama.cpp: the same keys, tensor names and shapes as convert_hf_to_gguf.py
// writes for a Llama checkpoint. Same options → byte-identical file.
#pragma once

#include <cstdint>
#include <string>

#include "tensor/dtype.h"

namespace kvik {

struct SynthOptions {
  std::string out_path;
  int dim = 64, layers = 2, heads = 4, kv_heads = 2, ff = 128, vocab = 512, context = 2048;
  DType type = DType::F32;     // weight matrices and token_embd; norm weights stay F32
  // llama.cpp's Q4_K_M mix (type must be Q4_K): Q6_K for output.weight and for attn_v / ffn_down of the
  // layers llama.cpp's use_more_bits() picks (the first and last eighth, and every third in between).
  bool q4_k_m = false;
  std::string tokenizer_from;  // a GGUF whose tokenizer.ggml.* keys are copied (padded to `vocab`)
  uint64_t seed = 1;
  float rope_freq_base = 10000.f;
  float rms_eps = 1e-5f;
  int head_dim = 0;  // 0 = dim / heads
  float output_scale = 1.0f;  // multiplies the std of output.weight: above 1, peakier next-token distributions
};

// Validates the options (throws kvik::Error naming the flag) and writes the model to out_path.
void synth_llama_gguf(const SynthOptions& opt);

}  // namespace kvik
