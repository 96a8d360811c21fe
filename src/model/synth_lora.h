// Random-weight LoRA adapters for tests and benchmarks (`kvik synth-lora`): the same adapter written as a PEFT
// directory or as the GGUF LoRA convert_lora_to_gguf.py would make of that directory (Llama q/k lora_B rows
// permuted like the base's q/k weights). Same options → the same adapter in either form.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/lora.h"
#include "model/model_config.h"
#include "tensor/dtype.h"

namespace kvik {

struct SynthLoraOptions {
  std::string out;    // a GGUF file, or a PEFT directory when peft
  bool peft = false;  // write adapter_config.json + adapter_model.safetensors
  int64_t rank = 8;
  float alpha = 16;
  bool rslora = false;
  DType type = DType::F32;  // f32, f16 or bf16
  std::vector<LoraTarget> targets = {LoraTarget::kQ,    LoraTarget::kK,  LoraTarget::kV,   LoraTarget::kO,
                                     LoraTarget::kGate, LoraTarget::kUp, LoraTarget::kDown};
  uint64_t seed = 1;
  float b_std = 0.05f;  // std of B's entries (A's is 1/√in): how far the adapter moves the base model
};

// "q,v,down" (--targets) → the targets; throws kvik::Error naming a bad entry.
std::vector<LoraTarget> parse_lora_targets(const std::string& csv);

// Writes an adapter that fits a base model of config `base`; throws kvik::Error on a bad option or I/O failure.
void synth_lora(const SynthLoraOptions& opt, const ModelConfig& base);

}  // namespace kvik
