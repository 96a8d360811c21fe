// llama-quantize's file types ("q4_k_m", ...) and its per-tensor recipe: which tensors keep their type, which
// get another (the output matrix, attn_v and ffn_down of some layers), and the fallbacks for rows a K-quant's
// 256-element super-blocks do not divide. Written from llama.cpp's src/llama-quant.cpp (llama_tensor_get_type)
// for the dense architectures kvik runs, without an importance matrix.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tensor/dtype.h"

namespace kvik {

struct QuantMix {
  std::string_view name;  // "q4_k_m"
  uint32_t file_type;     // general.file_type (llama_ftype)
  DType base;             // the type the mix starts every matrix from
};
// The mixes `kvik quantize` writes; q4_k / q5_k are llama-quantize's aliases of q4_k_m / q5_k_m. Case-insensitive.
std::optional<QuantMix> quant_mix(std::string_view name);
std::string quant_mix_names();  // "q8_0, q4_0, ..." for help and errors

struct RecipeOptions {
  bool leave_output_tensor = false;           // --leave-output-tensor
  std::optional<DType> output_tensor_type;    // --output-tensor-type
  std::optional<DType> token_embedding_type;  // --token-embedding-type
};

// What the recipe needs of the model.
struct RecipeModel {
  std::string arch;
  int64_t n_layers = 0, n_heads = 0, n_kv_heads = 0;
};

struct RecipeTensor {
  std::string name;
  DType from;
  std::vector<int64_t> shape;  // ne[0] (the row) first
};
struct RecipeEntry {
  DType to;
  bool fallback =
      false;  // the recipe's type (`wanted`) did not divide the rows (llama-quantize warns and counts these)
  DType wanted = to;
};

// Tensors in llama-quantize's output order: the ones outside blocks first, then block by block, by name inside each.
std::vector<RecipeTensor> in_quantize_order(std::vector<RecipeTensor> tensors);
// The type of every tensor (in the order given, which must be in_quantize_order's: the layer counters of attn_v
// and ffn_down advance as llama-quantize's do).
std::vector<RecipeEntry> quant_recipe(const QuantMix& mix, const RecipeModel& model,
                                      const std::vector<RecipeTensor>& tensors, const RecipeOptions& opts);

}  // namespace kvik
