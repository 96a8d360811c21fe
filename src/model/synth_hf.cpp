// `kvik synth --hf DIR`: random-weight Hugging Face checkpoints (and their GGUF twin) for tests.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/fp16.h"
#include "core/log.h"
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

// Gemma 2 / 3 as released: local layers of window W (Gemma 2: 4096, Gemma 3: 512 unless --sliding-window) every
// layer but each 2nd (Gemma 3: 6th), Gemma 2's soft-caps (50 on scores, 30 on logits), Gemma 3's q/k norms, global
// rope base 10⁶ with linear scaling by 8 and local base 10⁴; queries scaled by d_h^−½; tied embeddings.
void gemma_synth_config(const SynthOptions& o, ModelConfig& c) {
  const bool g2 = c.arch == "gemma2";
  c.sliding_window = o.sliding_window > 0 ? o.sliding_window : g2 ? 4096 : 512;
  c.sliding_window_pattern = g2 ? 2 : 6;
  c.attn_softcap = g2 ? 50.0f : 0.0f;
  c.final_softcap = g2 ? 30.0f : 0.0f;
  c.attn_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  c.tied_embeddings = true;
  c.qk_norm = !g2;
  if (!g2) c.rope_freq_base = 1e6f, c.rope_freq_base_local = 1e4f, c.rope_freq_scale = 0.125f;
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
  if (c.is_gemma()) gemma_synth_config(o, c);
  if (c.arch == "phi3") {  // LongRoPE with the long factors: context_length is twice the original; short ones all 1
    c.rope_long_factors.resize(static_cast<size_t>(head_dim / 2));
    for (size_t i = 0; i < c.rope_long_factors.size(); ++i)
      c.rope_long_factors[i] = 1.0f + 7.0f * static_cast<float>(i) / static_cast<float>(c.rope_long_factors.size());
    c.rope_short_factors.assign(c.rope_long_factors.size(), 1.0f);
    c.rope_freq_factors = c.rope_long_factors;
    c.rope_original_context = o.context / 2;
    c.rope_mscale = std::sqrt(1.0f + std::log(2.0f) / std::log(static_cast<float>(o.context / 2)));
  }
  return c;
}

// Same scales as synth_llama_gguf: projections std 1/sqrt(fan_in), embedding std 1, output 3/sqrt(d); norm
// weights around 1 and biases around 0, both F32.
void synth_values(const HfTensorLayout& t, const SynthOptions& o, float* mean, float* std) {
  // Gemma's (1 + w) norms: w around 0, but the final norm's around 5 (times the tied embedding's std 0.5/√d below:
  // logits of std ≈ 3). The embedding is scaled by √d into a stream of RMS 0.5 that the layers' outputs (RMS ≈ 1
  // each, normed) outweigh, so the next token is not the current one's own embedding row (what a tied random model
  // with a large embedding predicts).
  if (t.norm_shift) {
    *mean = t.gguf_name == "output_norm.weight" ? 5.0f * o.output_scale : 0.0f, *std = 0.1f;
    return;
  }
  if (t.shape.size() == 1) {
    const bool bias = t.hf_name.ends_with(".bias");
    *mean = bias ? 0.0f : 1.0f, *std = bias ? 0.5f : 0.1f;
    return;
  }
  const float s = 1.0f / std::sqrt(static_cast<float>(t.shape[1]));  // 1 / sqrt(fan_in)
  *mean = 0.0f;
  const float emb = o.arch == "gemma2" || o.arch == "gemma3" ? 0.5f * s : 1.0f;
  *std = t.gguf_name == "token_embd.weight" ? emb : t.gguf_name == "output.weight" ? 3.0f * s * o.output_scale : s;
}

