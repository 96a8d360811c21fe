// Directional ablation baked into the weights (weight orthogonalization): every matrix that writes to the
// residual stream at the chosen stream layers loses its output component along r̂, W ← W − r̂ (r̂ᵀ W):
// the token embedding rows for layer 0, o_proj (attn_output) and down (ffn_down) of block ℓ−1 for layer ℓ ≥ 1.
// The result is an ordinary GGUF of the same shapes (llama.cpp loads it); ablating all layers this way is the
// same model as `--ablate DIR.json` at run time.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/intervention.h"
#include "tensor/dtype.h"

namespace kvik::interp {

struct BakeOptions {
  std::string model_path;  // a GGUF file
  std::string out_path;
  Direction direction;
  std::vector<int32_t> layers;  // stream layers; empty = all (0..L)
  std::optional<DType> type;    // type of the rewritten matrices (default: each one's source type)
};

struct BakeReport {
  int32_t tensors_rewritten = 0;
  bool untied_output = false;  // a tied LM head was written out as output.weight (kept unablated)
  double max_abs_change = 0;   // largest |ΔW| over the rewritten matrices (before requantization)
};

// Throws kvik::Error naming the file, layer or type that is wrong.
BakeReport bake_ablation(const BakeOptions& opt);

// W ← W − r̂ (r̂ᵀ W) for W [rows = d outputs, cols] row-major (an o_proj or down matrix); returns max |ΔW|.
double orthogonalize_outputs(float* w, int64_t d, int64_t cols, const float* r);
// Each row e ← e − (e · r̂) r̂ for E [rows, d] (embedding rows); returns max |ΔE|.
double orthogonalize_rows(float* e, int64_t rows, int64_t d, const float* r);

}  // namespace kvik::interp
