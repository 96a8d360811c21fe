#include "formats/gguf.h"

#include <unistd.h>
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>

#include "core/error.h"

namespace kvik {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" little-endian
constexpr uint32_t kMaxDims = 4;

size_t scalar_size(GgufType t) {
  switch (t) {
    case GgufType::U8:
    case GgufType::I8:
    case GgufType::BOOL: return 1;
    case GgufType::U16:
    case GgufType::I16: return 2;
    case GgufType::U32:
    case GgufType::I32:
    case GgufType::F32: return 4;
    case GgufType::U64:
    case GgufType::I64:
    case GgufType::F64: return 8;
    default: return 0;  // STRING, ARRAY: variable
  }
}

bool known_type(uint32_t t) { return t <= static_cast<uint32_t>(GgufType::F64); }

// A bounds-checked cursor over the header. Errors carry the file name, the current context and the offset.
class Cursor {
 public:
  Cursor(std::span<const uint8_t> b, const std::string& name) : b_(b), name_(name) {}

  size_t pos() const { return pos_; }
  size_t remaining() const { return b_.size() - pos_; }
  const uint8_t* here() const { return b_.data() + pos_; }
  void set_context(std::string c) { context_ = std::move(c); }

  template <typename... Args>
  [[noreturn]] void error(fmt::format_string<Args...> f, Args&&... args) const {
    std::string msg = fmt::format(f, std::forward<Args>(args)...);
    if (context_.empty()) fail("{}: {} (at byte offset {})", name_, msg, pos_);
    fail("{}: {}: {} (at byte offset {})", name_, context_, msg, pos_);
  }

