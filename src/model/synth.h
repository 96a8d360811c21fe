// Random-weight Llama models written as GGUF v3, for tests and benchmarks of any shape without downloads.
// The file loads in kvik and in llama.cpp: the same keys, tensor names and shapes as convert_hf_to_gguf.py
// writes for a Llama checkpoint. Same options → byte-identical file.
#pragma once

#include <cstdint>
#include <string>

#include "tensor/dtype.h"

namespace kvik {

class GgufWriter;

struct SynthOptions {
  std::string out_path;
  int dim = 64, layers = 2, heads = 4, kv_heads = 2, ff = 128, vocab = 512, context = 2048;
  DType type = DType::F32;  // weight matrices and token_embd; norm weights stay F32
  // llama.cpp's Q4_K_M mix (type must be Q4_K): Q6_K for output.weight and for attn_v / ffn_down of the
  // layers llama.cpp's use_more_bits() picks (the first and last eighth, and every third in between).
  bool q4_k_m = false;
  std::string tokenizer_from;  // a GGUF whose tokenizer.ggml.* keys are copied (padded to `vocab`)
  // A small llama GGUF whose function the written model computes (greedy output equal up to rounding) in the given
  // bigger shape: its weights placed in the big matrices, the rest zero, layers past its own passing the residual
  // through. A model with the big shape's cost per token and a real model's predictions (benchmarks of
  // speculative decoding on text that copies). Tokenizer, rope base and ε (scaled) come from it; --type applies.
  std::string embed_from;
  // A hand-built two-layer "induction head" model (no random weights): its greedy continuation copies the token that
  // followed the last earlier occurrence of its last two tokens, so it repeats text it was shown. A model that copies
  // its prompt, for benchmarks of prompt-lookup speculation (with --embed-from, at a bigger shape's cost). Fixed
  // shape: width 128, 2 layers of 2 heads of 64, F32, rope base 1e12; up to 512 tokens of vocabulary.
  bool induction = false;
  uint64_t seed = 1;
  float rope_freq_base = 10000.f;
  float rms_eps = 1e-5f;
  int head_dim = 0;           // 0 = dim / heads
  float output_scale = 1.0f;  // multiplies the std of output.weight: above 1, peakier next-token distributions

  // Mixture of experts (arch mixtral or qwen3moe): E experts of width expert_ff (0 = ff), k used per token.
  int experts = 0, experts_used = 0, expert_ff = 0;
  // Mistral-style sliding-window attention over the last W positions ({arch}.attention.sliding_window; with --hf a
  // MistralForCausalLM config.json). 0: none.
  int sliding_window = 0;

  // Hugging Face directory output (synth_hf): config.json + model.safetensors (+ tokenizer files).
  std::string hf_dir;
  // llama | qwen2 (q/k/v biases) | qwen3 (q/k RMSNorm) | mixtral (llama + experts) | qwen3moe (qwen3 + experts) |
  // gemma2 | gemma3 | phi3. The GGUF writer (synth_llama_gguf) takes all but qwen2 and qwen3; synth_hf all of them.
  std::string arch = "llama";
  bool tied = false;                 // tie_word_embeddings: no lm_head.weight
  bool rope_scaling_llama3 = false;  // Llama 3.1 rope_scaling (factor 8, low 1, high 4, original 8192)
  std::string tokenizer_dir;         // copy tokenizer.json + tokenizer_config.json from here (vocab grows to fit)
};

// Validates the options (throws kvik::Error naming the flag) and writes the model to out_path. With experts, the
// MLP of each block is llama.cpp's ffn_gate_inp (F32, as llama-quantize keeps it) + ffn_{gate,up,down}_exps.
void synth_llama_gguf(const SynthOptions& opt);

// Writes a random-weight Hugging Face directory at opt.hf_dir (weights in opt.type: f32, f16 or bf16), and,
// when opt.out_path is set, the same weights as a GGUF the way convert_hf_to_gguf.py lays them out (llama:
// q/k rows permuted to the interleaved rotation; rope_freqs.weight for llama3 scaling). Both load in kvik
// and give the same logits.
void synth_hf(const SynthOptions& opt);

// A random-weight GGUF of a family laid out by model/hf_layout.h (gemma2, gemma3): the tensors synth_hf would write
// for its GGUF twin (the same values), in any --type, with the vocabulary of --tokenizer-from (or the byte
// vocabulary). synth_llama_gguf hands these archs to it.
void synth_family_gguf(const SynthOptions& opt);

// The tokenizer.ggml.* keys synth writes: those of `tokenizer_from` padded to `vocab`, or the byte vocabulary.
void synth_write_vocab(GgufWriter& w, const std::string& tokenizer_from, int vocab);

}  // namespace kvik
