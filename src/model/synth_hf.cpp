// `kvik synth --hf DIR`: random-weight Hugging Face checkpoints (and their GGUF twin) for tests.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/fp16.h"
#include "formats/gguf.h"
#include "formats/safetensors.h"
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

// convert_hf_to_gguf.py's LlamaModel.permute: within each head, HF row (half, i) -> GGUF row (i, half).
std::vector<uint8_t> permute_rows(const std::vector<uint8_t>& data, int64_t rows, int64_t row_bytes, int64_t head_dim) {
  std::vector<uint8_t> out(data.size());
  const int64_t half = head_dim / 2;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t h = r / head_dim, within = r % head_dim;
    const int64_t hf_half = within / half, i = within % half;
    const int64_t dst = h * head_dim + 2 * i + hf_half;
    std::memcpy(&out[dst * row_bytes], &data[r * row_bytes], static_cast<size_t>(row_bytes));
  }
  return out;
}

}  // namespace

void synth_hf(const SynthOptions& o) {
  namespace fs = std::filesystem;
  if (o.hf_dir.empty()) fail("synth: --hf needs a directory");
  if (o.arch != "llama" && o.arch != "qwen2" && o.arch != "qwen3")
    fail("synth: --arch '{}' is not one of llama, qwen2, qwen3", o.arch);
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
  const int64_t q_dim = o.heads * hd, kv_dim = o.kv_heads * hd;
  fs::create_directories(o.hf_dir);

  const char* hf_arch = o.arch == "llama" ? "LlamaForCausalLM" : o.arch == "qwen2" ? "Qwen2ForCausalLM" : "Qwen3ForCausalLM";
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
      {"torch_dtype", o.type == DType::F32 ? "float32" : o.type == DType::F16 ? "float16" : "bfloat16"},
      {"hidden_act", "silu"},
  };
  if (o.arch == "llama") config["attention_bias"] = false;
  if (o.rope_scaling_llama3)
    config["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                              {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
  if (tok) {
    if (tok->bos_id() >= 0) config["bos_token_id"] = tok->bos_id();
    if (tok->eos_id() >= 0) config["eos_token_id"] = tok->eos_id();
  }
  std::ofstream(fs::path(o.hf_dir) / "config.json") << config.dump(2) << "\n";
  if (tok) {
    for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
      if (fs::exists(fs::path(o.tokenizer_dir) / f))
        fs::copy_file(fs::path(o.tokenizer_dir) / f, fs::path(o.hf_dir) / f, fs::copy_options::overwrite_existing);
    nlohmann::json gen = {{"eos_token_id", tok->eos_id()}};
    std::ofstream(fs::path(o.hf_dir) / "generation_config.json") << gen.dump(2) << "\n";
  }

  // Same scales as synth_llama_gguf: projections std 1/sqrt(fan_in), embedding std 1, output 3/sqrt(d).
  const float s_dim = 1.0f / std::sqrt(static_cast<float>(o.dim)), s_q = 1.0f / std::sqrt(static_cast<float>(q_dim));
  const float s_ff = 1.0f / std::sqrt(static_cast<float>(o.ff));
  std::vector<SafetensorsWriteTensor> hf;
  GgufWriter g;
  const bool want_gguf = !o.out_path.empty();
  // cols == 0: a vector of `rows` elements.
  const auto add = [&](const std::string& hf_name, const std::string& gguf_name, int64_t rows, int64_t cols,
                       float mean, float std, DType t, bool permute) {
    const int64_t n = cols ? rows * cols : rows;
    std::vector<uint8_t> bytes = encode(normal(hf_name, o.seed, static_cast<size_t>(n), mean, std), t);
    if (want_gguf) {
      if (cols == 0) {
        g.add_tensor(gguf_name, t, {rows}, bytes);
      } else {
        const int64_t rb = static_cast<int64_t>(bytes.size()) / rows;
        g.add_tensor(gguf_name, t, {cols, rows}, permute ? permute_rows(bytes, rows, rb, hd) : bytes);
      }
    }
    hf.push_back({hf_name, t, cols ? std::vector<int64_t>{rows, cols} : std::vector<int64_t>{rows}, std::move(bytes)});
  };
  const DType t = o.type;
  const bool perm = o.arch == "llama";
  add("model.embed_tokens.weight", "token_embd.weight", vocab, o.dim, 0.0f, 1.0f, t, false);
  add("model.norm.weight", "output_norm.weight", o.dim, 0, 1.0f, 0.1f, DType::F32, false);
  if (!o.tied) add("lm_head.weight", "output.weight", vocab, o.dim, 0.0f, 3.0f * s_dim * o.output_scale, t, false);
  for (int l = 0; l < o.layers; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l), b = fmt::format("blk.{}.", l);
    add(p + "input_layernorm.weight", b + "attn_norm.weight", o.dim, 0, 1.0f, 0.1f, DType::F32, false);
    add(p + "self_attn.q_proj.weight", b + "attn_q.weight", q_dim, o.dim, 0.0f, s_dim, t, perm);
    add(p + "self_attn.k_proj.weight", b + "attn_k.weight", kv_dim, o.dim, 0.0f, s_dim, t, perm);
    add(p + "self_attn.v_proj.weight", b + "attn_v.weight", kv_dim, o.dim, 0.0f, s_dim, t, false);
    add(p + "self_attn.o_proj.weight", b + "attn_output.weight", o.dim, q_dim, 0.0f, s_q, t, false);
    if (o.arch == "qwen2") {
      add(p + "self_attn.q_proj.bias", b + "attn_q.bias", q_dim, 0, 0.0f, 0.5f, DType::F32, false);
      add(p + "self_attn.k_proj.bias", b + "attn_k.bias", kv_dim, 0, 0.0f, 0.5f, DType::F32, false);
      add(p + "self_attn.v_proj.bias", b + "attn_v.bias", kv_dim, 0, 0.0f, 0.5f, DType::F32, false);
    }
    if (o.arch == "qwen3") {
      add(p + "self_attn.q_norm.weight", b + "attn_q_norm.weight", hd, 0, 1.0f, 0.1f, DType::F32, false);
      add(p + "self_attn.k_norm.weight", b + "attn_k_norm.weight", hd, 0, 1.0f, 0.1f, DType::F32, false);
    }
    add(p + "post_attention_layernorm.weight", b + "ffn_norm.weight", o.dim, 0, 1.0f, 0.1f, DType::F32, false);
    add(p + "mlp.gate_proj.weight", b + "ffn_gate.weight", o.ff, o.dim, 0.0f, s_dim, t, false);
    add(p + "mlp.up_proj.weight", b + "ffn_up.weight", o.ff, o.dim, 0.0f, s_dim, t, false);
    add(p + "mlp.down_proj.weight", b + "ffn_down.weight", o.dim, o.ff, 0.0f, s_ff, t, false);
  }
  write_safetensors((fs::path(o.hf_dir) / "model.safetensors").string(), hf);

  if (!want_gguf) return;
  const std::string a = o.arch;
  g.set_string("general.architecture", a);
  g.set_string("general.name", "kvik-synth-hf");
  g.set_u32(a + ".context_length", static_cast<uint32_t>(o.context));
  g.set_u32(a + ".embedding_length", static_cast<uint32_t>(o.dim));
  g.set_u32(a + ".block_count", static_cast<uint32_t>(o.layers));
  g.set_u32(a + ".feed_forward_length", static_cast<uint32_t>(o.ff));
  g.set_u32(a + ".attention.head_count", static_cast<uint32_t>(o.heads));
  g.set_u32(a + ".attention.head_count_kv", static_cast<uint32_t>(o.kv_heads));
  g.set_u32(a + ".attention.key_length", static_cast<uint32_t>(hd));
  g.set_u32(a + ".attention.value_length", static_cast<uint32_t>(hd));
  g.set_f32(a + ".attention.layer_norm_rms_epsilon", o.rms_eps);
  g.set_f32(a + ".rope.freq_base", o.rope_freq_base);
  g.set_u32(a + ".rope.dimension_count", static_cast<uint32_t>(hd));
  g.set_u32(a + ".vocab_size", static_cast<uint32_t>(vocab));
  if (tok) {  // the same tokenizer in tokenizer.ggml.* so llama.cpp can load the twin too
    const auto* bpe = dynamic_cast<const BpeTokenizer*>(tok.get());
    if (!bpe) fail("synth: --tokenizer-dir must hold a byte-level BPE tokenizer.json to go into the GGUF");
    bpe->write_gguf_metadata(g);
  }
  if (o.rope_scaling_llama3) {
    const std::vector<float> f = llama3_rope_freq_factors(o.rope_freq_base, hd, 8.0f, 1.0f, 4.0f, 8192.0f);
    g.add_tensor("rope_freqs.weight", DType::F32, {static_cast<int64_t>(f.size())},
                 std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(f.data()), f.size() * 4));
  }
  g.write(o.out_path);
}

}  // namespace kvik