  void need(uint64_t n, std::string_view what) const {
    if (n > remaining()) error("truncated file: {} needs {} bytes, {} remain", what, n, remaining());
  }
  template <typename T>
  T read(std::string_view what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, here(), sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string_view read_string(std::string_view what) {
    const uint64_t len = read<uint64_t>(what);
    need(len, what);
    std::string_view s(reinterpret_cast<const char*>(here()), static_cast<size_t>(len));
    pos_ += static_cast<size_t>(len);
    return s;
  }
  void skip(uint64_t n, std::string_view what) {
    need(n, what);
    pos_ += static_cast<size_t>(n);
  }

 private:
  std::span<const uint8_t> b_;
  const std::string& name_;
  std::string context_;
  size_t pos_ = 0;
};

void read_scalar(Cursor& c, GgufType t, GgufValue& v) {
  switch (t) {
    case GgufType::U8:
      v.u = c.read<uint8_t>("u8");
      v.i = static_cast<int64_t>(v.u);
      break;
    case GgufType::I8:
      v.i = c.read<int8_t>("i8");
      v.u = static_cast<uint64_t>(v.i);
      break;
    case GgufType::U16:
      v.u = c.read<uint16_t>("u16");
      v.i = static_cast<int64_t>(v.u);
      break;
    case GgufType::I16:
      v.i = c.read<int16_t>("i16");
      v.u = static_cast<uint64_t>(v.i);
      break;
    case GgufType::U32:
      v.u = c.read<uint32_t>("u32");
      v.i = static_cast<int64_t>(v.u);
      break;
    case GgufType::I32:
      v.i = c.read<int32_t>("i32");
      v.u = static_cast<uint64_t>(v.i);
      break;
    case GgufType::U64:
      v.u = c.read<uint64_t>("u64");
      v.i = static_cast<int64_t>(v.u);
      break;
    case GgufType::I64:
      v.i = c.read<int64_t>("i64");
      v.u = static_cast<uint64_t>(v.i);
      break;
    case GgufType::F32: v.f = c.read<float>("f32"); break;
    case GgufType::F64: v.f = c.read<double>("f64"); break;
    case GgufType::BOOL: {
      const uint8_t b = c.read<uint8_t>("bool");
      if (b > 1) c.error("bool value {} is neither 0 nor 1", b);
      v.u = b;
      v.i = b;
      break;
    }
    case GgufType::STRING: v.str = c.read_string("string value"); break;
    default: c.error("unexpected value type {}", static_cast<uint32_t>(t));
  }
}

GgufValue read_value(Cursor& c) {
  GgufValue v;
  const uint32_t t = c.read<uint32_t>("value type");
  if (!known_type(t)) c.error("unknown value type {}", t);
  v.type = static_cast<GgufType>(t);
  if (v.type == GgufType::ARRAY) {
    const uint32_t et = c.read<uint32_t>("array element type");
    if (!known_type(et)) c.error("unknown array element type {}", et);
    v.elem_type = static_cast<GgufType>(et);
    if (v.elem_type == GgufType::ARRAY) c.error("nested arrays are not supported");
    v.count = c.read<uint64_t>("array length");
    if (v.elem_type == GgufType::STRING) {
      // Each string needs at least its 8-byte length: bound the count before reserving.
      if (v.count > c.remaining() / 8)
        c.error("array of {} strings cannot fit in the {} bytes left", v.count, c.remaining());
      v.strings.reserve(static_cast<size_t>(v.count));
      for (uint64_t k = 0; k < v.count; ++k) v.strings.push_back(c.read_string("string array element"));
    } else {
      const size_t es = scalar_size(v.elem_type);
      if (v.count > c.remaining() / es)
        c.error("array of {} {} elements ({} bytes each) cannot fit in the {} bytes left", v.count,
                gguf_type_name(v.elem_type), es, c.remaining());
      v.elems = c.here();
      c.skip(v.count * es, "array data");
      if (v.elem_type == GgufType::BOOL)
        for (uint64_t k = 0; k < v.count; ++k)
          if (v.elems[k] > 1) c.error("bool array element {} is {}", k, v.elems[k]);
    }
  } else {
    read_scalar(c, v.type, v);
  }
  return v;
}

template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

}  // namespace

std::string_view gguf_type_name(GgufType t) {
  switch (t) {
    case GgufType::U8: return "u8";
    case GgufType::I8: return "i8";
    case GgufType::U16: return "u16";
    case GgufType::I16: return "i16";
    case GgufType::U32: return "u32";
    case GgufType::I32: return "i32";
    case GgufType::F32: return "f32";
    case GgufType::BOOL: return "bool";
    case GgufType::STRING: return "string";
    case GgufType::ARRAY: return "array";
    case GgufType::U64: return "u64";
    case GgufType::I64: return "i64";
    case GgufType::F64: return "f64";
  }
  return "?";
}

bool GgufValue::is_integer() const {
  switch (type) {
    case GgufType::U8:
    case GgufType::I8:
    case GgufType::U16:
    case GgufType::I16:
    case GgufType::U32:
    case GgufType::I32:
    case GgufType::U64:
    case GgufType::I64: return true;
    default: return false;
  }
}

double GgufValue::array_f(uint64_t k) const {
  const uint8_t* p = elems + k * scalar_size(elem_type);
  switch (elem_type) {
    case GgufType::F32: return load<float>(p);
    case GgufType::F64: return load<double>(p);
    default: return static_cast<double>(array_i(k));
  }
}

int64_t GgufValue::array_i(uint64_t k) const {
  const uint8_t* p = elems + k * scalar_size(elem_type);
  switch (elem_type) {
    case GgufType::U8:
    case GgufType::BOOL: return load<uint8_t>(p);
    case GgufType::I8: return load<int8_t>(p);
    case GgufType::U16: return load<uint16_t>(p);
    case GgufType::I16: return load<int16_t>(p);
    case GgufType::U32: return load<uint32_t>(p);
    case GgufType::I32: return load<int32_t>(p);
    case GgufType::U64: return static_cast<int64_t>(load<uint64_t>(p));
    case GgufType::I64: return load<int64_t>(p);
    case GgufType::F32: return static_cast<int64_t>(load<float>(p));
    case GgufType::F64: return static_cast<int64_t>(load<double>(p));
    default: return 0;
  }
}

int64_t GgufTensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::unique_ptr<GgufFile> GgufFile::open(const std::string& path) {
  auto file = std::make_unique<MmapFile>(path);
  std::unique_ptr<GgufFile> g(new GgufFile());
  g->path_ = path;
  g->parse_all(file->bytes());
  g->file_ = std::move(file);
  return g;
}

std::unique_ptr<GgufFile> GgufFile::parse(std::span<const uint8_t> bytes, const std::string& name) {
  std::unique_ptr<GgufFile> g(new GgufFile());
  g->path_ = name;
  g->parse_all(bytes);
  return g;
}

void GgufFile::parse_all(std::span<const uint8_t> bytes) {
  Cursor c(bytes, path_);
  c.set_context("header");
  const uint32_t magic = c.read<uint32_t>("magic");
  if (magic != kMagic) c.error("not a GGUF file (magic 0x{:08x}, expected 0x{:08x} \"GGUF\")", magic, kMagic);
  version_ = c.read<uint32_t>("version");
  if (version_ != 2 && version_ != 3) c.error("unsupported GGUF version {} (kvik reads versions 2 and 3)", version_);
  const uint64_t n_tensors = c.read<uint64_t>("tensor count");
  const uint64_t n_kv = c.read<uint64_t>("metadata count");
  // Smallest encodings: a kv pair is 8 (key length) + 4 (type) + 1 bytes; a tensor info 8 + 4 + 4 + 8.
  if (n_kv > c.remaining() / 13) c.error("metadata count {} cannot fit in the {} bytes left", n_kv, c.remaining());
  if (n_tensors > c.remaining() / 24)
    c.error("tensor count {} cannot fit in the {} bytes left", n_tensors, c.remaining());

  kv_.reserve(static_cast<size_t>(n_kv));
  for (uint64_t k = 0; k < n_kv; ++k) {
    c.set_context(fmt::format("metadata entry {}", k));
    std::string key(c.read_string("key"));
    c.set_context(fmt::format("metadata key '{}'", key));
    if (kv_index_.count(key)) c.error("duplicate key");
    const size_t start = c.pos();
    GgufValue v = read_value(c);
    v.raw = bytes.subspan(start, c.pos() - start);
    kv_index_.emplace(key, kv_.size());
    kv_.emplace_back(std::move(key), std::move(v));
  }

  if (const GgufValue* a = find("general.alignment")) {
    if (!a->is_integer() || a->u == 0 || a->u > (1u << 30) || (a->u & (a->u - 1)) != 0)
      fail(
          "{}: metadata key 'general.alignment': must be a power-of-two integer, found {} of type {} (value at "
          "byte offset {})",
          path_, a->is_integer() ? std::to_string(a->i) : std::string("a value"), gguf_type_name(a->type),
          a->raw.data() - bytes.data());
    alignment_ = static_cast<uint32_t>(a->u);
  }

  tensors_.reserve(static_cast<size_t>(n_tensors));
  for (uint64_t k = 0; k < n_tensors; ++k) {
    c.set_context(fmt::format("tensor info {}", k));
    GgufTensorInfo t;
    t.name = std::string(c.read_string("tensor name"));
    c.set_context(fmt::format("tensor '{}'", t.name));
    if (tensor_index_.count(t.name)) c.error("duplicate tensor name");
    const uint32_t n_dims = c.read<uint32_t>("dimension count");
    if (n_dims == 0 || n_dims > kMaxDims) c.error("{} dimensions (1 to {} allowed)", n_dims, kMaxDims);
    int64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t ne = c.read<uint64_t>("dimension");
      if (ne > static_cast<uint64_t>(INT64_MAX)) c.error("dimension {} is {}, too large", d, ne);
      if (__builtin_mul_overflow(numel, static_cast<int64_t>(ne), &numel)) c.error("element count overflows");
      t.shape.push_back(static_cast<int64_t>(ne));
    }
    const uint32_t type = c.read<uint32_t>("tensor type");
    auto tr = dtype_traits(type);
    if (!tr) c.error("unknown tensor type id {}", type);
    t.dtype = tr->type;
    if (t.shape[0] % tr->block_size != 0)
      c.error("row length {} is not a multiple of the {} block size {}", t.shape[0], tr->name, tr->block_size);
    // Bytes: blocks per row × block bytes × rows, each step checked for overflow.
    uint64_t nbytes = 0;
    if (__builtin_mul_overflow(static_cast<uint64_t>(numel / tr->block_size), tr->block_bytes, &nbytes))
      c.error("byte size overflows");
    t.nbytes = static_cast<size_t>(nbytes);
    t.offset = c.read<uint64_t>("tensor data offset");
    if (t.offset % alignment_ != 0)
      c.error("data offset {} is not a multiple of the alignment {}", t.offset, alignment_);
    tensor_index_.emplace(t.name, tensors_.size());
    tensors_.push_back(std::move(t));
  }

