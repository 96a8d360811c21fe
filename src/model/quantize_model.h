// `kvik quantize`: a GGUF model (F32/F16/BF16 weights), or a Hugging Face directory read as the GGUF
// convert_hf_to_gguf.py would make of it (model/quantize_input.h), rewritten in one of llama-quantize's mixes,
// streaming: tensors are read from the mapped input a slab of rows at a time, quantized on the thread pool and written
// out, so memory stays near one slab (≤ 64 MiB of floats) above what the output file's page cache holds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/quant_recipe.h"

namespace kvik {

struct QuantizeOptions {
  std::string input;   // a GGUF file or a Hugging Face directory (config.json, safetensors, tokenizer.json)
  std::string output;  // the GGUF file to write
  QuantMix mix;
  RecipeOptions recipe;
  bool progress = true;  // one line per tensor on stderr
};

struct QuantizePlanEntry {
  RecipeTensor tensor;
  RecipeEntry type;
};

struct QuantizeStats {
  int64_t tensors = 0, fallbacks = 0;
  uint64_t bytes_in = 0, bytes_out = 0;  // tensor data
  double seconds = 0;
};

// The tensors of `input` in output order with the type each gets. Throws kvik::Error naming the tensor for one
// that cannot be written (a quantized input tensor that would change type, a type kvik cannot write, rows a
// forced type does not divide).
std::vector<QuantizePlanEntry> plan_quantize(const QuantizeOptions& o);
// Writes o.output (to o.output + ".tmp" first, renamed when complete).
QuantizeStats quantize_model(const QuantizeOptions& o);

}  // namespace kvik
