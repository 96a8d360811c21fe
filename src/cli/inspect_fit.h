// The memory-fit table of `kvik inspect --fit GiB`.
#pragma once

#include <cstdint>

#include "formats/gguf.h"
#include "model/model_config.h"

namespace kvik::cli {

// Prints, for weights as F16/Q8_0/Q6_K/Q4_K_M/Q4_0/IQ4_NL and a KV cache of f16/q8_0, the weight bytes, KV bytes
// per token and how many sequences of max_model_len (0: the model's context) fit in `gib` GiB, or by how much
// one does not.
void print_memory_fit(const GgufFile& g, const ModelConfig& c, double gib, int64_t max_model_len);

}  // namespace kvik::cli