  const size_t header_end = c.pos();
  data_offset_ = (header_end + alignment_ - 1) / alignment_ * alignment_;
  const size_t data_size = bytes.size() > data_offset_ ? bytes.size() - data_offset_ : 0;
  for (auto& t : tensors_) {
    uint64_t end = 0;
    if (__builtin_add_overflow(t.offset, static_cast<uint64_t>(t.nbytes), &end) || end > data_size)
      fail(
          "{}: tensor '{}': data [{}, {}) relative to the data section at byte offset {} runs past the end of the "
          "file ({} bytes of data)",
          path_, t.name, t.offset, t.offset + t.nbytes, data_offset_, data_size);
    // A zero-byte tensor may sit at the very end, where the padded data section starts past the file's end.
    t.data = bytes.data() + std::min<uint64_t>(data_offset_ + t.offset, bytes.size());
  }
}

const GgufValue* GgufFile::find(std::string_view key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

std::optional<std::string> GgufFile::get_string(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != GgufType::STRING)
    fail("{}: metadata key '{}': expected a string, found {}", path_, key, gguf_type_name(v->type));
  return std::string(v->str);
}

std::optional<int64_t> GgufFile::get_int(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (!v->is_integer())
    fail("{}: metadata key '{}': expected an integer, found {}", path_, key, gguf_type_name(v->type));
  if (v->type == GgufType::U64 && v->u > static_cast<uint64_t>(INT64_MAX))
    fail("{}: metadata key '{}': value {} is too large", path_, key, v->u);
  return v->i;
}

