// GGUF v2/v3 reader (mmap, zero-copy) and v3 writer.
//
// Layout: "GGUF" | u32 version | u64 n_tensors | u64 n_kv | kv pairs | tensor infos | pad to alignment | data.
// Every size read from the file is untrusted: it is checked against the bytes that remain before any
// allocation, and every error names the file, the key or tensor, and the byte offset.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/mmap_file.h"
#include "tensor/dtype.h"

namespace kvik {

enum class GgufType : uint32_t {
  U8 = 0,
  I8 = 1,
  U16 = 2,
  I16 = 3,
  U32 = 4,
  I32 = 5,
  F32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  U64 = 10,
  I64 = 11,
  F64 = 12,
};
std::string_view gguf_type_name(GgufType t);

// A metadata value. Numeric arrays point into the mapped file; strings are views into it.
struct GgufValue {
  GgufType type = GgufType::U8;
  // Scalars (numbers and bools widen into these).
  int64_t i = 0;
  uint64_t u = 0;
  double f = 0;
  std::string_view str;
  // Arrays.
  GgufType elem_type = GgufType::U8;
  uint64_t count = 0;
  const uint8_t* elems = nullptr;         // numeric arrays: packed little-endian elements
  std::vector<std::string_view> strings;  // string arrays
  std::span<const uint8_t> raw;           // the value's encoding (type tag included), for copying

  bool is_integer() const;
  bool is_float() const { return type == GgufType::F32 || type == GgufType::F64; }
  // Element k of a numeric array as double / int64 (caller checks k < count).
  double array_f(uint64_t k) const;
  int64_t array_i(uint64_t k) const;
};

struct GgufTensorInfo {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;  // ne[0] first: ne[0] is the contiguous (row) dimension
  uint64_t offset = 0;         // relative to the data section
  const uint8_t* data = nullptr;
  size_t nbytes = 0;
  int64_t numel() const;
};

class GgufFile {
 public:
  // Opens and validates the whole header. Throws kvik::Error naming the file, what is wrong and where.
  static std::unique_ptr<GgufFile> open(const std::string& path);
  // Parses an in-memory image (the fuzz entry point). `name` is used in error messages.
  static std::unique_ptr<GgufFile> parse(std::span<const uint8_t> bytes, const std::string& name);

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  size_t data_offset() const { return data_offset_; }
  const MmapFile* mapping() const { return file_.get(); }  // null for parse()d images

  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return kv_; }
  const GgufValue* find(std::string_view key) const;
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(std::string_view name) const;

  // Typed getters: `require_*` throw naming the key when it is missing or of the wrong type.
  std::optional<std::string> get_string(std::string_view key) const;
  std::optional<int64_t> get_int(std::string_view key) const;
  std::optional<double> get_float(std::string_view key) const;  // accepts integer values too
  std::optional<bool> get_bool(std::string_view key) const;
  std::string require_string(std::string_view key) const;
  int64_t require_int(std::string_view key) const;
  const GgufValue& require_array(std::string_view key, GgufType elem_type) const;

 private:
  GgufFile() = default;
  void parse_all(std::span<const uint8_t> bytes);

  std::string path_;
  std::unique_ptr<MmapFile> file_;
  uint32_t version_ = 0;
  uint32_t alignment_ = 32;
  size_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::map<std::string, size_t, std::less<>> kv_index_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

// Writes GGUF v3. Metadata keys keep insertion order; tensors are laid out in order, each aligned.
class GgufWriter {
 public:
  void set_u32(const std::string& key, uint32_t v);
  void set_i32(const std::string& key, int32_t v);
  void set_u64(const std::string& key, uint64_t v);
  void set_f32(const std::string& key, float v);
  void set_bool(const std::string& key, bool v);
  void set_string(const std::string& key, std::string_view v);
  void set_array_string(const std::string& key, const std::vector<std::string>& v);
  void set_array_f32(const std::string& key, const std::vector<float>& v);
  void set_array_i32(const std::string& key, const std::vector<int32_t>& v);
  void set_raw(const std::string& key, std::span<const uint8_t> raw);  // a GgufValue::raw from a reader
  void set_alignment(uint32_t a);

  // `data` must hold exactly the bytes of `shape` in `dtype`; it is copied.
  void add_tensor(const std::string& name, DType dtype, std::vector<int64_t> shape, std::span<const uint8_t> data);
  // A tensor whose bytes write_streaming() asks for when its turn comes (nothing is held in memory).
  void add_tensor_info(const std::string& name, DType dtype, std::vector<int64_t> shape);
  void write(const std::string& path) const;  // throws kvik::Error on I/O failure
  std::vector<uint8_t> to_bytes() const;
  // Writes the header, then for each tensor i in order calls fill(i, sink); fill passes the tensor's bytes to
  // sink in as many pieces as it likes and must pass exactly the tensor's size in all. The file appears at `path`
  // only when complete (written to path + ".tmp", then renamed); throws kvik::Error on I/O failure or a size
  // mismatch.
  using Sink = std::function<void(std::span<const uint8_t>)>;
  void write_streaming(const std::string& path, const std::function<void(size_t, const Sink&)>& fill) const;

 private:
  struct Entry {
    std::string key;
    std::vector<uint8_t> raw;  // type tag + payload
  };
  struct Tensor {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> data;  // empty for add_tensor_info tensors
    size_t nbytes = 0;
  };
  Tensor checked_tensor(const std::string& name, DType dtype, std::vector<int64_t> shape) const;
  void put(const std::string& key, std::vector<uint8_t> raw);
  std::vector<uint8_t> header_bytes() const;
  std::vector<Entry> kv_;
  std::vector<Tensor> tensors_;
  uint32_t alignment_ = 32;
};

}  // namespace kvik
