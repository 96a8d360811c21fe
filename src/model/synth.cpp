#include "model/synth.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <numbers>
#include <string_view>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "formats/gguf.h"
#include "model/model_config.h"

namespace kvik {
namespace {

// llama.cpp's token types (llama_token_type).
constexpr int32_t kTokenNormal = 1, kTokenUnknown = 2, kTokenControl = 3, kTokenUnused = 5, kTokenByte = 6;

// Deterministic normal samples: splitmix64 for uniform bits, Box-Muller for the normal pair.
class NormalRng {
 public:
  explicit NormalRng(uint64_t seed) : state_(seed) {}
  uint64_t next_u64() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in (0, 1]: never 0, so log() is finite.
  double uniform() { return (static_cast<double>(next_u64() >> 11) + 1.0) * 0x1.0p-53; }
  float normal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double r = std::sqrt(-2.0 * std::log(uniform()));
    const double a = 2.0 * std::numbers::pi * uniform();
    spare_ = static_cast<float>(r * std::sin(a));
    has_spare_ = true;
    return static_cast<float>(r * std::cos(a));
  }

 private:
  uint64_t state_;
  float spare_ = 0;
  bool has_spare_ = false;
};

// Each tensor gets its own stream (seed mixed with the name), so its values do not depend on the order of writing.
uint64_t tensor_seed(uint64_t seed, std::string_view name) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
  for (char ch : name) h = (h ^ static_cast<uint8_t>(ch)) * 0x100000001b3ull;
  return seed * 0x9e3779b97f4a7c15ull ^ h;
}

uint32_t llama_file_type(DType t) {
  switch (t) {
    case DType::F32: return 0;    // LLAMA_FTYPE_ALL_F32
    case DType::F16: return 1;    // LLAMA_FTYPE_MOSTLY_F16
    case DType::Q4_0: return 2;   // LLAMA_FTYPE_MOSTLY_Q4_0
    case DType::Q8_0: return 7;   // LLAMA_FTYPE_MOSTLY_Q8_0
    case DType::BF16: return 32;  // LLAMA_FTYPE_MOSTLY_BF16
    case DType::Q4_K: return 14;  // LLAMA_FTYPE_MOSTLY_Q4_K_S (15, Q4_K_M, for the mix)
    case DType::Q5_K: return 16;  // LLAMA_FTYPE_MOSTLY_Q5_K_S
    case DType::Q6_K: return 18;  // LLAMA_FTYPE_MOSTLY_Q6_K
    default:
      fail("--type {} is not supported by synth (f32, f16, bf16, q8_0, q4_0, q4_k, q5_k, q6_k, q4_k_m)", dtype_name(t));
  }
}

// llama.cpp's use_more_bits(i_layer, n_layers) for the Q4_K_M / Q5_K_M mixes.
bool use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

void validate(const SynthOptions& o, int head_dim) {
  if (o.out_path.empty()) fail("synth: no output path given");
  auto positive = [](int v, std::string_view flag) {
    if (v <= 0) fail("synth: {} {} must be positive", flag, v);
  };
  positive(o.dim, "--dim");
  positive(o.layers, "--layers");
  positive(o.heads, "--heads");
  positive(o.kv_heads, "--kv-heads");
  positive(o.ff, "--ff");
  positive(o.vocab, "--vocab");
  positive(o.context, "--context");
  positive(head_dim, "--head-dim");
  llama_file_type(o.type);
  if (o.q4_k_m && o.type != DType::Q4_K) fail("synth: the q4_k_m mix needs --type q4_k");
  if (o.head_dim == 0 && o.dim % o.heads != 0)
    fail("synth: --dim {} must be a multiple of --heads {} (or set --head-dim)", o.dim, o.heads);
  if (o.heads % o.kv_heads != 0) fail("synth: --heads {} must be a multiple of --kv-heads {}", o.heads, o.kv_heads);
  if (head_dim % 2 != 0) fail("synth: --head-dim {} must be even (RoPE rotates pairs)", head_dim);
  if (!(o.rms_eps > 0)) fail("synth: --rms-eps {} must be positive", o.rms_eps);
  if (!(o.rope_freq_base > 0)) fail("synth: --rope-freq-base {} must be positive", o.rope_freq_base);
  if (!(o.output_scale > 0)) fail("synth: --output-scale {} must be positive", o.output_scale);
  const int64_t block = traits(o.type).block_size;
  const std::string_view tn = dtype_name(o.type);
  if (o.dim % block != 0) fail("synth: --dim {} must be a multiple of {} for {}", o.dim, block, tn);
  if (o.ff % block != 0) fail("synth: --ff {} must be a multiple of {} for {}", o.ff, block, tn);
  if (int64_t(o.heads) * head_dim % block != 0)
    fail("synth: --heads {} × --head-dim {} = {} must be a multiple of {} for {}", o.heads, head_dim,
         int64_t(o.heads) * head_dim, block, tn);
  const bool moe = o.arch == "mixtral" || o.arch == "qwen3moe";
  if (o.arch != "llama" && !moe) fail("synth: --arch '{}' is not one of llama, mixtral, qwen3moe for a GGUF", o.arch);
  if (moe != (o.experts > 0)) fail("synth: --experts is needed with --arch mixtral or qwen3moe, and only there");
  if (moe && (o.experts_used <= 0 || o.experts_used > o.experts))
    fail("synth: --experts-used {} must be in 1..--experts {}", o.experts_used, o.experts);
  if (o.expert_ff < 0 || (o.expert_ff > 0 && o.arch != "qwen3moe"))
    fail("synth: --expert-ff {} is for --arch qwen3moe (Mixtral's experts are --ff wide)", o.expert_ff);
  if (o.expert_ff % block != 0) fail("synth: --expert-ff {} must be a multiple of {} for {}", o.expert_ff, block, tn);
  if (o.sliding_window < 0) fail("synth: --sliding-window {} must be positive (or 0: none)", o.sliding_window);
  if (o.tokenizer_from.empty() && o.vocab < 262)
    fail("synth: --vocab {} must be at least 262 for the built-in byte vocabulary (or use --tokenizer-from)", o.vocab);
}