std::optional<double> GgufFile::get_float(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->is_float()) return v->f;
  if (v->is_integer()) return static_cast<double>(v->i);
  fail("{}: metadata key '{}': expected a number, found {}", path_, key, gguf_type_name(v->type));
}

std::optional<bool> GgufFile::get_bool(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != GgufType::BOOL)
    fail("{}: metadata key '{}': expected a bool, found {}", path_, key, gguf_type_name(v->type));
  return v->u != 0;
}

std::string GgufFile::require_string(std::string_view key) const {
  auto v = get_string(key);
  if (!v) fail("{}: required metadata key '{}' is missing", path_, key);
  return *v;
}

int64_t GgufFile::require_int(std::string_view key) const {
  auto v = get_int(key);
  if (!v) fail("{}: required metadata key '{}' is missing", path_, key);
  return *v;
}

const GgufValue& GgufFile::require_array(std::string_view key, GgufType elem_type) const {
  const GgufValue* v = find(key);
  if (!v) fail("{}: required metadata key '{}' is missing", path_, key);
  if (v->type != GgufType::ARRAY)
    fail("{}: metadata key '{}': expected an array, found {}", path_, key, gguf_type_name(v->type));
  auto numeric = [](GgufType t) { return t != GgufType::STRING && t != GgufType::BOOL; };
  const bool ok = v->elem_type == elem_type || (numeric(elem_type) && numeric(v->elem_type));
  if (!ok)
    fail("{}: metadata key '{}': expected an array of {}, found an array of {}", path_, key, gguf_type_name(elem_type),
         gguf_type_name(v->elem_type));
  return *v;
}

// ---------------------------------------------------------------------------------------------------------------
// Writer