// config.json (and, with a tokenizer, its files and generation_config.json) as a Hugging Face export has them.
// Gemma2Config / Gemma3TextConfig fields of `c` (Gemma 2 names its layers in layer_types, Gemma 3 by
// sliding_window_pattern, as the two generations of transformers' configs do).
void add_gemma_config(const ModelConfig& c, nlohmann::ordered_json& config) {
  const bool g2 = c.arch == "gemma2";
  config["architectures"] = {g2 ? "Gemma2ForCausalLM" : "Gemma3ForCausalLM"};
  config["model_type"] = g2 ? "gemma2" : "gemma3_text";
  config.erase("hidden_act");
  config["hidden_activation"] = "gelu_pytorch_tanh";
  config["query_pre_attn_scalar"] = c.head_dim;
  config["sliding_window"] = c.sliding_window;
  config["rope_theta"] = c.rope_freq_base;
  config["tie_word_embeddings"] = true;
  config["attention_bias"] = false;
  if (g2) {
    config["attn_logit_softcapping"] = c.attn_softcap;
    config["final_logit_softcapping"] = c.final_softcap;
    nlohmann::json types = nlohmann::json::array();
    for (int64_t l = 0; l < c.n_layers; ++l)
      types.push_back(c.layer_is_local(l) ? "sliding_attention" : "full_attention");
    config["layer_types"] = types;
  } else {
    config["attn_logit_softcapping"] = nullptr;
    config["final_logit_softcapping"] = nullptr;
    config["sliding_window_pattern"] = c.sliding_window_pattern;
    config["rope_local_base_freq"] = c.rope_freq_base_local;
    config["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 1.0f / c.rope_freq_scale}};
  }
}

// Phi3Config's LongRoPE as Phi-3-mini-128k has it: a context of twice the original, so the long factors apply (the
// short ones, all 1, are written too), and the attention factor left to the formula; its Phi-3-mini-4k-style sliding
// window, which neither llama.cpp nor kvik applies.
void add_phi3_config(const ModelConfig& c, nlohmann::ordered_json& config) {
  config["model_type"] = "phi3";
  config["original_max_position_embeddings"] = c.rope_original_context;
  config["rope_scaling"] = {
      {"type", "longrope"}, {"short_factor", c.rope_short_factors}, {"long_factor", c.rope_long_factors}};
  config["sliding_window"] = c.rope_original_context - 1;
}

void write_config_files(const SynthOptions& o, const ModelConfig& c, int64_t hd, int64_t vocab, const Tokenizer* tok) {
  const char* hf_arch = o.arch == "llama"     ? (o.sliding_window > 0 ? "MistralForCausalLM" : "LlamaForCausalLM")
                        : o.arch == "qwen2"   ? "Qwen2ForCausalLM"
                        : o.arch == "qwen3"   ? "Qwen3ForCausalLM"
                        : o.arch == "mixtral" ? "MixtralForCausalLM"
                        : o.arch == "phi3"    ? "Phi3ForCausalLM"
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
  if (o.sliding_window > 0 && !c.is_gemma()) {
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
  if (c.is_gemma()) add_gemma_config(c, config);
  if (c.arch == "phi3") add_phi3_config(c, config);
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
  const bool gemma = o.arch == "gemma2" || o.arch == "gemma3";
  if (o.arch != "llama" && o.arch != "qwen2" && o.arch != "qwen3" && o.arch != "phi3" && !moe && !gemma)
    fail("synth: --arch '{}' is not one of llama, qwen2, qwen3, mixtral, qwen3moe, gemma2, gemma3, phi3", o.arch);
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
  const ModelConfig c = synth_config(o, hd, vocab);
  write_config_files(o, c, hd, vocab, tok.get());

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
      if (t.norm_shift) {  // the converter's w + 1 (an F32 vector)
        std::vector<float> v = normal(t.hf_name, o.seed, static_cast<size_t>(n), mean, std);
        for (float& x : v) x += 1.0f;
        g.add_tensor(t.gguf_name, type, std::move(shape), encode(v, DType::F32));
      } else {
        g.add_tensor(t.gguf_name, type, std::move(shape), t.permute ? permute_rows(bytes, rows, hd) : bytes);
      }
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
  for_each_rope_factor_tensor(c, [&](const std::string& name, const std::vector<float>& f) {
    g.add_tensor(name, DType::F32, {static_cast<int64_t>(f.size())}, encode(f, DType::F32));
  });
  g.write(o.out_path);
}

void synth_family_gguf(const SynthOptions& o) {
  if (o.out_path.empty()) fail("synth: no output path given");
  const int64_t hd = o.head_dim != 0 ? o.head_dim : (o.heads > 0 ? o.dim / o.heads : 0);
  if (o.dim <= 0 || o.layers <= 0 || o.heads <= 0 || o.kv_heads <= 0 || o.ff <= 0 || o.vocab <= 0 || hd <= 0 ||
      hd % 2 != 0 || o.heads % o.kv_heads != 0)
    fail("synth: inconsistent shape (dim {}, heads {}/{}, head_dim {}, ff {})", o.dim, o.heads, o.kv_heads, hd, o.ff);
  if (o.experts > 0 || !o.embed_from.empty() || o.q4_k_m || o.sliding_window < 0)
    fail("synth: --arch {} takes no --experts, --embed-from, q4_k_m mix or negative --sliding-window", o.arch);
  const int64_t block = traits(o.type).block_size;
  for (const auto& [v, flag] : {std::pair{int64_t{o.dim}, "--dim"}, {int64_t{o.ff}, "--ff"}, {o.heads * hd, "q_dim"}})
    if (v % block != 0) fail("synth: {} {} must be a multiple of {} for {}", flag, v, block, dtype_name(o.type));
  const ModelConfig c = synth_config(o, hd, o.vocab);
  GgufWriter g;
  g.set_string("general.architecture", c.arch);
  // Not "phi3" in the name: llama.cpp then sets attributes on Phi-3's special tokens by text, and a vocabulary
  // without <|endoftext|> (--tokenizer-from stories260K) fails to load.
  const std::string shape = c.arch == "phi3" ? "fused-qkv longrope" : c.arch;
  g.set_string("general.name", fmt::format("kvik-synth {} d{} L{} h{}/{} hd{} ff{} v{} {}", shape, o.dim, o.layers,
                                           o.heads, o.kv_heads, hd, o.ff, o.vocab, dtype_name(o.type)));
  write_arch_metadata(c, g);
  synth_write_vocab(g, o.tokenizer_from, o.vocab);
  for (const HfTensorLayout& t : hf_tensor_layout(c)) {
    const bool vec = t.shape.size() == 1;
    float mean = 0, std = 0;
    synth_values(t, o, &mean, &std);
    const int64_t rows = vec ? 1 : t.shape[0], cols = vec ? t.shape[0] : t.shape[1];
    std::vector<float> v = normal(t.hf_name, o.seed, static_cast<size_t>(rows * cols), mean, std);
    if (t.norm_shift)
      for (float& x : v) x += 1.0f;
    const DType type = vec ? DType::F32 : o.type;
    const size_t rb = *row_bytes(type, cols);
    std::vector<uint8_t> bytes(rb * static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) quantize_row(type, &v[r * cols], &bytes[rb * r], cols);
    g.add_tensor(t.gguf_name, type, vec ? std::vector<int64_t>{cols} : std::vector<int64_t>{cols, rows}, bytes);
  }
  for_each_rope_factor_tensor(c, [&](const std::string& name, const std::vector<float>& f) {
    g.add_tensor(name, DType::F32, {static_cast<int64_t>(f.size())}, encode(f, DType::F32));
  });
  g.write(o.out_path);
}

}  // namespace kvik