// A random tensor: a [rows, cols] matrix (GGUF shape [cols, rows]), a vector [cols] (rows 0) or E stacked
// matrices (experts > 0: GGUF shape [cols, rows, E], llama.cpp's ffn_*_exps) of N(mean, std) values in `type`.
struct RandomTensor {
  std::string name;
  DType type;
  int64_t cols, rows, experts;
  float mean, std;
};

// Streams the tensor's bytes to `sink`: values drawn row after row from the tensor's own stream, each chunk of
// rows quantized in parallel (row by row, so the bytes do not depend on the threads), no copy of the whole tensor.
void write_random(const RandomTensor& t, uint64_t seed, const GgufWriter::Sink& sink) {
  constexpr int64_t kChunkRows = 256;
  NormalRng rng(tensor_seed(seed, t.name));
  const int64_t rows = std::max<int64_t>(t.rows, 1) * std::max<int64_t>(t.experts, 1), cols = t.cols;
  const size_t rb = *row_bytes(t.type, cols);
  std::vector<float> x(static_cast<size_t>(std::min(rows, kChunkRows) * cols));
  std::vector<uint8_t> out(rb * static_cast<size_t>(std::min(rows, kChunkRows)));
  for (int64_t r0 = 0; r0 < rows; r0 += kChunkRows) {
    const int64_t n = std::min(kChunkRows, rows - r0);
    for (int64_t i = 0; i < n * cols; ++i) x[i] = t.mean + t.std * rng.normal();
    ThreadPool::global().parallel_for(n, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r)
        quantize_row(t.type, &x[r * cols], out.data() + rb * static_cast<size_t>(r), cols);
    });
    sink(std::span<const uint8_t>(out.data(), rb * static_cast<size_t>(n)));
  }
}

// A minimal SentencePiece-style ("llama") vocabulary: specials, the 256 byte fallbacks, "▁", then single ASCII
// characters while they fit, padded with unused tokens.
void write_byte_vocab(GgufWriter& w, int vocab) {
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<float> scores = {0, 0, 0};
  std::vector<int32_t> types = {kTokenUnknown, kTokenControl, kTokenControl};
  for (int b = 0; b < 256; ++b) {
    tokens.push_back(fmt::format("<0x{:02X}>", b));
    scores.push_back(0);
    types.push_back(kTokenByte);
  }
  tokens.push_back("\xE2\x96\x81");  // "▁", SentencePiece's space
  scores.push_back(-1);
  types.push_back(kTokenNormal);
  for (int ch = 0x21; ch < 0x7F && static_cast<int>(tokens.size()) < vocab; ++ch) {
    tokens.push_back(std::string(1, static_cast<char>(ch)));
    scores.push_back(-2.0f - static_cast<float>(ch - 0x21) * 0.01f);
    types.push_back(kTokenNormal);
  }
  while (static_cast<int>(tokens.size()) < vocab) {
    tokens.push_back(fmt::format("<unused{}>", tokens.size()));
    scores.push_back(0);
    types.push_back(kTokenUnused);
  }
  w.set_string("tokenizer.ggml.model", "llama");
  w.set_array_string("tokenizer.ggml.tokens", tokens);
  w.set_array_f32("tokenizer.ggml.scores", scores);
  w.set_array_i32("tokenizer.ggml.token_type", types);
  w.set_u32("tokenizer.ggml.bos_token_id", 1);
  w.set_u32("tokenizer.ggml.eos_token_id", 2);
  w.set_u32("tokenizer.ggml.unknown_token_id", 0);
}

