// What `kvik quantize` reads: a GGUF file, or a Hugging Face directory seen as the GGUF llama.cpp's
// convert_hf_to_gguf.py would make of it (GGUF tensor names and shapes, llama q/k rows permuted, vectors as F32,
// rope_freqs.weight for llama3 rope scaling, the {arch}.* keys, the tokenizer as tokenizer.ggml.*) without
// writing that GGUF: the quantizer reads rows straight from the mapped safetensors, a slab at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/mmap_file.h"
#include "model/quant_recipe.h"
#include "tensor/dtype.h"

namespace kvik {

class GgufWriter;

struct QuantizeInputTensor {
  std::string name;            // GGUF name
  DType dtype = DType::F32;    // the type the (converted) GGUF has: what the recipe starts from
  std::vector<int64_t> shape;  // ne[0] (the row) first
  DType stored = DType::F32;   // the type of the bytes at `data` (BF16 for a norm the converter makes F32)
  const uint8_t* data = nullptr;
  size_t nbytes = 0;              // of the stored bytes
  int64_t permute_head_dim = 0;   // > 0: row r is stored row hf_row_of_gguf_row(r, permute_head_dim)
  const MmapFile* map = nullptr;  // the mapping `data` points into, for releasing pages behind the reader
};

class QuantizeInput {
 public:
  // A GGUF file or a Hugging Face directory (config.json, safetensors, tokenizer.json). Throws kvik::Error naming
  // the file and what is wrong: no config.json, an architecture kvik does not run, a missing or misshapen tensor,
  // a tokenizer that cannot be written into a GGUF.
  static std::unique_ptr<QuantizeInput> open(const std::string& path);
  virtual ~QuantizeInput() = default;

  const std::string& path() const { return path_; }
  const RecipeModel& model() const { return model_; }
  const std::vector<QuantizeInputTensor>& tensors() const { return tensors_; }
  // The metadata the output starts with: everything but general.quantization_version and general.file_type,
  // which the quantizer appends (as llama-quantize moves them to the end).
  virtual void write_metadata(GgufWriter& w) const = 0;

 protected:
  std::string path_;
  RecipeModel model_;
  std::vector<QuantizeInputTensor> tensors_;
};

}  // namespace kvik
