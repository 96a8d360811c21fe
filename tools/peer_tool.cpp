// kvik_peer_tool: llama.cpp's own quantization code, called in the peer's shared libraries (node-llama-cpp 3.21.1,
// in $KVIK_PEER_DIR, see tools/peer_lib.sh) through dlopen, to make the fixtures kvik's quantization
// tests compare with, and to time llama.cpp's quantizer for bench/quantize_speed.sh. Not part of the default
// build: `ninja -C build kvik_peer_tool`.
//
//   kvik_peer_tool quantize IN.gguf OUT.gguf MIX [--threads N] [--leave-output-tensor] [--output-tensor-type T]
//                  [--token-embedding-type T]     llama_model_quantize() (what llama-quantize's main() calls);
//                                                 prints its wall time in seconds
//   kvik_peer_tool kquant-fixture OUT.bin          tests/data/kquants_llamacpp.bin
//   kvik_peer_tool quant-fixture OUT.bin           tests/data/quants_llamacpp.bin
//   kvik_peer_tool quantize-fixture KVIK OUT.json  tests/fixtures/llama_quantize_hashes.json
//
// The peer directory is $KVIK_PEER_DIR (no default). The random inputs come from a re-implementation
// of CPython's random.Random (MT19937, gauss, uniform, choice, randint) with the seeds the fixtures were first
// made with, so the files come out byte for byte as before.
#include <dlfcn.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "../tests/sha256.h"
#include "formats/gguf.h"
#include "tensor/dtype.h"

namespace {

namespace fs = std::filesystem;

[[noreturn]] void die(const std::string& msg) {
  std::fprintf(stderr, "kvik_peer_tool: %s\n", msg.c_str());
  std::exit(1);
}

// CPython's random.Random: MT19937 seeded by init_by_array, random() = genrand_res53, gauss() with its cached pair.
class PyRandom {
 public:
  explicit PyRandom(uint32_t seed) {
    mt_[0] = 19650218u;
    for (int i = 1; i < 624; ++i) mt_[i] = 1812433253u * (mt_[i - 1] ^ (mt_[i - 1] >> 30)) + static_cast<uint32_t>(i);
    int i = 1;
    for (int k = 624; k > 0; --k) {  // init_by_array with the one-word key {seed}
      mt_[i] = (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1664525u)) + seed;
      if (++i >= 624) mt_[0] = mt_[623], i = 1;
    }
    for (int k = 623; k > 0; --k) {
      mt_[i] = (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1566083941u)) - static_cast<uint32_t>(i);
      if (++i >= 624) mt_[0] = mt_[623], i = 1;
    }
    mt_[0] = 0x80000000u;
    idx_ = 624;
  }
  double random() {
    const uint32_t a = next() >> 5, b = next() >> 6;
    return (a * 67108864.0 + b) * (1.0 / 9007199254740992.0);
  }
  double gauss(double mu, double sigma) {
    double z = 0;
    if (has_next_) {
      z = next_gauss_, has_next_ = false;
    } else {
      const double x2pi = random() * (2.0 * M_PI);
      const double g2rad = std::sqrt(-2.0 * std::log(1.0 - random()));
      z = std::cos(x2pi) * g2rad;
      next_gauss_ = std::sin(x2pi) * g2rad, has_next_ = true;
    }
    return mu + z * sigma;
  }
  double uniform(double a, double b) { return a + (b - a) * random(); }
  int64_t below(int64_t n) {  // _randbelow_with_getrandbits
    int k = 0;
    while ((int64_t{1} << k) <= n) ++k;
    uint32_t r = next() >> (32 - k);
    while (r >= n) r = next() >> (32 - k);
    return r;
  }
  int64_t randint(int64_t a, int64_t b) { return a + below(b - a + 1); }
  template <typename T>
  T choice(std::initializer_list<T> xs) {
    return xs.begin()[below(static_cast<int64_t>(xs.size()))];
  }

 private:
  uint32_t next() {
    if (idx_ >= 624) twist();
    uint32_t y = mt_[idx_++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    return y ^ (y >> 18);
  }
  void twist() {
    for (int i = 0; i < 624; ++i) {
      const uint32_t y = (mt_[i] & 0x80000000u) | (mt_[(i + 1) % 624] & 0x7fffffffu);
      mt_[i] = mt_[(i + 397) % 624] ^ (y >> 1) ^ ((y & 1u) ? 0x9908b0dfu : 0u);
    }
    idx_ = 0;
  }
  uint32_t mt_[624];
  int idx_ = 0;
  bool has_next_ = false;
  double next_gauss_ = 0;
};