// Copies every tokenizer.ggml.* key of `path`; tokens, scores and token types are padded to `vocab`.
void copy_vocab(GgufWriter& w, const std::string& path, int vocab) {
  auto src = GgufFile::open(path);
  const GgufValue& tok = src->require_array("tokenizer.ggml.tokens", GgufType::STRING);
  const uint64_t n = tok.count;
  if (n > static_cast<uint64_t>(vocab))
    fail("synth: --vocab {} is smaller than the {} tokens of --tokenizer-from {}", vocab, n, path);
  const size_t pad = static_cast<size_t>(vocab) - static_cast<size_t>(n);
  for (const auto& [key, v] : src->metadata()) {
    if (!key.starts_with("tokenizer.ggml.")) continue;
    const bool padded =
        key == "tokenizer.ggml.tokens" || key == "tokenizer.ggml.scores" || key == "tokenizer.ggml.token_type";
    if (pad == 0 || !padded) {
      w.set_raw(key, v.raw);
      continue;
    }
    if (v.type != GgufType::ARRAY || v.count != n)
      fail("synth: {}: '{}' should be an array of {} entries like tokenizer.ggml.tokens", path, key, n);
    if (key == "tokenizer.ggml.tokens") {
      std::vector<std::string> t(v.strings.begin(), v.strings.end());
      for (size_t i = 0; i < pad; ++i) t.push_back(fmt::format("<unused{}>", n + i));
      w.set_array_string(key, t);
    } else if (key == "tokenizer.ggml.scores") {
      if (v.elem_type == GgufType::STRING) fail("synth: {}: '{}' is not numeric", path, key);
      std::vector<float> s;
      s.reserve(vocab);
      for (uint64_t k = 0; k < n; ++k) s.push_back(static_cast<float>(v.array_f(k)));
      s.resize(vocab, 0.0f);
      w.set_array_f32(key, s);
    } else {
      if (v.elem_type == GgufType::STRING) fail("synth: {}: '{}' is not numeric", path, key);
      std::vector<int32_t> s;
      s.reserve(vocab);
      for (uint64_t k = 0; k < n; ++k) s.push_back(static_cast<int32_t>(v.array_i(k)));
      s.resize(vocab, kTokenUnused);
      w.set_array_i32(key, s);
    }
  }
}

// ---- --embed-from: a bigger shape that computes a small model's function ----

// A small model's matrix as floats, row-major [rows][cols] (GGUF shape [cols, rows]).
struct Matrix {
  int64_t rows = 0, cols = 0;
  std::vector<float> v;
  const float* row(int64_t r) const { return v.data() + r * cols; }
};

Matrix read_matrix(const GgufFile& f, const std::string& name) {
  const GgufTensorInfo* t = f.find_tensor(name);
  if (!t) fail("synth --embed-from {}: no tensor '{}'", f.path(), name);
  Matrix m;
  m.cols = t->shape.at(0);
  m.rows = t->shape.size() > 1 ? t->shape[1] : 1;
  m.v.resize(static_cast<size_t>(m.rows * m.cols));
  const size_t rb = *row_bytes(t->dtype, m.cols);
  for (int64_t r = 0; r < m.rows; ++r) dequantize_row(t->dtype, t->data + rb * r, m.v.data() + r * m.cols, m.cols);
  return m;
}

// Writes a [rows, cols] tensor (rows 0: a vector) whose row r is zero but for what fill(r, row) puts in it.
void add_filled(GgufWriter& w, const std::string& name, DType type, int64_t cols, int64_t rows,
                const std::function<void(int64_t, float*)>& fill) {
  const bool vector = rows == 0;
  if (vector) rows = 1;
  const size_t rb = *row_bytes(type, cols);
  std::vector<uint8_t> data(rb * static_cast<size_t>(rows));
  std::vector<float> row(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    std::fill(row.begin(), row.end(), 0.0f);
    fill(r, row.data());
    quantize_row(type, row.data(), data.data() + rb * static_cast<size_t>(r), cols);
  }
  std::vector<int64_t> shape = {cols};
  if (!vector) shape.push_back(rows);
  w.add_tensor(name, type, std::move(shape), data);
}

// Where the small model's coordinates go in the big one. Residual and MLP coordinates keep their index (the rest
// stay zero). Small query head i goes to big head (i / g)·G + i % g (g, G: query heads per KV head), so it still
// reads KV head i / g; within a head, dimension 2p + e (rotated pair p) goes to 2·(f·p) + e with f = d_h / d_h',
// the big pair whose rotation frequency θ^(−2fp / d_h) equals the small one's θ^(−2p / d_h').
struct EmbedMap {
  int64_t hd_s, hd, group_s, group, f;
  int64_t in_head(int64_t t) const { return (t / 2) * 2 * f + t % 2; }
  int64_t q(int64_t j) const {
    const int64_t i = j / hd_s;
    return ((i / group_s) * group + i % group_s) * hd + in_head(j % hd_s);
  }
  int64_t kv(int64_t j) const { return (j / hd_s) * hd + in_head(j % hd_s); }
};

