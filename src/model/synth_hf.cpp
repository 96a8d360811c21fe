// `kvik synth --hf DIR`: random-weight Hugging Face checkpoints (and their GGUF twin) for tests.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/fp16.h"
#include "formats/gguf.h"
#include "formats/safetensors.h"
#include "model/hf_layout.h"
#include "model/model_config.h"
#include "model/synth.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace kvik {

namespace {

// Deterministic normal samples: splitmix64 seeded by (seed, tensor name), Box-Muller.
std::vector<float> normal(const std::string& name, uint64_t seed, size_t n, float mean, float std) {
  uint64_t s = seed * 0x9E3779B97F4A7C15ull;
  for (char c : name) s = (s ^ static_cast<unsigned char>(c)) * 0x100000001B3ull;
  const auto next = [&]() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return static_cast<double>((z ^ (z >> 31)) >> 11) * 0x1.0p-53;
  };
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    const double u1 = std::max(next(), 1e-300), u2 = next();
    v[i] = mean + std * static_cast<float>(std::sqrt(-2 * std::log(u1)) * std::cos(2 * M_PI * u2));
  }
  return v;
}

std::vector<uint8_t> encode(const std::vector<float>& v, DType t) {
  std::vector<uint8_t> out(v.size() * (t == DType::F32 ? 4 : 2));
  for (size_t i = 0; i < v.size(); ++i) {
    if (t == DType::F32) {
      std::memcpy(&out[4 * i], &v[i], 4);
    } else {
      const uint16_t h = t == DType::F16 ? f32_to_fp16(v[i]) : f32_to_bf16(v[i]);
      std::memcpy(&out[2 * i], &h, 2);
    }
  }
  return out;
}

// GGUF rows in convert_hf_to_gguf.py's order: row r of the result is HF row hf_row_of_gguf_row(r).
std::vector<uint8_t> permute_rows(const std::vector<uint8_t>& data, int64_t rows, int64_t head_dim) {
  const size_t rb = data.size() / static_cast<size_t>(rows);
  std::vector<uint8_t> out(data.size());
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(&out[static_cast<size_t>(r) * rb], &data[static_cast<size_t>(hf_row_of_gguf_row(r, head_dim)) * rb],
                rb);
  return out;
}

// The config.json synth_hf writes, as config_from_hf reads it back.
ModelConfig synth_config(const SynthOptions& o, int64_t head_dim, int64_t vocab) {
  ModelConfig c;
  c.arch = o.arch == "mixtral" ? "llama" : o.arch;  // llama.cpp's arch for Mixtral
  c.dim = o.dim, c.n_layers = o.layers, c.n_heads = o.heads, c.n_kv_heads = o.kv_heads, c.head_dim = head_dim;
  c.ff_dim = o.ff, c.vocab_size = vocab, c.context_length = o.context, c.rope_dim = head_dim;
  c.rope_freq_base = o.rope_freq_base, c.rms_eps = o.rms_eps, c.tied_embeddings = o.tied;
  c.attn_bias = o.arch == "qwen2", c.qk_norm = o.arch == "qwen3" || o.arch == "qwen3moe";
  c.sliding_window = o.sliding_window;
  if (o.experts > 0) {
    c.n_experts = o.experts, c.n_experts_used = o.experts_used;
    c.expert_ff_dim = o.arch == "qwen3moe" && o.expert_ff > 0 ? o.expert_ff : o.ff;
  }
  if (o.rope_scaling_llama3)
    c.rope_freq_factors = llama3_rope_freq_factors(o.rope_freq_base, head_dim, 8.0f, 1.0f, 4.0f, 8192.0f);
  return c;
}

// Same scales as synth_llama_gguf: projections std 1/sqrt(fan_in), embedding std 1, output 3/sqrt(d); norm
// weights around 1 and biases around 0, both F32.
void synth_values(const HfTensorLayout& t, const SynthOptions& o, float* mean, float* std) {
  if (t.shape.size() == 1) {
    const bool bias = t.hf_name.ends_with(".bias");
    *mean = bias ? 0.0f : 1.0f, *std = bias ? 0.5f : 0.1f;
    return;
  }
  const float s = 1.0f / std::sqrt(static_cast<float>(t.shape[1]));  // 1 / sqrt(fan_in)
  *mean = 0.0f;
  *std = t.gguf_name == "token_embd.weight" ? 1.0f : t.gguf_name == "output.weight" ? 3.0f * s * o.output_scale : s;
}

