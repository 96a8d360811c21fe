// The shape of a model in the notation of docs/concepts.md: d, L, n_h, n_kv, d_h, d_ff, V.
#pragma once

#include <cmath>
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
  // Interleaved local (sliding-window) and global layers (Gemma 2: 2, Gemma 3: 6; llama.cpp's swa pattern): layer
  // l is local when l % P < P − 1, so every P-th layer attends to all positions. 0: every layer uses
  // sliding_window (Mistral).
  int64_t sliding_window_pattern = 0;
  // Gemma 3's local layers rotate with their own base (rope_local_base_freq, GGUF rope.freq_base_swa) and no
  // scaling; rope_freq_scale (linear rope_scaling: 1 / factor) applies to the global layers. 0: rope_freq_base.
  float rope_freq_base_local = 0.0f;
  float rope_freq_scale = 1.0f;
  // Phi-3's LongRoPE: rope_freq_factors are its short or long factors (long when context_length exceeds the
  // original_max_position_embeddings, as llama.cpp picks them at full context), and cos / sin are multiplied by
  // rope_mscale (the attention factor √(1 + ln(scale) / ln(original))).
  float rope_mscale = 1.0f;
  // Phi-3's LongRoPE as the checkpoint has it (what a converted GGUF holds: rope_factors_short / _long and
  // rope.scaling.original_context_length); empty / 0 elsewhere.
  std::vector<float> rope_short_factors, rope_long_factors;
  int64_t rope_original_context = 0;
  // Gemma: attention scores tanh-capped at attn_softcap (Gemma 2: 50) and logits at final_softcap (Gemma 2: 30);
  // 0 = none. attn_scale multiplies q·k (0: 1/√d_h; HF's query_pre_attn_scalar^−½).
  float attn_softcap = 0.0f, final_softcap = 0.0f, attn_scale = 0.0f;

  int64_t q_dim() const { return n_heads * head_dim; }
  // Gemma 2 / 3: the embedding scaled by √d, GeGLU (gelu-tanh gate), RMSNorm after attention and after the MLP
  // too, tied embeddings.
  bool is_gemma() const { return arch == "gemma2" || arch == "gemma3"; }
  // Whether layer l attends to the last sliding_window positions only.
  bool layer_is_local(int64_t l) const {
    return sliding_window > 0 &&
           (sliding_window_pattern <= 1 || l % sliding_window_pattern < sliding_window_pattern - 1);
  }
  // Every layer local (Mistral): the KV blocks out of the window can be freed for the whole sequence.
  bool all_layers_local() const {
    return sliding_window > 0 && (sliding_window_pattern <= 1 || n_layers < sliding_window_pattern);
  }
  float layer_rope_base(int64_t l) const {
    return layer_is_local(l) && rope_freq_base_local > 0 ? rope_freq_base_local : rope_freq_base;
  }
  float layer_rope_scale(int64_t l) const { return arch == "gemma3" && layer_is_local(l) ? 1.0f : rope_freq_scale; }
  float attention_scale() const { return attn_scale > 0 ? attn_scale : 1.0f / std::sqrt(static_cast<float>(head_dim)); }
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