void check_embeddable(const SynthOptions& o, const ModelConfig& s, int64_t hd) {
  if (o.arch != "llama" || o.experts > 0 || o.sliding_window > 0)
    fail("synth --embed-from {}: the big model is a plain llama (no --arch, --experts or --sliding-window)",
         o.embed_from);
  const int64_t group_s = s.n_heads / s.n_kv_heads, group = o.heads / o.kv_heads;
  auto need = [&](bool ok, const char* what, int64_t big, int64_t small) {
    if (!ok) fail("synth --embed-from {}: {} {} cannot hold the small model's {}", o.embed_from, what, big, small);
  };
  need(o.dim >= s.dim, "--dim", o.dim, s.dim);
  need(o.layers >= s.n_layers, "--layers", o.layers, s.n_layers);
  need(o.kv_heads >= s.n_kv_heads, "--kv-heads", o.kv_heads, s.n_kv_heads);
  need(group >= group_s, "query heads per KV head", group, group_s);
  need(hd >= s.head_dim && hd % s.head_dim == 0 && s.head_dim % 2 == 0, "--head-dim (a multiple of the small one)", hd,
       s.head_dim);
  need(o.ff >= s.ff_dim, "--ff", o.ff, s.ff_dim);
  need(o.vocab >= s.vocab_size, "--vocab", o.vocab, s.vocab_size);
  if (s.arch != "llama" || s.attn_bias || s.qk_norm || !s.rope_freq_factors.empty() || s.rope_dim != s.head_dim)
    fail("synth --embed-from {}: only plain llama models embed (no biases, q/k norm or rope scaling)", o.embed_from);
}

// The big model: the small one's layers first, then layers whose attention and MLP outputs are zero (the residual
// passes through). RMSNorm over D coordinates of which d are nonzero is √(D/d) times the small one's, so the norm
// weights are scaled by √(d/D) and ε by d/D; scores over d_h-dim heads are scaled by 1/√d_h instead of 1/√d_h', so
// the query rows are scaled by √(d_h/d_h'). Big-vocabulary rows past the small vocabulary are zero (logit 0).
void write_embedded(GgufWriter& w, const SynthOptions& o, const GgufFile& f, const ModelConfig& s, int64_t hd) {
  const EmbedMap map{s.head_dim, hd, s.n_heads / s.n_kv_heads, o.heads / o.kv_heads, hd / s.head_dim};
  const float norm_scale = std::sqrt(static_cast<float>(s.dim) / static_cast<float>(o.dim));
  const float q_scale = std::sqrt(static_cast<float>(hd) / static_cast<float>(s.head_dim));
  const int64_t q_dim = int64_t(o.heads) * hd, kv_dim = int64_t(o.kv_heads) * hd;
  const DType t = o.type;
  auto rows_from = [&](const Matrix& m, float scale, auto&& big_row_of) {  // small row j → big row big_row_of(j)
    return [&m, scale, big_row_of](int64_t r, float* row) {
      for (int64_t j = 0; j < m.rows; ++j)
        if (big_row_of(j) == r)
          for (int64_t c = 0; c < m.cols; ++c) row[c] = scale * m.row(j)[c];
    };
  };
  auto same = [](int64_t j) { return j; };
  auto vector_from = [&](const Matrix& m) {
    return [&m, norm_scale](int64_t, float* row) {
      for (int64_t c = 0; c < m.cols; ++c) row[c] = norm_scale * m.v[static_cast<size_t>(c)];
    };
  };
  const Matrix emb = read_matrix(f, "token_embd.weight");
  const Matrix out = f.find_tensor("output.weight") ? read_matrix(f, "output.weight") : emb;
  const Matrix out_norm = read_matrix(f, "output_norm.weight");
  add_filled(w, "token_embd.weight", t, o.dim, o.vocab, rows_from(emb, 1.0f, same));
  add_filled(w, "output_norm.weight", DType::F32, o.dim, 0, vector_from(out_norm));
  add_filled(w, "output.weight", t, o.dim, o.vocab, rows_from(out, 1.0f, same));
  auto nothing = [](int64_t, float*) {};
  for (int l = 0; l < o.layers; ++l) {
    const std::string p = fmt::format("blk.{}.", l);
    if (l >= s.n_layers) {
      for (auto [name, cols, rows] : {std::tuple{"attn_q", o.dim, q_dim},
                                      {"attn_k", o.dim, kv_dim},
                                      {"attn_v", o.dim, kv_dim},
                                      {"attn_output", q_dim, int64_t(o.dim)},
                                      {"ffn_gate", o.dim, int64_t(o.ff)},
                                      {"ffn_up", o.dim, int64_t(o.ff)},
                                      {"ffn_down", int64_t(o.ff), int64_t(o.dim)}})
        add_filled(w, p + name + ".weight", t, cols, rows, nothing);
      add_filled(w, p + "attn_norm.weight", DType::F32, o.dim, 0, nothing);
      add_filled(w, p + "ffn_norm.weight", DType::F32, o.dim, 0, nothing);
      continue;
    }
    const Matrix wq = read_matrix(f, p + "attn_q.weight"), wk = read_matrix(f, p + "attn_k.weight");
    const Matrix wv = read_matrix(f, p + "attn_v.weight"), wo = read_matrix(f, p + "attn_output.weight");
    const Matrix wg = read_matrix(f, p + "ffn_gate.weight"), wu = read_matrix(f, p + "ffn_up.weight");
    const Matrix wd = read_matrix(f, p + "ffn_down.weight");
    const Matrix an = read_matrix(f, p + "attn_norm.weight"), fn = read_matrix(f, p + "ffn_norm.weight");
    add_filled(w, p + "attn_norm.weight", DType::F32, o.dim, 0, vector_from(an));
    add_filled(w, p + "attn_q.weight", t, o.dim, q_dim, rows_from(wq, q_scale, [&](int64_t j) { return map.q(j); }));
    add_filled(w, p + "attn_k.weight", t, o.dim, kv_dim, rows_from(wk, 1.0f, [&](int64_t j) { return map.kv(j); }));
    add_filled(w, p + "attn_v.weight", t, o.dim, kv_dim, rows_from(wv, 1.0f, [&](int64_t j) { return map.kv(j); }));
    add_filled(w, p + "attn_output.weight", t, q_dim, o.dim, [&](int64_t r, float* row) {
      if (r < wo.rows)
        for (int64_t c = 0; c < wo.cols; ++c) row[map.q(c)] = wo.row(r)[c];
    });
    add_filled(w, p + "ffn_norm.weight", DType::F32, o.dim, 0, vector_from(fn));
    add_filled(w, p + "ffn_gate.weight", t, o.dim, o.ff, rows_from(wg, 1.0f, same));
    add_filled(w, p + "ffn_up.weight", t, o.dim, o.ff, rows_from(wu, 1.0f, same));
    add_filled(w, p + "ffn_down.weight", t, o.ff, o.dim, rows_from(wd, 1.0f, same));
  }
}
// ---- --induction: a hand-built two-layer model that copies ----