// config.json (and, with a tokenizer, its files and generation_config.json) as a Hugging Face export has them.
void write_config_files(const SynthOptions& o, int64_t hd, int64_t vocab, const Tokenizer* tok) {
  const char* hf_arch = o.arch == "llama"     ? (o.sliding_window > 0 ? "MistralForCausalLM" : "LlamaForCausalLM")
                        : o.arch == "qwen2"   ? "Qwen2ForCausalLM"
                        : o.arch == "qwen3"   ? "Qwen3ForCausalLM"
                        : o.arch == "mixtral" ? "MixtralForCausalLM"
                                              : "Qwen3MoeForCausalLM";
  nlohmann::ordered_json config = {
      {"architectures", {hf_arch}},
      {"model_type", o.arch},
      {"hidden_size", o.dim},
      {"num_hidden_layers", o.layers},
      {"num_attention_heads", o.heads},
      {"num_key_value_heads", o.kv_heads},
      {"head_dim", hd},
      {"intermediate_size", o.ff},
      {"vocab_size", vocab},
      {"max_position_embeddings", o.context},
      {"rms_norm_eps", o.rms_eps},
      {"rope_theta", o.rope_freq_base},
      {"tie_word_embeddings", o.tied},
      {"torch_dtype", o.type == DType::F32   ? "float32"
                      : o.type == DType::F16 ? "float16"
                                             : "bfloat16"},
      {"hidden_act", "silu"},
  };
  if (o.arch == "llama") config["attention_bias"] = false;
  if (o.sliding_window > 0) {
    if (o.arch != "llama" && o.arch != "mixtral")
      fail("synth: --sliding-window is for --arch llama (Mistral) or mixtral");
    config["model_type"] = o.arch == "llama" ? "mistral" : "mixtral";
    config["sliding_window"] = o.sliding_window;
  }
  if (o.arch == "mixtral") {
    config["num_local_experts"] = o.experts;
    config["num_experts_per_tok"] = o.experts_used;
  } else if (o.arch == "qwen3moe") {
    config["num_experts"] = o.experts;
    config["num_experts_per_tok"] = o.experts_used;
    config["moe_intermediate_size"] = o.expert_ff > 0 ? o.expert_ff : o.ff;
    config["norm_topk_prob"] = true;  // the released models' setting, and what llama.cpp's qwen3moe does
    config["decoder_sparse_step"] = 1;
  }
  if (o.rope_scaling_llama3)
    config["rope_scaling"] = {{"rope_type", "llama3"},
                              {"factor", 8.0},
                              {"low_freq_factor", 1.0},
                              {"high_freq_factor", 4.0},
                              {"original_max_position_embeddings", 8192}};
  if (tok) {
    if (tok->bos_id() >= 0) config["bos_token_id"] = tok->bos_id();
    if (tok->eos_id() >= 0) config["eos_token_id"] = tok->eos_id();
  }
  std::ofstream(std::filesystem::path(o.hf_dir) / "config.json") << config.dump(2) << "\n";
  if (tok) {
    for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
      if (std::filesystem::exists(std::filesystem::path(o.tokenizer_dir) / f))
        std::filesystem::copy_file(std::filesystem::path(o.tokenizer_dir) / f, std::filesystem::path(o.hf_dir) / f,
                                   std::filesystem::copy_options::overwrite_existing);
    nlohmann::json gen = {{"eos_token_id", tok->eos_id()}};
    std::ofstream(std::filesystem::path(o.hf_dir) / "generation_config.json") << gen.dump(2) << "\n";
  }
}

}  // namespace

