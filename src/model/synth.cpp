#include "model/synth.h"

#include <cmath>
#include <cstring>
#include <numbers>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "formats/gguf.h"

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

// The {arch}.* keys: llama.cpp's llama (Mixtral: + expert_count / expert_used_count) or qwen3moe.
void write_synth_metadata(GgufWriter& w, const SynthOptions& o, int hd) {
  const std::string gguf_arch = o.arch == "qwen3moe" ? "qwen3moe" : "llama";
  const std::string a = gguf_arch + ".";
  const bool moe = o.experts > 0;
  w.set_string("general.architecture", gguf_arch);
  w.set_string("general.name",
               fmt::format("kvik-synth d{} L{} h{}/{} hd{} ff{} v{} {}{}", o.dim, o.layers, o.heads, o.kv_heads, hd,
                           o.ff, o.vocab, dtype_name(o.type),
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

void synth_llama_gguf(const SynthOptions& o) {
  const int hd = o.head_dim != 0 ? o.head_dim : (o.heads > 0 ? o.dim / o.heads : 0);
  validate(o, hd);
  GgufWriter w;
  write_synth_metadata(w, o, hd);
  if (o.tokenizer_from.empty())
    write_byte_vocab(w, o.vocab);
  else
    copy_vocab(w, o.tokenizer_from, o.vocab);
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