// The induction model's fixed shape and residual layout (width 128): E = the token's code, one constant coordinate,
// P1 / P2 = the codes of the previous and the one-before-previous tokens (written by layer 0), C = the code of the
// predicted token (written by layer 1; the only coordinates the output head reads).
struct InductionLayout {
  static constexpr int kDim = 128, kHeads = 2, kHeadDim = 64, kLayers = 2, kFf = 32, kCodeBits = 20;
  static constexpr int kE = 0, kConst = 20, kP1 = 32, kP2 = 64, kC = 96;
  static constexpr float kRopeBase = 1e12f;  // pairs 0-7 turn fast (position heads), pairs 12-31 hardly at all
  static constexpr int kPositionPairs = 8, kContentPair = 12;
};

// `n` binary words of kCodeBits bits, any two at Hamming distance ≥ 7 (the greedy lexicode): as ±1 vectors, a word
// dotted with itself gives 20 and with any other at most 6.
std::vector<uint32_t> induction_code(int n) {
  constexpr int kDistance = 7;
  std::vector<uint32_t> words;
  for (uint32_t v = 0; v < (1u << InductionLayout::kCodeBits) && static_cast<int>(words.size()) < n; ++v) {
    bool far = true;
    for (uint32_t w : words) far = far && std::popcount(w ^ v) >= kDistance;
    if (far) words.push_back(v);
  }
  if (static_cast<int>(words.size()) < n)
    fail("synth --induction: a vocabulary of {} tokens is too large (at most {})", n, words.size());
  return words;
}