std::string peer_libdir() {
  const char* p = std::getenv("KVIK_PEER_DIR");
  if (!p || !*p)
    die("KVIK_PEER_DIR is not set: it names the folder where node-llama-cpp 3.21.1 is installed with its prebuilt "
        "CPU libraries (tools/peer_lib.sh says how to install it)");
  return std::string(p) + "/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64";
}

void* open_lib(const std::string& name) {
  void* h = dlopen((peer_libdir() + "/" + name).c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (!h)
    die(std::string(dlerror()) + " (is node-llama-cpp 3.21.1 installed in $KVIK_PEER_DIR? tools/peer_lib.sh says how)");
  return h;
}

template <typename F>
F sym(void* lib, const std::string& name) {
  void* f = dlsym(lib, name.c_str());
  if (!f) die("no symbol " + name + " in the peer's libraries");
  return reinterpret_cast<F>(f);
}

struct Bytes {
  std::vector<uint8_t> b;
  void u32(uint32_t v) { raw(&v, 4); }
  void raw(const void* p, size_t n) {
    b.insert(b.end(), static_cast<const uint8_t*>(p), static_cast<const uint8_t*>(p) + n);
  }
  void floats(const std::vector<float>& v) { raw(v.data(), v.size() * 4); }
  void save(const std::string& path) const {
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
    std::printf("wrote %s: %zu bytes from %s\n", path.c_str(), b.size(), peer_libdir().c_str());
  }
};

using Row = std::vector<double>;
Row gauss_row(PyRandom& r, int n, double s = 1.0, double mu = 0.0) {
  Row v(static_cast<size_t>(n));
  for (double& x : v) x = r.gauss(mu, s);
  return v;
}

// tools/make_kquant_fixture.py's file: "KVKQ", u32 n, f32 input[n]; per type (q4_K q5_K q6_K q8_K): u32 ggml type,
// u32 n_bytes, quantize_row_<type>_ref(input), f32 dequantize_row_<type>(...)[n]. Eight blocks of 256.
void kquant_fixture(const std::string& out) {
  void* lib = open_lib("libggml-base.so");
  PyRandom r(20240607);
  Row x;
  auto add = [&](const Row& b) { x.insert(x.end(), b.begin(), b.end()); };
  add(gauss_row(r, 256));
  Row b(256);
  for (double& v : b) v = r.gauss(0.3, 1) * 1000;
  add(b);
  for (double& v : b) v = r.uniform(-1, 1);
  add(b);
  add(Row(256, 0.0));
  add(Row(256, 0.75));
  Row spike(256, 0.0);
  spike[100] = 5.0;
  add(spike);
  for (double& v : b) v = -std::fabs(r.gauss(0, 0.02));
  add(b);
  for (double& v : b) v = std::pow(r.gauss(0, 1), 3.0);
  add(b);
  const std::vector<float> xin(x.begin(), x.end());
  const int64_t n = static_cast<int64_t>(xin.size());
  Bytes out_b;
  out_b.raw("KVKQ", 4), out_b.u32(static_cast<uint32_t>(n)), out_b.floats(xin);
  const struct {
    const char* name;
    uint32_t id, block_bytes;
  } types[] = {{"q4_K", 12, 144}, {"q5_K", 13, 176}, {"q6_K", 14, 210}, {"q8_K", 15, 292}};
  for (const auto& t : types) {
    std::vector<uint8_t> q(static_cast<size_t>(n / 256 * t.block_bytes));
    sym<void (*)(const float*, void*, int64_t)>(lib, std::string("quantize_row_") + t.name + "_ref")(xin.data(),
                                                                                                     q.data(), n);
    std::vector<float> y(static_cast<size_t>(n));
    sym<void (*)(const void*, float*, int64_t)>(lib, std::string("dequantize_row_") + t.name)(q.data(), y.data(), n);
    out_b.u32(t.id), out_b.u32(static_cast<uint32_t>(q.size())), out_b.raw(q.data(), q.size()), out_b.floats(y);
  }
  out_b.save(out);
}

// The 16 rows of tools/make_quant_fixture.py, drawn in the same order.
std::vector<Row> quant_rows(PyRandom& r) {
  const int C = 256;
  std::vector<Row> rows;
  rows.push_back(gauss_row(r, C));
  Row v = gauss_row(r, C, 1, 0.3);
  for (double& x : v) x *= 1000;
  rows.push_back(v);
  for (double& x : v) x = r.uniform(-1, 1);
  rows.push_back(v);
  rows.push_back(Row(C, 0.0));
  rows.push_back(Row(C, 0.75));
  Row spike(C, 0.0);
  spike[100] = 5.0;
  rows.push_back(spike);
  v = gauss_row(r, C, 0.02);
  for (double& x : v) x = -std::fabs(x);
  rows.push_back(v);
  v = gauss_row(r, C);
  for (double& x : v) x = std::pow(x, 3.0);
  rows.push_back(v);
  for (double& x : v) {
    const double sign = static_cast<double>(r.choice({-1, 1}));
    x = sign * r.uniform(1e-45, 1e-38);
  }
  rows.push_back(v);
  v = gauss_row(r, C);
  for (int i = 0; i < C; i += 37) v[i] *= r.choice({1e4, -3e5, 3e6});
  rows.push_back(v);
  for (int i = 0; i < C; ++i) v[i] = i % 11 ? 0.0 : r.uniform(-1e-30, 1e-30);
  rows.push_back(v);
  const Row g = gauss_row(r, C);
  v.assign(C, 0.0);
  std::copy(g.begin(), g.begin() + 128, v.begin() + 128);
  rows.push_back(v);
  v = gauss_row(r, C);
  for (int i = 0; i < C; ++i) v[i] *= std::pow(10.0, i / 32 - 4);
  rows.push_back(v);
  for (double& x : v) x = static_cast<double>(r.randint(-8, 8));
  rows.push_back(v);
  for (double& x : v) {
    const double u = r.uniform(6e4, 6.5e4);
    x = u * r.choice({-1, 1});
  }
  rows.push_back(v);
  for (int i = 0; i < C - 1; ++i) v[i] = r.uniform(0.001, 0.01);
  v[C - 1] = -0.005;
  rows.push_back(v);
  return rows;
}

// tools/make_quant_fixture.py's file (see tests/test_quantize.cpp): ggml_quantize_chunk per type, ggml's
// dequantizers, and the generic vec_dot against Q8_0/Q8_1 activations for the 32-element types.
void quant_fixture(const std::string& out) {
  void* base = open_lib("libggml-base.so");
  void* cpu = open_lib("libggml-cpu-x64.so");
  sym<void (*)()>(cpu, "ggml_cpu_init")();
  PyRandom r(20261201);
  const std::vector<Row> rows = quant_rows(r);
  const int64_t R = static_cast<int64_t>(rows.size()), C = 256, N = R * C;
  std::vector<float> x;
  for (const Row& row : rows) x.insert(x.end(), row.begin(), row.end());
  std::vector<float> act(static_cast<size_t>(N));
  for (float& a : act) a = static_cast<float>(r.gauss(0, 1));
  std::vector<uint8_t> act_q[2];
  for (int p = 0; p < 2; ++p) {
    act_q[p].resize(static_cast<size_t>(N / 32 * (p ? 36 : 34)));
    sym<void (*)(const float*, void*, int64_t)>(base, "quantize_row_q8_" + std::to_string(p) + "_ref")(
        act.data(), act_q[p].data(), N);
  }
  Bytes b;
  const struct {
    const char* name;
    uint32_t id, row_bytes;
    const char* deq;
    int partner;
  } types[] = {{"f16", 1, 512, "ggml_fp16_to_fp32_row", -1},   {"bf16", 30, 512, "ggml_bf16_to_fp32_row", -1},
               {"q8_0", 8, 8 * 34, "dequantize_row_q8_0", -1}, {"q4_0", 2, 8 * 18, "dequantize_row_q4_0", -1},
               {"q4_1", 3, 8 * 20, "dequantize_row_q4_1", 1},  {"q5_0", 6, 8 * 22, "dequantize_row_q5_0", 0},
               {"q5_1", 7, 8 * 24, "dequantize_row_q5_1", 1},  {"iq4_nl", 20, 8 * 18, "dequantize_row_iq4_nl", 0},
               {"q4_K", 12, 144, "dequantize_row_q4_K", -1},   {"q5_K", 13, 176, "dequantize_row_q5_K", -1},
               {"q6_K", 14, 210, "dequantize_row_q6_K", -1}};
  b.raw("KVQ2", 4), b.u32(static_cast<uint32_t>(R)), b.u32(static_cast<uint32_t>(C)), b.floats(x), b.floats(act);
  b.u32(static_cast<uint32_t>(std::size(types)));
  const auto chunk =
      sym<size_t (*)(int, const float*, void*, int64_t, int64_t, int64_t, const float*)>(base, "ggml_quantize_chunk");
  for (const auto& t : types) {
    std::vector<uint8_t> q(static_cast<size_t>(R) * t.row_bytes);
    if (chunk(static_cast<int>(t.id), x.data(), q.data(), 0, R, C, nullptr) != q.size())
      die(std::string("size of ") + t.name);
    std::vector<float> y(static_cast<size_t>(N));
    sym<void (*)(const void*, float*, int64_t)>(base, t.deq)(q.data(), y.data(), N);
    std::vector<float> dots;
    if (t.partner >= 0) {
      using Dot = void (*)(int, float*, size_t, const void*, size_t, const void*, size_t, int);
      const auto dot =
          sym<Dot>(cpu, std::string("ggml_vec_dot_") + t.name + "_q8_" + std::to_string(t.partner) + "_generic");
      const size_t abb = t.partner == 0 ? 34 : 36;
      for (int64_t i = 0; i < R; ++i) {
        float s = 0;
        dot(static_cast<int>(C), &s, 0, q.data() + i * t.row_bytes, 0, act_q[t.partner].data() + i * (C / 32) * abb, 0,
            1);
        dots.push_back(s);
      }
    }
    b.u32(t.id), b.u32(static_cast<uint32_t>(q.size())), b.raw(q.data(), q.size()), b.floats(y);
    b.u32(static_cast<uint32_t>(dots.size())), b.floats(dots);
  }
  b.save(out);
}

const std::map<std::string, int32_t> kMixes = {{"q8_0", 7},  {"q4_0", 2},    {"q4_1", 3},    {"q5_0", 8},
                                               {"q5_1", 9},  {"iq4_nl", 25}, {"q4_k_s", 14}, {"q4_k_m", 15},
                                               {"q4_k", 15}, {"q5_k_s", 16}, {"q5_k_m", 17}, {"q5_k", 17},
                                               {"q6_k", 18}, {"f16", 1},     {"bf16", 32}};
const std::map<std::string, int32_t> kGgmlTypes = {{"f32", 0},   {"f16", 1},   {"q4_0", 2},    {"q4_1", 3},
                                                   {"q5_0", 6},  {"q5_1", 7},  {"q8_0", 8},    {"q4_k", 12},
                                                   {"q5_k", 13}, {"q6_k", 14}, {"iq4_nl", 20}, {"bf16", 30}};

struct QuantizeArgs {
  std::string mix, output_type, embd_type;
  int threads = 0;
  bool leave_output = false;
};

int32_t lookup(const std::map<std::string, int32_t>& m, const std::string& k, const char* what) {
  const auto it = m.find(k);
  if (it == m.end()) die(std::string("unknown ") + what + " '" + k + "'");
  return it->second;
}

// llama_model_quantize() with default parameters but the ones given; returns its wall time in seconds.
double llama_quantize(const std::string& in, const std::string& out, const QuantizeArgs& a) {
  static void* lib = [] {
    open_lib("libggml-base.so");
    return open_lib("libllama.v0.4.0.so");
  }();
  // llama.h: i32 nthread, i32 ftype, i32 output_tensor_type, i32 token_embedding_type, bool allow_requantize,
  // bool quantize_output_tensor, ... (returned by value, so through a hidden pointer).
  alignas(8) uint8_t p[512] = {};
  sym<void* (*)(void*)>(lib, "llama_model_quantize_default_params")(p);
  const int32_t ints[] = {a.threads, lookup(kMixes, a.mix, "mix")};
  std::memcpy(p, ints, sizeof ints);
  if (!a.output_type.empty()) {
    const int32_t t = lookup(kGgmlTypes, a.output_type, "type");
    std::memcpy(p + 8, &t, 4);
  }
  if (!a.embd_type.empty()) {
    const int32_t t = lookup(kGgmlTypes, a.embd_type, "type");
    std::memcpy(p + 12, &t, 4);
  }
  if (a.leave_output) p[17] = 0;
  const auto t0 = std::chrono::steady_clock::now();
  if (sym<uint32_t (*)(const char*, const char*, const void*)>(lib, "llama_model_quantize")(in.c_str(), out.c_str(),
                                                                                            p) != 0)
    die("llama_model_quantize failed: " + in + " -> " + out + " (" + a.mix + ")");
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::vector<uint8_t> read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string sha(std::span<const uint8_t> b) { return kvik::test::sha256_hex(b); }

// One run of tools/make_quantize_fixture.py: the output file's size and SHA-256, and per tensor its type and the
// first 16 hex digits of its data's SHA-256.
nlohmann::ordered_json fixture_entry(const std::string& model, const QuantizeArgs& a, const fs::path& tmp) {
  const std::string dst = (tmp / "out.gguf").string();
  QuantizeArgs run = a;
  run.threads = 2;
  llama_quantize(model, dst, run);
  const auto data = read_all(dst);
  nlohmann::ordered_json opts = nlohmann::ordered_json::object();
  if (a.leave_output) opts["leave_output"] = true;
  if (!a.output_type.empty()) opts["output_type"] = a.output_type;
  if (!a.embd_type.empty()) opts["embd_type"] = a.embd_type;
  nlohmann::ordered_json tensors = nlohmann::ordered_json::array();
  const auto g = kvik::GgufFile::open(dst);
  for (const auto& t : g->tensors()) {
    std::string type(kvik::dtype_name(t.dtype));
    for (auto& ch : type) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    tensors.push_back({{"name", t.name}, {"type", type}, {"sha256_16", sha({t.data, t.nbytes}).substr(0, 16)}});
  }
  fs::remove(dst);
  return {{"mix", a.mix}, {"options", opts}, {"size", data.size()}, {"sha256", sha(data)}, {"tensors", tensors}};
}

void quantize_fixture(const std::string& kvik, const std::string& out) {
  const std::string stories = fs::weakly_canonical(fs::path(KVIK_SOURCE_DIR) / "models/stories260K.gguf").string();
  char tmpl[] = "/tmp/kvik_peer_XXXXXX";
  if (!mkdtemp(tmpl)) die("mkdtemp");
  const fs::path tmp(tmpl);
  const std::vector<std::string> shape = {"--dim",      "256", "--layers", "8",   "--heads", "8",
                                          "--kv-heads", "2",   "--ff",     "768", "--vocab", "512"};
  const std::vector<std::pair<std::string, std::vector<std::string>>> synth = {
      {"synth_f32", {"--type", "f32", "--seed", "7"}},
      {"synth_f16", {"--type", "f16", "--seed", "8"}},
      {"synth_bf16", {"--type", "bf16", "--seed", "9"}}};
  nlohmann::ordered_json fixture = {
      {"how",
       "llama_model_quantize() of llama.cpp (libllama.so of node-llama-cpp 3.21.1, the peer), default parameters, no "
       "importance matrix; tools/make_quantize_fixture.py"},
      {"models", nlohmann::ordered_json::array()}};
  struct Model {
    std::string name, path;
    std::vector<std::string> args;
  };
  std::vector<Model> models = {{"stories260K", stories, {}}};
  for (const auto& [name, args] : synth) {
    std::vector<std::string> all = shape;
    all.insert(all.end(), args.begin(), args.end());
    const std::string path = (tmp / (name + ".gguf")).string();
    std::string cmd = kvik + " synth " + path + " --tokenizer-from " + stories;
    for (const auto& s : all) cmd += " " + s;
    if (std::system((cmd + " >/dev/null 2>&1").c_str()) != 0) die("failed: " + cmd);
    models.push_back({name, path, all});
  }
  for (const Model& m : models) {
    const auto raw = read_all(m.path);
    nlohmann::ordered_json runs = nlohmann::ordered_json::array();
    for (const char* mix : {"q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl", "q4_k_s", "q4_k_m", "q5_k_s", "q5_k_m",
                            "q6_k", "f16", "bf16"})
      runs.push_back(fixture_entry(m.path, {mix}, tmp));
    if (m.name == "stories260K" || m.name == "synth_f32") {
      runs.push_back(fixture_entry(m.path, {"q4_k_m", "", "", 0, true}, tmp));
      runs.push_back(fixture_entry(m.path, {"q4_0", "q5_1", "iq4_nl"}, tmp));
      runs.push_back(fixture_entry(m.path, {"q5_k_s", "", "q8_0"}, tmp));
    }
    nlohmann::ordered_json entry = {{"name", m.name}, {"input_sha256", sha(raw)}, {"input_size", raw.size()}};
    if (!m.args.empty()) entry["synth"] = m.args;
    entry["runs"] = runs;
    fixture["models"].push_back(entry);
    std::fprintf(stderr, "%s done\n", m.name.c_str());
  }
  fs::remove_all(tmp);
  std::ofstream(out) << fixture.dump(0);
  std::fprintf(stderr, "wrote %s\n", out.c_str());
}

int quantize_cmd(int argc, char** argv) {
  if (argc < 5) die("usage: kvik_peer_tool quantize IN.gguf OUT.gguf MIX [--threads N] [--leave-output-tensor] ...");
  QuantizeArgs a;
  a.mix = argv[4];
  for (int i = 5; i < argc; ++i) {
    const std::string f = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) die(f + " needs a value");
      return argv[++i];
    };
    if (f == "--threads")
      a.threads = std::stoi(value());
    else if (f == "--leave-output-tensor")
      a.leave_output = true;
    else if (f == "--output-tensor-type")
      a.output_type = value();
    else if (f == "--token-embedding-type")
      a.embd_type = value();
    else
      die("unknown flag " + f);
  }
  std::printf("%.6f\n", llama_quantize(argv[2], argv[3], a));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string cmd = argc > 1 ? argv[1] : "";
  if (cmd == "quantize") return quantize_cmd(argc, argv);
  if (cmd == "kquant-fixture" && argc == 3) return kquant_fixture(argv[2]), 0;
  if (cmd == "quant-fixture" && argc == 3) return quant_fixture(argv[2]), 0;
  if (cmd == "quantize-fixture" && argc == 4) return quantize_fixture(argv[2], argv[3]), 0;
  die("usage: kvik_peer_tool quantize IN OUT MIX [flags] | kquant-fixture OUT.bin | quant-fixture OUT.bin | "
      "quantize-fixture KVIK OUT.json");
}