void synth_hf(const SynthOptions& o) {
  namespace fs = std::filesystem;
  if (o.hf_dir.empty()) fail("synth: --hf needs a directory");
  const bool moe = o.arch == "mixtral" || o.arch == "qwen3moe";
  if (o.arch != "llama" && o.arch != "qwen2" && o.arch != "qwen3" && !moe)
    fail("synth: --arch '{}' is not one of llama, qwen2, qwen3, mixtral, qwen3moe", o.arch);
  if (moe != (o.experts > 0) || (moe && (o.experts_used <= 0 || o.experts_used > o.experts)))
    fail("synth: --arch {} needs --experts E and --experts-used k in 1..E (and only a MoE arch takes them)", o.arch);
  if (o.type != DType::F32 && o.type != DType::F16 && o.type != DType::BF16)
    fail("synth: a Hugging Face directory holds f32, f16 or bf16 weights, not {}", dtype_name(o.type));
  const int64_t hd = o.head_dim != 0 ? o.head_dim : (o.heads > 0 ? o.dim / o.heads : 0);
  if (o.dim <= 0 || o.layers <= 0 || o.heads <= 0 || o.kv_heads <= 0 || o.ff <= 0 || hd <= 0 || hd % 2 != 0 ||
      o.heads % o.kv_heads != 0)
    fail("synth: inconsistent shape (dim {}, heads {}/{}, head_dim {}, ff {})", o.dim, o.heads, o.kv_heads, hd, o.ff);
  int64_t vocab = o.vocab;
  std::unique_ptr<Tokenizer> tok;
  if (!o.tokenizer_dir.empty()) {
    tok = load_tokenizer(o.tokenizer_dir);
    vocab = std::max<int64_t>(vocab, tok->vocab_size());
  }
  fs::create_directories(o.hf_dir);
  write_config_files(o, hd, vocab, tok.get());

  const ModelConfig c = synth_config(o, hd, vocab);
  std::vector<SafetensorsWriteTensor> hf;
  GgufWriter g;
  const bool want_gguf = !o.out_path.empty();
  std::map<std::string, std::vector<uint8_t>> stacked;  // per expert tensor, its experts so far (GGUF [in, out, E])
  for (const HfTensorLayout& t : hf_tensor_layout(c)) {
    const bool vec = t.shape.size() == 1;
    const DType type = vec ? DType::F32 : o.type;
    float mean = 0, std = 0;
    synth_values(t, o, &mean, &std);
    const int64_t rows = t.shape[0], n = vec ? rows : rows * t.shape[1];
    std::vector<uint8_t> bytes = encode(normal(t.hf_name, o.seed, static_cast<size_t>(n), mean, std), type);
    if (want_gguf && t.expert >= 0) {
      std::vector<uint8_t>& s = stacked[t.gguf_name];
      s.insert(s.end(), bytes.begin(), bytes.end());
      if (t.expert == c.n_experts - 1) {
        g.add_tensor(t.gguf_name, type, {t.shape[1], rows, c.n_experts}, s);
        stacked.erase(t.gguf_name);
      }
    } else if (want_gguf) {
      std::vector<int64_t> shape = vec ? std::vector<int64_t>{rows} : std::vector<int64_t>{t.shape[1], rows};
      g.add_tensor(t.gguf_name, type, std::move(shape), t.permute ? permute_rows(bytes, rows, hd) : bytes);
    }
    hf.push_back({t.hf_name, type, t.shape, std::move(bytes)});
  }
  write_safetensors((fs::path(o.hf_dir) / "model.safetensors").string(), hf);

  if (!want_gguf) return;
  g.set_string("general.architecture", c.arch);
  g.set_string("general.name", "kvik-synth-hf");
  write_arch_metadata(c, g);
  if (tok) {  // the same tokenizer in tokenizer.ggml.* so llama.cpp can load the twin too
    const auto* bpe = dynamic_cast<const BpeTokenizer*>(tok.get());
    if (!bpe) fail("synth: --tokenizer-dir must hold a byte-level BPE tokenizer.json to go into the GGUF");
    bpe->write_gguf_metadata(g, vocab);
  }
  if (!c.rope_freq_factors.empty()) {
    const std::vector<float>& f = c.rope_freq_factors;
    g.add_tensor("rope_freqs.weight", DType::F32, {static_cast<int64_t>(f.size())},
                 std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(f.data()), f.size() * 4));
  }
  g.write(o.out_path);
}

}  // namespace kvik
