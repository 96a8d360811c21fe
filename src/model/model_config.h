// The shape of a model in the course's notation: d, L, n_h, n_kv, d_h, d_ff, V.
#pragma once

#include <cstdint>
#include <string>

namespace kvik {

class GgufFile;

enum class RopeType { kNorm, kNeox };  // adjacent pairs (llama GGUF) vs halves (HF layout, Qwen)

struct ModelConfig {
  std::string arch = "llama";
  std::string name;
  int64_t dim = 0;           // d
  int64_t n_layers = 0;      // L
  int64_t n_heads = 0;       // n_h
  int64_t n_kv_heads = 0;    // n_kv
  int64_t head_dim = 0;      // d_h
  int64_t ff_dim = 0;        // d_ff
  int64_t vocab_size = 0;    // V
  int64_t context_length = 0;
  int64_t rope_dim = 0;      // dimensions rotated per head (usually d_h)
  float rope_freq_base = 10000.0f;
  RopeType rope_type = RopeType::kNorm;
  float rms_eps = 1e-5f;
  bool tied_embeddings = false;

  int64_t q_dim() const { return n_heads * head_dim; }
  int64_t kv_dim() const { return n_kv_heads * head_dim; }
  // KV cache bytes per token: 2 (K and V) × L × n_kv × d_h × bytes per element.
  int64_t kv_bytes_per_token(int64_t elem_bytes) const { return 2 * n_layers * n_kv_heads * head_dim * elem_bytes; }
};

// Reads the llama-family hyperparameters from GGUF metadata ({arch}.embedding_length, ...). Throws kvik::Error
// naming the key when one is missing or inconsistent (heads not dividing, zero sizes, ...).
ModelConfig config_from_gguf(const GgufFile& gguf);

}  // namespace kvik
