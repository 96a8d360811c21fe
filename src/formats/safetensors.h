// safetensors reader (mmap, zero-copy): the weight format of Hugging Face model directories.
//
// Layout: u64 little-endian header size N | N bytes of JSON {"name": {"dtype", "shape", "data_offsets":
// [begin, end]}, "__metadata__": {...}} | data. Every field is untrusted: sizes are checked against the file
// before use, and errors name the file and the tensor. A sharded checkpoint (model.safetensors.index.json
// with a "weight_map" of tensor -> shard file) opens as one SafetensorsModel.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/mmap_file.h"
#include "tensor/dtype.h"

namespace kvik {

struct SafetensorsTensor {
  std::string name;
  DType dtype = DType::F32;    // F32, F16 or BF16
  std::vector<int64_t> shape;  // row-major, outermost first (HF [out_features, in_features])
  const uint8_t* data = nullptr;
  size_t nbytes = 0;
  std::string file;               // for error messages
  const MmapFile* map = nullptr;  // the mapping `data` points into (null for parse()d images)
  int64_t numel() const;
};

class SafetensorsFile {
 public:
  static std::unique_ptr<SafetensorsFile> open(const std::string& path);  // throws kvik::Error
  // Parses an in-memory image (tests, fuzzing); `bytes` must outlive the object.
  static std::unique_ptr<SafetensorsFile> parse(std::span<const uint8_t> bytes, const std::string& name);

  const std::string& path() const { return path_; }
  const std::map<std::string, SafetensorsTensor>& tensors() const { return tensors_; }
  const SafetensorsTensor* find(const std::string& name) const;

 private:
  std::string path_;
  std::unique_ptr<MmapFile> file_;
  std::map<std::string, SafetensorsTensor> tensors_;
};

// All tensors of a model directory: model.safetensors, or the shards listed by model.safetensors.index.json.
class SafetensorsModel {
 public:
  static std::unique_ptr<SafetensorsModel> open_dir(const std::string& dir);  // throws kvik::Error
  const SafetensorsTensor* find(const std::string& name) const;
  const std::string& dir() const { return dir_; }
  std::vector<const SafetensorsTensor*> all() const;

 private:
  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const SafetensorsTensor*> index_;
};

// Writes F32/F16/BF16 tensors as one safetensors file (used by `kvik synth --hf`). Data offsets are 8-aligned.
struct SafetensorsWriteTensor {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;
};
void write_safetensors(const std::string& path, const std::vector<SafetensorsWriteTensor>& tensors);

}  // namespace kvik
