// The shape of a model in the course's notation: d, L, n_h, n_kv, d_h, d_ff, V.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kernels/cpu/rope.h"

namespace kvik {

class GgufFile;

struct ModelConfig {
  std::string arch = "llama";
  std::string name;
  int64_t dim = 0;         // d
  int64_t n_layers = 0;    // L
  int64_t n_heads = 0;     // n_h
  int64_t n_kv_heads = 0;  // n_kv
  int64_t head_dim = 0;    // d_h
  int64_t ff_dim = 0;      // d_ff
  int64_t vocab_size = 0;  // V
  int64_t context_length = 0;
  int64_t rope_dim = 0;  // dimensions rotated per head (usually d_h)
  float rope_freq_base = 10000.0f;
  RopeType rope_type = RopeType::kNorm;
  float rms_eps = 1e-5f;
  bool tied_embeddings = false;
  bool attn_bias = false;  // q/k/v projections have biases (Qwen2)
  bool qk_norm = false;    // RMSNorm over each head of q and k before RoPE (Qwen3)
  // Per-pair RoPE frequency divisors [rope_dim / 2] (Llama 3.1 "llama3" rope scaling; GGUF rope_freqs.weight):
  // θ_i = pos · base^(−2i/rope_dim) / freq_factors[i]. Empty: no scaling.
  std::vector<float> rope_freq_factors;
  std::string torch_dtype;  // config.json's, informational
  // Mixture of experts (Mixtral: GGUF arch llama with expert_count; Qwen3-MoE: qwen3moe). 0 experts: a dense MLP.
  // Each block's MLP is E experts of width d_ff_exp; a router picks k per token (model/moe.h).
  int64_t n_experts = 0;       // E
  int64_t n_experts_used = 0;  // k
  int64_t expert_ff_dim = 0;   // d_ff_exp (Mixtral: feed_forward_length; Qwen3-MoE: expert_feed_forward_length)
  bool norm_topk_prob = true;  // the k router weights renormalized to sum 1 (Mixtral always; Qwen3-MoE's flag)
  // Sliding-window attention (Mistral's sliding_window; GGUF {arch}.attention.sliding_window): a query at position
  // p sees keys p − W + 1..p in every layer. 0: full causal attention.
  int64_t sliding_window = 0;

  int64_t q_dim() const { return n_heads * head_dim; }
  int64_t kv_dim() const { return n_kv_heads * head_dim; }
  // KV cache bytes per token: 2 (K and V) × L × n_kv × d_h × bytes per element.
  int64_t kv_bytes_per_token(int64_t elem_bytes) const { return 2 * n_layers * n_kv_heads * head_dim * elem_bytes; }
  bool is_moe() const { return n_experts > 0; }
};

// Reads the llama-family hyperparameters from GGUF metadata ({arch}.embedding_length, ...). Throws kvik::Error
// naming the key when one is missing or inconsistent (heads not dividing, zero sizes, ...).
ModelConfig config_from_gguf(const GgufFile& gguf);

// config.json of a Hugging Face directory: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM,
// Qwen3ForCausalLM, MixtralForCausalLM, Qwen3MoeForCausalLM. Throws kvik::Error naming the file and field that is
// missing or not supported.
ModelConfig config_from_hf(const std::string& dir);

// Llama 3.1's rope_scaling {"rope_type": "llama3", factor, low_freq_factor, high_freq_factor,
// original_max_position_embeddings} as per-pair frequency divisors (what convert_hf_to_gguf.py stores in
// rope_freqs.weight, and what transformers' _compute_llama3_parameters applies to inv_freq).
std::vector<float> llama3_rope_freq_factors(float base, int64_t rope_dim, float factor, float low_freq_factor,
                                            float high_freq_factor, float original_max_position);

// generation_config.json: the defaults a model was published with.
struct GenerationConfig {
  std::vector<int32_t> eos_token_ids;
  std::optional<float> temperature, top_p;
  std::optional<int32_t> top_k;
  std::optional<bool> do_sample;
};
// Empty when the directory has no generation_config.json; throws on a malformed one.
GenerationConfig generation_config_from_hf(const std::string& dir);

}  // namespace kvik
