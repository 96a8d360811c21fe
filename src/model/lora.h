// LoRA adapters over one base model, applied unmerged (docs/lora.md; vLLM's LoRA layers and punica's
// segmented kernels, llama.cpp's llama-adapter): each targeted projection computes y = W x + s · B (A x), with
// A [r, in] and B [out, r] per adapter and s = α / r (α / √r with rsLoRA) times the user's scale. The base weights
// are read once per step for every token; the tokens of each adapter get their own thin product on top.
//
// Two file forms load: a PEFT directory (adapter_config.json + adapter_model.safetensors, Hugging Face row order)
// and a GGUF LoRA as llama.cpp's convert_lora_to_gguf.py writes it (general.type = adapter, adapter.type = lora,
// adapter.lora.alpha, blk.N.attn_q.weight.lora_a / .lora_b). On a GGUF Llama base the converter permutes q/k rows
// (model/hf_layout.h); a PEFT adapter's q/k lora_B rows get the same permutation here, and a GGUF adapter on a
// Hugging Face directory base the inverse one.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "model/model_config.h"
#include "tensor/tensor.h"

namespace kvik {

// The seven projections a LoRA may target, in the order of a block.
enum class LoraTarget : int { kQ, kK, kV, kO, kGate, kUp, kDown };
inline constexpr int kNumLoraTargets = 7;
const char* lora_target_gguf_name(LoraTarget t);  // "attn_q", ..., "ffn_down"
const char* lora_target_hf_name(LoraTarget t);    // "self_attn.q_proj", ..., "mlp.down_proj"
// (in, out) features of the projection in a base model of config c.
std::pair<int64_t, int64_t> lora_projection_dims(const ModelConfig& c, LoraTarget t);

struct LoraWeight {
  WeightMatrix a;  // [r, in] (r rows of `in` columns); a.data == nullptr: this projection is not targeted
  // Bᵀ [r, out] in F32 (row k = column k of B): B (A x) is added as Σ_k (A x)_k · row k, vector-wide over out
  // (B's own rows are only r long, too short for a dot product kernel).
  WeightMatrix b;
  float scale = 0;  // s = α / r (or α / √r) × the user's scale
  bool targeted() const { return a.data != nullptr; }
};

struct LoraAdapter {
  std::string name;  // what requests select it by ("model": name)
  std::string path;
  uint64_t id = 0;   // unique per load in this process: the prefix cache's extra key
  int64_t rank = 0;  // the largest r of its weights
  float alpha = 0;
  std::vector<std::array<LoraWeight, kNumLoraTargets>> layers;  // [L]
  std::vector<std::vector<uint8_t>> storage;                    // the weights' bytes (F32, F16 or BF16)

  const LoraWeight& weight(int64_t layer, LoraTarget t) const { return layers[layer][static_cast<int>(t)]; }
};

struct LoraLoadOptions {
  std::string name;      // empty: the file or directory name
  float scale = 1.0f;    // the user's multiplier (--lora-scale)
  int64_t max_rank = 0;  // > 0: refuse a larger r (--max-lora-rank)
};

// Loads a PEFT directory or a GGUF LoRA file for a base model of config `base`, checking everything: format keys,
// that every tensor targets one of the seven projections (embeddings, lm_head, DoRA and anything else are refused
// by name), dtypes (F32/F16/BF16), shapes against the base, rank, finite α and weights. Throws kvik::Error naming
// the file, tensor or key and what is wrong.
std::shared_ptr<const LoraAdapter> load_lora_adapter(const std::string& path, const ModelConfig& base,
                                                     const LoraLoadOptions& options = {});

// Why `adapter` cannot run on a model of config `c` (it was loaded for another shape), or empty.
std::string lora_mismatch(const LoraAdapter& adapter, const ModelConfig& c);

// True when the base model's q/k rows are in the GGUF converter's permuted order (a GGUF Llama).
bool lora_base_uses_gguf_qk_order(const ModelConfig& base);

// The unmerged LoRA products of one forward pass. begin() groups the step's tokens by adapter (punica's segments:
// tokens in any order, gathered per group); apply() adds each group's s · B (A x) to its rows of y. Buffers grow to
// the largest batch seen and are reused: no allocation in a step of a size seen before.
class LoraRunner {
 public:
  // per_token: [T] adapter of each token (nullptr = the base model), or empty. Returns whether any is active.
  bool begin(std::span<const LoraAdapter* const> per_token);
  bool active() const { return !groups_.empty(); }
  // y [T, out] += s · B (A x[t]) for the tokens of every adapter that targets (layer, target); x [T, in].
  void apply(int64_t layer, LoraTarget target, const float* x, int64_t in, float* y, int64_t out);

 private:
  struct Group {
    const LoraAdapter* adapter;
    int64_t first;  // into rows_
    int64_t count;
    bool contiguous;  // rows_[first..] are first_row, first_row + 1, ...: no gather needed
  };
  std::vector<Group> groups_;
  std::vector<int32_t> rows_;   // token rows, grouped
  std::vector<float> xg_, xa_;  // gathered inputs [n, in], x·Aᵀ [n, r]
};

}  // namespace kvik
