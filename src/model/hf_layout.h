// How llama.cpp's convert_hf_to_gguf.py lays a Hugging Face checkpoint of the families kvik runs (Llama/Mistral,
// Qwen2, Qwen3) out as GGUF: the tensor names, which rows it permutes, and the {arch}.* hyperparameter keys.
// One table, used by `kvik synth --hf` (to write a directory and its GGUF twin) and `kvik quantize` (to read a
// directory as the GGUF the converter would make of it).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/model_config.h"

namespace kvik {

class GgufWriter;

struct HfTensorLayout {
  std::string hf_name;         // model.layers.0.self_attn.q_proj.weight
  std::string gguf_name;       // blk.0.attn_q.weight
  std::vector<int64_t> shape;  // as the safetensors stores it: {out, in} for a matrix, {n} for a vector
  // Llama q/k (weights and biases): rows regrouped within each head from HF's rotate_half order to the
  // interleaved pairs llama.cpp's rotation uses (convert_hf_to_gguf.py's LlamaModel.permute). Qwen keeps HF's.
  bool permute = false;
  // An expert's matrix (Mixtral's block_sparse_moe.experts.N.w1, Qwen3-MoE's mlp.experts.N.gate_proj): the GGUF
  // stacks the n_experts HF tensors of one kind into gguf_name, shape [in, out, E], expert by expert.
  int64_t expert = -1;
  // Gemma's RMSNorm weights: HF multiplies by (1 + w), so the GGUF holds w + 1 (the converter adds it).
  bool norm_shift = false;
};

// The tensors of a checkpoint with this config, in the order `kvik synth --hf` writes them: embeddings, final
// norm, lm_head (unless tied), then per layer norm, q/k/v/o, biases (attn_bias), q/k norms (qk_norm), ffn (a MoE:
// the router, then per expert gate, up, down).
std::vector<HfTensorLayout> hf_tensor_layout(const ModelConfig& c);

// Tensors of a checkpoint that the converter drops (rotary_emb.inv_freq buffers some exports carry).
bool hf_tensor_dropped(const std::string& hf_name);

// Row r of a permuted tensor in the GGUF comes from this row of the HF tensor (head_dim rows per head).
inline int64_t hf_row_of_gguf_row(int64_t r, int64_t head_dim) {
  const int64_t within = r % head_dim;
  return r - within + (within % 2) * (head_dim / 2) + within / 2;
}

// The {arch}.* keys kvik's config_from_gguf and llama.cpp read: context_length, embedding_length, block_count,
// feed_forward_length, attention.head_count(_kv), attention.key_length / value_length,
// attention.layer_norm_rms_epsilon, rope.freq_base, rope.dimension_count, vocab_size.
void write_arch_metadata(const ModelConfig& c, GgufWriter& w);

// The rope-scaling tensors convert_hf_to_gguf.py adds, f(GGUF name, values) for each: Phi-3's LongRoPE as
// rope_factors_short and rope_factors_long, Llama 3.1's factors as rope_freqs; none without scaling.
void for_each_rope_factor_tensor(const ModelConfig& c,
                                 const std::function<void(const std::string&, const std::vector<float>&)>& f);

}  // namespace kvik