// Layer 0, head h ∈ {0, 1}, attends to the position h + 1 back: its query and key live on the constant coordinate
// and, rotated by RoPE pair p, score Σ_p α·κ·cos(θ_p (Δ − h − 1)), largest at Δ = h + 1 by a margin of 0.57 α·κ
// over every other Δ < 8192 (θ_p = base^(−p/32)). Its value is the token's code, written to P1 (h 0) or P2 (h 1).
// Layer 1, head 0, matches [code(t_i), code(t_{i−1})] against [P1, P2] = [code(t_{j−1}), code(t_{j−2})] on the slow
// pairs: 40 where both tokens agree, at most 26 otherwise. Its value, code(t_j), goes to C: the token that followed
// the last two tokens' earlier occurrence. The MLPs are zero. The output head scores each token's code against C.
void write_induction(GgufWriter& w, const SynthOptions& o) {
  using L = InductionLayout;
  const std::vector<uint32_t> code = induction_code(o.vocab);
  auto bit = [&](int64_t t, int c) { return ((code[static_cast<size_t>(t)] >> c) & 1) ? 1.0f : -1.0f; };
  // RMS of the residual entering layer 0 (code and constant) and layer 1 (+ P1, P2); the norms' weights are 1 and
  // the projections undo the RMS. Scores (÷ √64): positions 52.5 at the peak, a margin of 30; a two-token match 80,
  // anything else at most 52. The output norm sees RMS √(81/128), so the predicted token's logit leads by ≥ 35.
  const float r0 = std::sqrt(21.0f / L::kDim), r1 = std::sqrt(61.0f / L::kDim);
  constexpr float kPosAmp = 20.5f, kMatch = 16.0f, kOut = 2.0f;
  const DType f32 = DType::F32;
  add_filled(w, "token_embd.weight", f32, L::kDim, o.vocab, [&](int64_t t, float* row) {
    for (int c = 0; c < L::kCodeBits; ++c) row[L::kE + c] = bit(t, c);
    row[L::kConst] = 1.0f;
  });
  add_filled(w, "output_norm.weight", f32, L::kDim, 0, [](int64_t, float* row) {
    for (int c = 0; c < L::kDim; ++c) row[c] = 1.0f;
  });
  add_filled(w, "output.weight", f32, L::kDim, o.vocab, [&](int64_t t, float* row) {
    for (int c = 0; c < L::kCodeBits; ++c) row[L::kC + c] = kOut * bit(t, c);
  });
  auto ones = [](int64_t, float* row) {
    for (int c = 0; c < L::kDim; ++c) row[c] = 1.0f;
  };
  auto nothing = [](int64_t, float*) {};
  const int64_t qd = int64_t(L::kHeads) * L::kHeadDim;
  for (int l = 0; l < L::kLayers; ++l) {
    const std::string p = fmt::format("blk.{}.", l);
    const bool position = l == 0;
    const float r = position ? r0 : r1;
    add_filled(w, p + "attn_norm.weight", f32, L::kDim, 0, ones);
    add_filled(w, p + "attn_q.weight", f32, L::kDim, qd, [&](int64_t row_i, float* row) {
      const int64_t h = row_i / L::kHeadDim, d = row_i % L::kHeadDim, pair = d / 2;
      if (position) {  // q̃_p = α·e^(−iθ_p·(h+1)) on the constant coordinate
        if (pair >= L::kPositionPairs) return;
        const double angle = std::pow(double(L::kRopeBase), -double(pair) / 32.0) * double(h + 1);
        row[L::kConst] = r * kPosAmp * static_cast<float>(d % 2 == 0 ? std::cos(angle) : -std::sin(angle));
      } else if (h == 0 && pair >= L::kContentPair) {  // [code(t_i), code(t_{i−1})]
        const int64_t k = d - 2 * L::kContentPair;
        row[k < L::kCodeBits ? L::kE + k : L::kP1 + (k - L::kCodeBits)] = r * kMatch;
      }
    });
    add_filled(w, p + "attn_k.weight", f32, L::kDim, qd, [&](int64_t row_i, float* row) {
      const int64_t h = row_i / L::kHeadDim, d = row_i % L::kHeadDim, pair = d / 2;
      if (position) {  // k̃_p = κ
        if (pair < L::kPositionPairs && d % 2 == 0) row[L::kConst] = r * kPosAmp;
      } else if (h == 0 && pair >= L::kContentPair) {  // [code(t_{j−1}), code(t_{j−2})]
        const int64_t k = d - 2 * L::kContentPair;
        row[k < L::kCodeBits ? L::kP1 + k : L::kP2 + (k - L::kCodeBits)] = r;
      }
    });
    add_filled(w, p + "attn_v.weight", f32, L::kDim, qd, [&](int64_t row_i, float* row) {
      const int64_t h = row_i / L::kHeadDim, d = row_i % L::kHeadDim;
      if ((position || h == 0) && d < L::kCodeBits) row[L::kE + d] = r;  // the token's own code
    });
    add_filled(w, p + "attn_output.weight", f32, qd, L::kDim, [&](int64_t row_i, float* row) {
      for (int64_t h = 0; h < L::kHeads; ++h) {
        const int64_t dst = position ? (h == 0 ? L::kP1 : L::kP2) : (h == 0 ? L::kC : -1);
        if (dst >= 0 && row_i >= dst && row_i < dst + L::kCodeBits) row[h * L::kHeadDim + (row_i - dst)] = 1.0f;
      }
    });
    add_filled(w, p + "ffn_norm.weight", f32, L::kDim, 0, ones);
    add_filled(w, p + "ffn_gate.weight", f32, L::kDim, L::kFf, nothing);
    add_filled(w, p + "ffn_up.weight", f32, L::kDim, L::kFf, nothing);
    add_filled(w, p + "ffn_down.weight", f32, L::kFf, L::kDim, nothing);
  }
}

