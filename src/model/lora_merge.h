// `kvik merge-lora` (llama.cpp's llama-export-lora): bakes a LoRA into a new base file, W' = W + s · B A for every
// projection the adapter targets; every other tensor and all metadata are copied as they are.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "tensor/dtype.h"

namespace kvik {

struct MergeLoraOptions {
  std::string base_path;     // a GGUF model
  std::string adapter_path;  // a PEFT directory or a GGUF LoRA (model/lora.h)
  std::string out_path;
  float scale = 1.0f;         // the user's multiplier on α / r
  std::optional<DType> type;  // type of the rewritten matrices (default: each one's own type)
};

// Returns the number of matrices rewritten. Throws kvik::Error naming the file, tensor or type that is wrong.
int64_t merge_lora(const MergeLoraOptions& opt);

}  // namespace kvik