namespace {

template <typename T>
void append(std::vector<uint8_t>& out, T v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  out.insert(out.end(), p, p + sizeof(T));
}
void append_string(std::vector<uint8_t>& out, std::string_view s) {
  append<uint64_t>(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}
template <typename T>
std::vector<uint8_t> scalar(GgufType t, T v) {
  std::vector<uint8_t> r;
  append<uint32_t>(r, static_cast<uint32_t>(t));
  append<T>(r, v);
  return r;
}

}  // namespace

void GgufWriter::put(const std::string& key, std::vector<uint8_t> raw) {
  for (auto& e : kv_)
    if (e.key == key) {
      e.raw = std::move(raw);
      return;
    }
  kv_.push_back({key, std::move(raw)});
}

void GgufWriter::set_u32(const std::string& key, uint32_t v) { put(key, scalar(GgufType::U32, v)); }
void GgufWriter::set_i32(const std::string& key, int32_t v) { put(key, scalar(GgufType::I32, v)); }
void GgufWriter::set_u64(const std::string& key, uint64_t v) { put(key, scalar(GgufType::U64, v)); }
void GgufWriter::set_f32(const std::string& key, float v) { put(key, scalar(GgufType::F32, v)); }
void GgufWriter::set_bool(const std::string& key, bool v) { put(key, scalar<uint8_t>(GgufType::BOOL, v ? 1 : 0)); }
void GgufWriter::set_string(const std::string& key, std::string_view v) {
  std::vector<uint8_t> r;
  append<uint32_t>(r, static_cast<uint32_t>(GgufType::STRING));
  append_string(r, v);
  put(key, std::move(r));
}
void GgufWriter::set_array_string(const std::string& key, const std::vector<std::string>& v) {
  std::vector<uint8_t> r;
  append<uint32_t>(r, static_cast<uint32_t>(GgufType::ARRAY));
  append<uint32_t>(r, static_cast<uint32_t>(GgufType::STRING));
  append<uint64_t>(r, v.size());
  for (const auto& s : v) append_string(r, s);
  put(key, std::move(r));
}
void GgufWriter::set_array_f32(const std::string& key, const std::vector<float>& v) {
  std::vector<uint8_t> r;
  append<uint32_t>(r, static_cast<uint32_t>(GgufType::ARRAY));
  append<uint32_t>(r, static_cast<uint32_t>(GgufType::F32));
  append<uint64_t>(r, v.size());
  for (float x : v) append<float>(r, x);
  put(key, std::move(r));
}
void GgufWriter::set_array_i32(const std::string& key, const std::vector<int32_t>& v) {
  std::vector<uint8_t> r;
  append<uint32_t>(r, static_cast<uint32_t>(GgufType::ARRAY));
  append<uint32_t>(r, static_cast<uint32_t>(GgufType::I32));
  append<uint64_t>(r, v.size());
  for (int32_t x : v) append<int32_t>(r, x);
  put(key, std::move(r));
}
void GgufWriter::set_raw(const std::string& key, std::span<const uint8_t> raw) {
  put(key, std::vector<uint8_t>(raw.begin(), raw.end()));
}
void GgufWriter::set_alignment(uint32_t a) {
  if (a == 0 || (a & (a - 1)) != 0) fail("GGUF alignment must be a power of two, got {}", a);
  alignment_ = a;
  set_u32("general.alignment", a);
}

GgufWriter::Tensor GgufWriter::checked_tensor(const std::string& name, DType dtype, std::vector<int64_t> shape) const {
  if (shape.empty() || shape.size() > kMaxDims) fail("tensor '{}': {} dimensions", name, shape.size());
  int64_t rows = 1;
  for (size_t d = 1; d < shape.size(); ++d) rows *= shape[d];
  auto rb = row_bytes(dtype, shape[0]);
  if (!rb) fail("tensor '{}': row length {} is not a multiple of the {} block size", name, shape[0], dtype_name(dtype));
  return {name, dtype, std::move(shape), {}, *rb * static_cast<size_t>(rows)};
}

void GgufWriter::add_tensor(const std::string& name, DType dtype, std::vector<int64_t> shape,
                            std::span<const uint8_t> data) {
  Tensor t = checked_tensor(name, dtype, std::move(shape));
  if (t.nbytes != data.size()) fail("tensor '{}': {} bytes given, shape needs {}", name, data.size(), t.nbytes);
  t.data.assign(data.begin(), data.end());
  tensors_.push_back(std::move(t));
}

void GgufWriter::add_tensor_info(const std::string& name, DType dtype, std::vector<int64_t> shape) {
  tensors_.push_back(checked_tensor(name, dtype, std::move(shape)));
}

std::vector<uint8_t> GgufWriter::header_bytes() const {
  std::vector<uint8_t> out;
  append<uint32_t>(out, kMagic);
  append<uint32_t>(out, 3);
  append<uint64_t>(out, tensors_.size());
  append<uint64_t>(out, kv_.size());
  for (const auto& e : kv_) {
    append_string(out, e.key);
    out.insert(out.end(), e.raw.begin(), e.raw.end());
  }
  uint64_t offset = 0;
  for (const auto& t : tensors_) {
    append_string(out, t.name);
    append<uint32_t>(out, static_cast<uint32_t>(t.shape.size()));
    for (int64_t d : t.shape) append<uint64_t>(out, static_cast<uint64_t>(d));
    append<uint32_t>(out, static_cast<uint32_t>(t.dtype));
    append<uint64_t>(out, offset);
    offset = (offset + t.nbytes + alignment_ - 1) / alignment_ * alignment_;
  }
  out.resize((out.size() + alignment_ - 1) / alignment_ * alignment_, 0);
  return out;
}

std::vector<uint8_t> GgufWriter::to_bytes() const {
  std::vector<uint8_t> out = header_bytes();
  for (const auto& t : tensors_) {
    if (t.data.size() != t.nbytes) fail("tensor '{}': to_bytes() of a streamed tensor", t.name);
    out.insert(out.end(), t.data.begin(), t.data.end());
    out.resize((out.size() + alignment_ - 1) / alignment_ * alignment_, 0);
  }
  return out;
}

void GgufWriter::write(const std::string& path) const {
  write_streaming(path, [&](size_t i, const Sink& sink) { sink(tensors_[i].data); });
}

void GgufWriter::write_streaming(const std::string& path, const std::function<void(size_t, const Sink&)>& fill) const {
  // A name of its own per writer: two processes writing the same path (tests run in parallel) each rename a
  // whole file into place instead of interleaving into one temporary.
  static std::atomic<uint64_t> counter{0};
  const std::string tmp = fmt::format("{}.tmp.{}.{}", path, ::getpid(), counter++);
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) fail("{}: cannot open for writing", tmp);
  const auto abandon = [&](const std::string& why) {
    std::fclose(f);
    std::remove(tmp.c_str());
    fail("{}: {}", tmp, why);
  };
  const std::vector<uint8_t> header = header_bytes();
  if (std::fwrite(header.data(), 1, header.size(), f) != header.size()) abandon("write failed");
  const std::vector<uint8_t> zeros(alignment_, 0);
  for (size_t i = 0; i < tensors_.size(); ++i) {
    size_t written = 0;
    bool ok = true;
    try {
      fill(i, [&](std::span<const uint8_t> bytes) {
        written += bytes.size();
        if (written > tensors_[i].nbytes)
          fail("tensor '{}': more than its {} bytes", tensors_[i].name, tensors_[i].nbytes);
        ok = ok && std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
      });
    } catch (const std::exception& e) {
      abandon(e.what());
    }
    if (!ok) abandon("write failed");
    if (written != tensors_[i].nbytes)
      abandon(fmt::format("tensor '{}': {} bytes written, {} expected", tensors_[i].name, written, tensors_[i].nbytes));
    const size_t pad = (alignment_ - written % alignment_) % alignment_;
    if (std::fwrite(zeros.data(), 1, pad, f) != pad) abandon("write failed");
  }
  if (std::fclose(f) != 0) {
    std::remove(tmp.c_str());
    fail("{}: write failed", tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) fail("{}: cannot rename to {}", tmp, path);
}

}  // namespace kvik
