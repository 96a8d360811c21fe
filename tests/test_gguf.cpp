// GGUF reader and writer: round trips of every value and tensor type, v2 files, the real stories260K model,
// and corrupt inputs, each of which must throw kvik::Error naming the problem, the key or tensor, and the offset.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/fp16.h"
#include "formats/gguf.h"

namespace kvik {
namespace {

// Little-endian byte builder for hand-made GGUF images.
struct Bytes {
  std::vector<uint8_t> b;
  template <typename T>
  Bytes& put(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    b.insert(b.end(), p, p + sizeof(T));
    return *this;
  }
  Bytes& u8(uint8_t v) { return put(v); }
  Bytes& u32(uint32_t v) { return put(v); }
  Bytes& u64(uint64_t v) { return put(v); }
  Bytes& str(std::string_view s) {
    u64(s.size());
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  Bytes& header(uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    return u32(0x46554747).u32(version).u64(n_tensors).u64(n_kv);
  }
  Bytes& kv_u32(std::string_view key, uint32_t v) { return str(key).u32(uint32_t(GgufType::U32)).u32(v); }
  Bytes& kv_str(std::string_view key, std::string_view v) { return str(key).u32(uint32_t(GgufType::STRING)).str(v); }
  Bytes& tensor(std::string_view name, std::initializer_list<uint64_t> shape, uint32_t type, uint64_t offset) {
    str(name).u32(static_cast<uint32_t>(shape.size()));
    for (uint64_t d : shape) u64(d);
    return u32(type).u64(offset);
  }
  Bytes& pad_to(size_t align) {
    b.resize((b.size() + align - 1) / align * align, 0);
    return *this;
  }
  Bytes& zeros(size_t n) {
    b.resize(b.size() + n, 0);
    return *this;
  }
};

std::vector<uint8_t> raw_value(GgufType t, std::initializer_list<uint8_t> payload) {
  Bytes r;
  r.u32(static_cast<uint32_t>(t));
  r.b.insert(r.b.end(), payload.begin(), payload.end());
  return r.b;
}

template <typename T>
std::vector<uint8_t> raw_scalar(GgufType t, T v) {
  Bytes r;
  r.u32(static_cast<uint32_t>(t)).put(v);
  return r.b;
}

std::unique_ptr<GgufFile> parse(const std::vector<uint8_t>& b) { return GgufFile::parse(b, "test.gguf"); }

// The bytes must be rejected with a kvik::Error whose message holds every needle and a byte offset.
void expect_error(const std::vector<uint8_t>& b, std::initializer_list<std::string_view> needles) {
  try {
    parse(b);
    ADD_FAILURE() << "parsed without error; expected: " << *needles.begin();
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (auto n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' not in: " << msg;
    EXPECT_NE(msg.find("byte offset"), std::string::npos) << msg;
    EXPECT_NE(msg.find("test.gguf"), std::string::npos) << msg;
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Round trips

// One key of every metadata type, scalar and array (u32 set twice: the second replaces the first in place).
GgufWriter every_type_writer() {
  GgufWriter w;
  w.set_raw("u8", raw_scalar<uint8_t>(GgufType::U8, 200));
  w.set_raw("i8", raw_scalar<int8_t>(GgufType::I8, -100));
  w.set_raw("u16", raw_scalar<uint16_t>(GgufType::U16, 60000));
  w.set_raw("i16", raw_scalar<int16_t>(GgufType::I16, -30000));
  w.set_u32("u32", 4000000000u);
  w.set_i32("i32", -2000000000);
  w.set_u64("u64", 18000000000000000000ull);
  w.set_raw("i64", raw_scalar<int64_t>(GgufType::I64, -9000000000000000000ll));
  w.set_f32("f32", 1.5f);
  w.set_raw("f64", raw_scalar<double>(GgufType::F64, -2.25e300));
  w.set_bool("bool_true", true);
  w.set_bool("bool_false", false);
  w.set_string("string", "héllo ▁world");
  w.set_string("empty", "");
  w.set_array_string("arr_str", {"a", "", "ccc"});
  w.set_array_f32("arr_f32", {1.0f, -2.5f, 3.25f});
  w.set_array_i32("arr_i32", {-1, 0, 2147483647});
  Bytes u16s;
  u16s.u32(uint32_t(GgufType::ARRAY)).u32(uint32_t(GgufType::U16)).u64(2).put<uint16_t>(7).put<uint16_t>(65535);
  w.set_raw("arr_u16", u16s.b);
  Bytes f64s;
  f64s.u32(uint32_t(GgufType::ARRAY)).u32(uint32_t(GgufType::F64)).u64(1).put<double>(0.125);
  w.set_raw("arr_f64", f64s.b);
  Bytes bools;
  bools.u32(uint32_t(GgufType::ARRAY)).u32(uint32_t(GgufType::BOOL)).u64(3).u8(1).u8(0).u8(1);
  w.set_raw("arr_bool", bools.b);
  Bytes empty_arr;
  empty_arr.u32(uint32_t(GgufType::ARRAY)).u32(uint32_t(GgufType::I64)).u64(0);
  w.set_raw("arr_empty", empty_arr.b);
  w.set_u32("u32", 4000000001u);  // setting a key again replaces it in place
  return w;
}

TEST(Gguf, EveryMetadataTypeRoundTrips) {
  GgufWriter w = every_type_writer();

  const std::vector<uint8_t> bytes = w.to_bytes();
  auto g = parse(bytes);
  EXPECT_EQ(g->version(), 3u);
  ASSERT_EQ(g->metadata().size(), 21u);
  EXPECT_EQ(g->metadata()[4].first, "u32");  // insertion order kept
  EXPECT_EQ(g->find("u8")->type, GgufType::U8);
  EXPECT_EQ(g->require_int("u8"), 200);
  EXPECT_EQ(g->require_int("i8"), -100);
  EXPECT_EQ(g->require_int("u16"), 60000);
  EXPECT_EQ(g->require_int("i16"), -30000);
  EXPECT_EQ(g->require_int("u32"), 4000000001ll);
  EXPECT_EQ(g->require_int("i32"), -2000000000);
  EXPECT_EQ(g->find("u64")->u, 18000000000000000000ull);
  EXPECT_THROW(g->get_int("u64"), Error);  // does not fit in int64
  EXPECT_EQ(g->require_int("i64"), -9000000000000000000ll);
  EXPECT_EQ(*g->get_float("f32"), 1.5);
  EXPECT_EQ(*g->get_float("f64"), -2.25e300);
  EXPECT_EQ(*g->get_float("i32"), -2000000000.0);
  EXPECT_EQ(*g->get_bool("bool_true"), true);
  EXPECT_EQ(*g->get_bool("bool_false"), false);
  EXPECT_EQ(g->require_string("string"), "héllo ▁world");
  EXPECT_EQ(g->require_string("empty"), "");
  EXPECT_FALSE(g->get_string("missing").has_value());
  EXPECT_THROW(g->require_string("missing"), Error);
  EXPECT_THROW(g->get_string("u8"), Error);
  EXPECT_THROW(g->get_bool("u8"), Error);
  EXPECT_THROW(g->get_int("string"), Error);

  const GgufValue& s = g->require_array("arr_str", GgufType::STRING);
  ASSERT_EQ(s.count, 3u);
  EXPECT_EQ(s.strings[0], "a");
  EXPECT_EQ(s.strings[1], "");
  EXPECT_EQ(s.strings[2], "ccc");
  const GgufValue& f = g->require_array("arr_f32", GgufType::F32);
  ASSERT_EQ(f.count, 3u);
  EXPECT_EQ(f.array_f(0), 1.0);
  EXPECT_EQ(f.array_f(1), -2.5);
  EXPECT_EQ(f.array_f(2), 3.25);
  const GgufValue& i = g->require_array("arr_i32", GgufType::I32);
  EXPECT_EQ(i.array_i(0), -1);
  EXPECT_EQ(i.array_i(2), 2147483647);
  const GgufValue& u = g->require_array("arr_u16", GgufType::U16);
  EXPECT_EQ(u.array_i(1), 65535);
  EXPECT_EQ(g->require_array("arr_f64", GgufType::F32).array_f(0), 0.125);  // numeric arrays convert
  const GgufValue& b = g->require_array("arr_bool", GgufType::BOOL);
  EXPECT_EQ(b.array_i(0), 1);
  EXPECT_EQ(b.array_i(1), 0);
  EXPECT_EQ(g->require_array("arr_empty", GgufType::I64).count, 0u);
  EXPECT_THROW(g->require_array("arr_str", GgufType::F32), Error);
  EXPECT_THROW(g->require_array("u8", GgufType::U8), Error);

  // Raw copy: every value re-encoded through set_raw gives back the same bytes.
  GgufWriter w2;
  for (const auto& [key, v] : g->metadata()) w2.set_raw(key, v.raw);
  EXPECT_EQ(w2.to_bytes(), bytes);
}

std::vector<float> ramp(int64_t n, float scale) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) v[k] = scale * std::sin(0.37f * static_cast<float>(k) + 0.1f);
  return v;
}

void tensor_round_trip(uint32_t alignment) {
  SCOPED_TRACE(alignment);
  struct Spec {
    std::string name;
    DType type;
    std::vector<int64_t> shape;
  };
  const std::vector<Spec> specs = {
      {"f32", DType::F32, {5, 3}},          {"f16", DType::F16, {7}},
      {"bf16", DType::BF16, {3, 2, 2}},     {"q8_0", DType::Q8_0, {64, 3}},
      {"q4_0", DType::Q4_0, {32, 1, 2, 1}}, {"empty", DType::F32, {0}},
  };
  GgufWriter w;
  if (alignment != 32) w.set_alignment(alignment);
  w.set_string("general.architecture", "test");
  std::vector<std::vector<uint8_t>> data;
  for (const auto& s : specs) {
    int64_t numel = 1;
    for (int64_t d : s.shape) numel *= d;
    const auto x = ramp(numel, 2.0f);
    std::vector<uint8_t> q(*row_bytes(s.type, numel));
    quantize_row(s.type, x.data(), q.data(), numel);
    w.add_tensor(s.name, s.type, s.shape, q);
    data.push_back(q);
  }
  const std::vector<uint8_t> bytes = w.to_bytes();
  auto g = parse(bytes);
  EXPECT_EQ(g->alignment(), alignment);
  EXPECT_EQ(g->data_offset() % alignment, 0u);
  ASSERT_EQ(g->tensors().size(), specs.size());
  for (size_t k = 0; k < specs.size(); ++k) {
    const GgufTensorInfo& t = g->tensors()[k];
    SCOPED_TRACE(t.name);
    EXPECT_EQ(t.name, specs[k].name);
    EXPECT_EQ(t.dtype, specs[k].type);
    EXPECT_EQ(t.shape, specs[k].shape);
    EXPECT_EQ(t.offset % alignment, 0u);
    EXPECT_EQ(static_cast<size_t>(t.data - bytes.data()) % alignment, 0u);
    ASSERT_EQ(t.nbytes, data[k].size());
    if (t.nbytes > 0) EXPECT_EQ(std::memcmp(t.data, data[k].data(), t.nbytes), 0);  // an empty vector has no data()
    EXPECT_EQ(g->find_tensor(t.name), &t);
  }
  EXPECT_EQ(g->find_tensor("nope"), nullptr);
  EXPECT_EQ(bytes.size() % alignment, 0u);
}

TEST(Gguf, TensorsOfEveryComputeTypeRoundTripAtDefaultAlignment) { tensor_round_trip(32); }
TEST(Gguf, TensorsRoundTripAtCustomAlignments) {
  tensor_round_trip(64);
  tensor_round_trip(256);
  tensor_round_trip(1);
}

TEST(Gguf, WriteToFileAndOpen) {
  GgufWriter w;
  w.set_u32("n", 7);
  std::vector<float> x = {1, 2, 3, 4};
  w.add_tensor("t", DType::F32, {4}, {reinterpret_cast<const uint8_t*>(x.data()), 16});
  const std::string path = ::testing::TempDir() + "kvik_test_gguf_write.gguf";
  w.write(path);
  auto g = GgufFile::open(path);
  EXPECT_EQ(g->path(), path);
  EXPECT_EQ(g->require_int("n"), 7);
  EXPECT_EQ(reinterpret_cast<const float*>(g->find_tensor("t")->data)[3], 4.0f);
  std::remove(path.c_str());
  EXPECT_THROW(GgufFile::open(path), Error);
}

TEST(Gguf, WriterRejectsBadTensors) {
  GgufWriter w;
  std::vector<uint8_t> d(34);
  EXPECT_THROW(w.add_tensor("a", DType::Q8_0, {16}, d), Error);     // not a block multiple
  EXPECT_THROW(w.add_tensor("b", DType::Q8_0, {32, 2}, d), Error);  // wrong byte count
  EXPECT_THROW(w.add_tensor("c", DType::F32, {}, d), Error);
  EXPECT_THROW(w.set_alignment(3), Error);
  EXPECT_THROW(w.set_alignment(0), Error);
}

TEST(Gguf, ReadsVersion2) {
  Bytes b;
  b.header(2, 2, 2).kv_str("general.architecture", "llama").kv_u32("general.alignment", 32);
  b.tensor("w", {4, 2}, uint32_t(DType::F32), 0).tensor("h", {2}, uint32_t(DType::F16), 32);
  b.pad_to(32);
  for (int k = 0; k < 8; ++k) b.put<float>(static_cast<float>(k) * 0.5f);
  b.put<uint16_t>(f32_to_fp16(1.0f)).put<uint16_t>(f32_to_fp16(-2.0f)).pad_to(32);
  auto g = parse(b.b);
  EXPECT_EQ(g->version(), 2u);
  EXPECT_EQ(g->require_string("general.architecture"), "llama");
  ASSERT_EQ(g->tensors().size(), 2u);
  const GgufTensorInfo* w = g->find_tensor("w");
  EXPECT_EQ(w->shape, (std::vector<int64_t>{4, 2}));
  EXPECT_EQ(reinterpret_cast<const float*>(w->data)[7], 3.5f);
  const GgufTensorInfo* h = g->find_tensor("h");
  EXPECT_EQ(h->dtype, DType::F16);
  EXPECT_EQ(fp16_to_f32(reinterpret_cast<const uint16_t*>(h->data)[1]), -2.0f);
}

TEST(Gguf, OpensStories260K) {
  auto g = GgufFile::open(KVIK_SOURCE_DIR "/models/stories260K.gguf");
  EXPECT_EQ(g->version(), 3u);
  EXPECT_EQ(g->require_string("general.architecture"), "llama");
  EXPECT_EQ(g->require_int("llama.block_count"), 5);
  EXPECT_EQ(g->require_int("llama.embedding_length"), 64);
  EXPECT_EQ(g->require_array("tokenizer.ggml.tokens", GgufType::STRING).count, 512u);
  EXPECT_EQ(g->require_array("tokenizer.ggml.tokens", GgufType::STRING).strings[1], "<s>");
  EXPECT_EQ(g->tensors().size(), 3u + 9u * 5u);
  const GgufTensorInfo* e = g->find_tensor("token_embd.weight");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->shape, (std::vector<int64_t>{64, 512}));
  EXPECT_EQ(e->dtype, DType::F32);
  EXPECT_EQ(e->nbytes, 64u * 512u * 4u);
  for (int l = 0; l < 5; ++l)
    for (const char* n :
         {"attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down"})
      EXPECT_NE(g->find_tensor(fmt::format("blk.{}.{}.weight", l, n)), nullptr) << l << " " << n;
  EXPECT_EQ(g->find_tensor("blk.5.attn_q.weight"), nullptr);
  EXPECT_EQ(g->find_tensor("blk.0.ffn_down.weight")->shape, (std::vector<int64_t>{172, 64}));
  // Norm weights are finite numbers near 1.
  const auto* norm = reinterpret_cast<const float*>(g->find_tensor("output_norm.weight")->data);
  for (int k = 0; k < 64; ++k) EXPECT_TRUE(std::isfinite(norm[k]));
}

// ---------------------------------------------------------------------------------------------------------------
// Corrupt inputs

// A small valid file: a few keys, two tensors. The last tensor is a multiple of the alignment long, so the file
// has no trailing padding and every shorter prefix is invalid.
std::vector<uint8_t> small_file() {
  GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set_u32("llama.block_count", 1);
  w.set_bool("flag", true);
  w.set_array_string("tokenizer.ggml.tokens", {"<unk>", "a"});
  w.set_array_f32("tokenizer.ggml.scores", {0.0f, -1.0f});
  std::vector<uint8_t> a(3 * 4, 1), b(34 * 2, 2);  // f32 [3], q8_0 [32, 2] (68 bytes, pads to 96)
  std::vector<uint8_t> c(32, 3);                   // f32 [8]: 32 bytes, ends exactly on the alignment
  w.add_tensor("a", DType::F32, {3}, a);
  w.add_tensor("b", DType::Q8_0, {32, 2}, b);
  w.add_tensor("c", DType::F32, {8}, c);
  return w.to_bytes();
}

TEST(GgufCorrupt, EveryTruncationThrows) {
  const std::vector<uint8_t> full = small_file();
  ASSERT_NO_THROW(parse(full));
  for (size_t n = 0; n < full.size(); ++n) {
    SCOPED_TRACE(n);
    std::vector<uint8_t> prefix(full.begin(), full.begin() + n);
    expect_error(prefix, {});
  }
}

TEST(GgufCorrupt, BadMagic) {
  auto b = small_file();
  b[3] = 'X';
  expect_error(b, {"not a GGUF file", "magic"});
}

TEST(GgufCorrupt, UnsupportedVersions) {
  for (uint32_t v : {0u, 1u, 4u, 0xFFFFFFFFu}) {
    Bytes b;
    b.header(v, 0, 0);
    expect_error(b.b, {"unsupported GGUF version " + std::to_string(v)});
  }
}

TEST(GgufCorrupt, HugeStringLengths) {
  Bytes key;
  key.header(3, 0, 1).u64(1ull << 62).zeros(16);
  expect_error(key.b, {"truncated", "metadata entry 0", "key"});
  Bytes value;
  value.header(3, 0, 1).str("general.name").u32(uint32_t(GgufType::STRING)).u64(~0ull).zeros(16);
  expect_error(value.b, {"truncated", "'general.name'", "string value"});
  Bytes elem;
  elem.header(3, 0, 1).str("tokens").u32(uint32_t(GgufType::ARRAY)).u32(uint32_t(GgufType::STRING)).u64(2);
  elem.str("ok").u64(1ull << 40).zeros(8);
  expect_error(elem.b, {"truncated", "'tokens'", "string array element"});
  Bytes name;
  name.header(3, 1, 0).u64(~0ull - 3).zeros(32);
  expect_error(name.b, {"truncated", "tensor info 0", "tensor name"});
}

TEST(GgufCorrupt, HugeArrayCounts) {
  Bytes nums;
  nums.header(3, 0, 1).str("scores").u32(uint32_t(GgufType::ARRAY)).u32(uint32_t(GgufType::F32));
  nums.u64(1ull << 61).zeros(64);
  expect_error(nums.b, {"'scores'", "array of 2305843009213693952 f32 elements"});
  Bytes wrap;  // count × 8 wraps around 2^64 to a small number
  wrap.header(3, 0, 1).str("w").u32(uint32_t(GgufType::ARRAY)).u32(uint32_t(GgufType::U64));
  wrap.u64((1ull << 61) + 1).zeros(64);
  expect_error(wrap.b, {"'w'", "cannot fit"});
  Bytes strs;
  strs.header(3, 0, 1).str("tokens").u32(uint32_t(GgufType::ARRAY)).u32(uint32_t(GgufType::STRING));
  strs.u64(~0ull).zeros(64);
  expect_error(strs.b, {"'tokens'", "strings cannot fit"});
  Bytes nested;
  nested.header(3, 0, 1).str("n").u32(uint32_t(GgufType::ARRAY)).u32(uint32_t(GgufType::ARRAY)).u64(1).zeros(32);
  expect_error(nested.b, {"'n'", "nested arrays"});
  Bytes bad_elem;
  bad_elem.header(3, 0, 1).str("e").u32(uint32_t(GgufType::ARRAY)).u32(13).u64(1).zeros(32);
  expect_error(bad_elem.b, {"'e'", "unknown array element type 13"});
}

TEST(GgufCorrupt, HugeCounts) {
  Bytes t;
  t.header(3, 1ull << 60, 0).zeros(100);
  expect_error(t.b, {"header", "tensor count 1152921504606846976"});
  Bytes kv;
  kv.header(3, 0, ~0ull).zeros(100);
  expect_error(kv.b, {"header", "metadata count 18446744073709551615"});
}

TEST(GgufCorrupt, DimensionCounts) {
  for (uint32_t n : {0u, 5u, 0xFFFFFFFFu}) {
    Bytes b;
    b.header(3, 1, 0).str("blk.0.attn_q.weight").u32(n).zeros(64);
    expect_error(b.b, {"'blk.0.attn_q.weight'", std::to_string(n) + " dimensions"});
  }
}

TEST(GgufCorrupt, SizesThatOverflow) {
  Bytes numel;  // 2^32 × 2^32 elements
  numel.header(3, 1, 0).tensor("big", {1ull << 32, 1ull << 32}, uint32_t(DType::F32), 0).pad_to(32);
  expect_error(numel.b, {"'big'", "element count overflows"});
  Bytes bytes;  // 2^62 elements fit in int64, 2^64 bytes do not
  bytes.header(3, 1, 0).tensor("big", {1ull << 40, 1ull << 22}, uint32_t(DType::F32), 0).pad_to(32);
  expect_error(bytes.b, {"'big'", "byte size overflows"});
  Bytes dim;
  dim.header(3, 1, 0).tensor("neg", {~0ull}, uint32_t(DType::F32), 0).pad_to(32);
  expect_error(dim.b, {"'neg'", "too large"});
  Bytes q;  // q8_0 rows must hold whole blocks
  q.header(3, 1, 0).tensor("q", {48}, uint32_t(DType::Q8_0), 0).pad_to(32).zeros(64);
  expect_error(q.b, {"'q'", "row length 48", "q8_0"});
}

TEST(GgufCorrupt, UnknownTypes) {
  for (uint32_t id : {4u, 5u, 31u, 99u, 0xFFFFFFFFu}) {
    Bytes b;
    b.header(3, 1, 0).tensor("t", {32}, id, 0).pad_to(32).zeros(128);
    expect_error(b.b, {"'t'", "unknown tensor type id " + std::to_string(id)});
  }
  Bytes v;
  v.header(3, 0, 1).str("general.foo").u32(13).zeros(16);
  expect_error(v.b, {"'general.foo'", "unknown value type 13"});
}

TEST(GgufCorrupt, TensorOffsets) {
  Bytes mis;
  mis.header(3, 1, 0).tensor("t", {4}, uint32_t(DType::F32), 4).pad_to(32).zeros(64);
  expect_error(mis.b, {"'t'", "data offset 4 is not a multiple of the alignment 32"});
  Bytes past;
  past.header(3, 2, 0).tensor("a", {4}, uint32_t(DType::F32), 0).tensor("b", {16}, uint32_t(DType::F32), 32);
  past.pad_to(32).zeros(64);  // b needs [32, 96) but the data section holds 64 bytes
  expect_error(past.b, {"'b'", "runs past the end"});
  Bytes wrap;
  wrap.header(3, 1, 0).tensor("w", {8}, uint32_t(DType::F32), ~0ull - 31).pad_to(32).zeros(64);
  expect_error(wrap.b, {"'w'", "runs past the end"});
}

TEST(GgufCorrupt, Duplicates) {
  Bytes key;
  key.header(3, 0, 2).kv_u32("llama.block_count", 1).kv_u32("llama.block_count", 2);
  expect_error(key.b, {"'llama.block_count'", "duplicate key"});
  Bytes tensor;
  tensor.header(3, 2, 0).tensor("w", {4}, 0, 0).tensor("w", {4}, 0, 32).pad_to(32).zeros(64);
  expect_error(tensor.b, {"'w'", "duplicate tensor name"});
}

TEST(GgufCorrupt, BoolsMustBeZeroOrOne) {
  Bytes b;
  b.header(3, 0, 1).str("flag").u32(uint32_t(GgufType::BOOL)).u8(2);
  expect_error(b.b, {"'flag'", "bool value 2"});
  Bytes arr;
  arr.header(3, 0, 1).str("flags").u32(uint32_t(GgufType::ARRAY)).u32(uint32_t(GgufType::BOOL)).u64(3);
  arr.u8(0).u8(1).u8(7);
  expect_error(arr.b, {"'flags'", "bool array element 2 is 7"});
}

TEST(GgufCorrupt, BadAlignment) {
  for (uint32_t a : {0u, 3u, 48u, 1u << 31}) {
    Bytes b;
    b.header(3, 0, 1).kv_u32("general.alignment", a);
    expect_error(b.b, {"'general.alignment'", "power-of-two", std::to_string(a)});
  }
  Bytes s;
  s.header(3, 0, 1).kv_str("general.alignment", "32");
  expect_error(s.b, {"'general.alignment'", "string"});
}

TEST(GgufCorrupt, ZeroSizedTensorAtTheEndIsFine) {
  // The header's padding is missing, but a zero-byte tensor needs no data.
  Bytes b;
  b.header(3, 1, 0).tensor("e", {0}, uint32_t(DType::F32), 0);
  auto g = parse(b.b);
  EXPECT_EQ(g->find_tensor("e")->nbytes, 0u);
}

}  // namespace
}  // namespace kvik