// The {arch}.* keys: llama.cpp's llama (Mixtral: + expert_count / expert_used_count) or qwen3moe.
void write_synth_metadata(GgufWriter& w, const SynthOptions& o, int hd) {
  const std::string gguf_arch = o.arch == "qwen3moe" ? "qwen3moe" : "llama";
  const std::string a = gguf_arch + ".";
  const bool moe = o.experts > 0;
  w.set_string("general.architecture", gguf_arch);
  w.set_string("general.name",
               o.induction
                   ? std::string("kvik-synth induction (copies what followed its last two tokens)")
                   : fmt::format("kvik-synth d{} L{} h{}/{} hd{} ff{} v{} {}{}", o.dim, o.layers, o.heads, o.kv_heads,
                                 hd, o.ff, o.vocab, dtype_name(o.type),
                                 moe ? fmt::format(" {} E{}/{}", o.arch, o.experts, o.experts_used) : std::string()));
  w.set_u32("general.file_type", o.q4_k_m ? 15 : llama_file_type(o.type));  // 15: LLAMA_FTYPE_MOSTLY_Q4_K_M
  w.set_u32(a + "context_length", static_cast<uint32_t>(o.context));
  w.set_u32(a + "embedding_length", static_cast<uint32_t>(o.dim));
  w.set_u32(a + "block_count", static_cast<uint32_t>(o.layers));
  w.set_u32(a + "feed_forward_length", static_cast<uint32_t>(o.ff));
  w.set_u32(a + "attention.head_count", static_cast<uint32_t>(o.heads));
  w.set_u32(a + "attention.head_count_kv", static_cast<uint32_t>(o.kv_heads));
  w.set_f32(a + "attention.layer_norm_rms_epsilon", o.rms_eps);
  w.set_f32(a + "rope.freq_base", o.rope_freq_base);
  w.set_u32(a + "rope.dimension_count", static_cast<uint32_t>(hd));
  if (hd * o.heads != o.dim) {
    w.set_u32(a + "attention.key_length", static_cast<uint32_t>(hd));
    w.set_u32(a + "attention.value_length", static_cast<uint32_t>(hd));
  }
  if (o.sliding_window > 0) w.set_u32(a + "attention.sliding_window", static_cast<uint32_t>(o.sliding_window));
  if (moe) {
    w.set_u32(a + "expert_count", static_cast<uint32_t>(o.experts));
    w.set_u32(a + "expert_used_count", static_cast<uint32_t>(o.experts_used));
    if (o.arch == "qwen3moe")
      w.set_u32(a + "expert_feed_forward_length", static_cast<uint32_t>(o.expert_ff > 0 ? o.expert_ff : o.ff));
  }
  w.set_u32(a + "vocab_size", static_cast<uint32_t>(o.vocab));
}

// Scales: every projection has std 1/sqrt(fan_in), so with RMS-normed inputs each output is O(1). The
// embedding has std 1 so the residual stream starts O(1) and depends clearly on the token. The output head
// has std 3/sqrt(dim) (times output_scale): logits with std ≈ 3 give a peaked but not one-hot next-token
// distribution; output_scale > 1 sharpens it. A router (ffn_gate_inp, F32) has std 1/sqrt(d) too.
std::vector<RandomTensor> synth_tensors(const SynthOptions& o, int hd) {
  const int64_t q_dim = int64_t(o.heads) * hd, kv_dim = int64_t(o.kv_heads) * hd;
  const int64_t eff = o.expert_ff > 0 ? o.expert_ff : o.ff;
  const float s_dim = 1.0f / std::sqrt(static_cast<float>(o.dim));
  const float s_q = 1.0f / std::sqrt(static_cast<float>(q_dim));
  const float s_ff = 1.0f / std::sqrt(static_cast<float>(o.experts > 0 ? eff : o.ff));
  const DType t = o.type, f32 = DType::F32;
  const DType t_more = o.q4_k_m ? DType::Q6_K : t;  // the tensors the mix stores in more bits
  std::vector<RandomTensor> ts = {
      {"token_embd.weight", t, o.dim, o.vocab, 0, 0.0f, 1.0f},
      {"output_norm.weight", f32, o.dim, 0, 0, 1.0f, 0.1f},
      {"output.weight", t_more, o.dim, o.vocab, 0, 0.0f, 3.0f * s_dim * o.output_scale},
  };
  for (int l = 0; l < o.layers; ++l) {
    const std::string p = fmt::format("blk.{}.", l);
    const DType t_layer = use_more_bits(l, o.layers) ? t_more : t;
    const auto add = [&](const char* n, DType type, int64_t cols, int64_t rows, int64_t e, float mean, float std) {
      ts.push_back({p + n, type, cols, rows, e, mean, std});
    };
    add("attn_norm.weight", f32, o.dim, 0, 0, 1.0f, 0.1f);
    add("attn_q.weight", t, o.dim, q_dim, 0, 0.0f, s_dim);
    add("attn_k.weight", t, o.dim, kv_dim, 0, 0.0f, s_dim);
    add("attn_v.weight", t_layer, o.dim, kv_dim, 0, 0.0f, s_dim);
    add("attn_output.weight", t, q_dim, o.dim, 0, 0.0f, s_q);
    if (o.arch == "qwen3moe") {
      add("attn_q_norm.weight", f32, hd, 0, 0, 1.0f, 0.1f);
      add("attn_k_norm.weight", f32, hd, 0, 0, 1.0f, 0.1f);
    }
    add("ffn_norm.weight", f32, o.dim, 0, 0, 1.0f, 0.1f);
    if (o.experts > 0) {
      add("ffn_gate_inp.weight", f32, o.dim, o.experts, 0, 0.0f, s_dim);
      add("ffn_gate_exps.weight", t, o.dim, eff, o.experts, 0.0f, s_dim);
      add("ffn_up_exps.weight", t, o.dim, eff, o.experts, 0.0f, s_dim);
      add("ffn_down_exps.weight", t_layer, eff, o.dim, o.experts, 0.0f, s_ff);
    } else {
      add("ffn_gate.weight", t, o.dim, o.ff, 0, 0.0f, s_dim);
      add("ffn_up.weight", t, o.dim, o.ff, 0, 0.0f, s_dim);
      add("ffn_down.weight", t_layer, o.ff, o.dim, 0, 0.0f, s_ff);
    }
  }
  return ts;
}

}  // namespace

void synth_write_vocab(GgufWriter& w, const std::string& tokenizer_from, int vocab) {
  if (tokenizer_from.empty())
    write_byte_vocab(w, vocab);
  else
    copy_vocab(w, tokenizer_from, vocab);
}

void synth_llama_gguf(const SynthOptions& opt) {
  if (opt.arch == "gemma2" || opt.arch == "gemma3" || opt.arch == "phi3") return synth_family_gguf(opt);
  SynthOptions o = opt;
  if (o.induction) {
    if (!o.embed_from.empty() || o.arch != "llama" || o.experts > 0 || o.sliding_window > 0)
      fail(
          "synth --induction writes a plain llama of a fixed shape (no --embed-from, --arch, --experts or "
          "--sliding-window; place it in a bigger shape with a second synth --embed-from)");
    using L = InductionLayout;
    o.dim = L::kDim, o.layers = L::kLayers, o.heads = o.kv_heads = L::kHeads, o.head_dim = L::kHeadDim;
    o.ff = L::kFf, o.rope_freq_base = L::kRopeBase, o.type = DType::F32, o.q4_k_m = false;
  }
  const int hd = o.head_dim != 0 ? o.head_dim : (o.heads > 0 ? o.dim / o.heads : 0);
  validate(o, hd);
  std::unique_ptr<GgufFile> small;
  ModelConfig s;
  if (!o.embed_from.empty()) {
    small = GgufFile::open(o.embed_from);
    s = config_from_gguf(*small);
    check_embeddable(o, s, hd);
    o.tokenizer_from = o.embed_from;
    o.rope_freq_base = s.rope_freq_base;
    o.rms_eps = s.rms_eps * static_cast<float>(s.dim) / static_cast<float>(o.dim);
  }
  GgufWriter w;
  write_synth_metadata(w, o, hd);
  if (o.tokenizer_from.empty())
    write_byte_vocab(w, o.vocab);
  else
    copy_vocab(w, o.tokenizer_from, o.vocab);
  if (small || o.induction) {
    if (small)
      write_embedded(w, o, *small, s, hd);
    else
      write_induction(w, o);
    w.write(o.out_path);
    return;
  }
  const std::vector<RandomTensor> ts = synth_tensors(o, hd);
  for (const RandomTensor& t : ts) {
    std::vector<int64_t> shape = {t.cols};
    if (t.rows > 0) shape.push_back(t.rows);
    if (t.experts > 0) shape.push_back(t.experts);
    w.add_tensor_info(t.name, t.type, std::move(shape));
  }
  w.write_streaming(o.out_path, [&](size_t i, const GgufWriter::Sink& sink) { write_random(ts[i], o.seed, sink); });
}

}  // namespace kvik
