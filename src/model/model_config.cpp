#include "model/model_config.h"

#include <cmath>
#include <filesystem>
#include "core/error.h"
#include "core/log.h"

#include <nlohmann/json.hpp>

#include "formats/gguf.h"
#include "formats/json_file.h"

namespace kvik {

namespace {

// {arch}.expert_count / expert_used_count / expert_feed_forward_length (Qwen3-MoE) of a mixture of experts.
void experts_from_gguf(const GgufFile& g, ModelConfig& c) {
  const std::string a = c.arch + ".";
  const std::optional<int64_t> e = g.get_int(a + "expert_count");
  if (!e || *e == 0) {
    if (c.arch == "qwen3moe")
      fail("{}: metadata key '{}expert_count' is missing (a qwen3moe model has experts)", g.path(), a);
    return;
  }
  if (*e < 0 || *e > 4096) fail("{}: metadata key '{}expert_count' = {} is out of range (1..4096)", g.path(), a, *e);
  c.n_experts = *e;
  const int64_t k = g.require_int(a + "expert_used_count");
  if (k <= 0 || k > c.n_experts)
    fail("{}: metadata key '{}expert_used_count' = {} is out of range (1..expert_count {})", g.path(), a, k,
         c.n_experts);
  c.n_experts_used = k;
  if (c.arch == "qwen3moe") {
    const int64_t f = g.require_int(a + "expert_feed_forward_length");
    if (f <= 0 || f > (1 << 22))
      fail("{}: metadata key '{}expert_feed_forward_length' = {} is out of range (1..{})", g.path(), a, f, 1 << 22);
    c.expert_ff_dim = f;
    c.ff_dim = g.get_int(a + "feed_forward_length").value_or(f);
  } else {
    c.expert_ff_dim = c.ff_dim;
  }
  // llama.cpp renormalizes the k weights for both families; a file may say otherwise (expert_weights_norm).
  c.norm_topk_prob = g.get_bool(a + "expert_weights_norm").value_or(true);
}

// Gemma 2 / 3 keys (llama.cpp's llama_model_gemma2/3::load_arch_hparams, with their defaults): the sliding window
// of the local layers and their pattern, Gemma 3's local rope base and linear rope scaling, the soft-caps, and the
// attention scale llama.cpp derives from the layer count (the 27B models scale by (d / n_h)^−½, the others
// d_h^−½: their query_pre_attn_scalar).
void gemma_from_gguf(const GgufFile& g, ModelConfig& c) {
  const std::string a = c.arch + ".";
  const bool g2 = c.arch == "gemma2";
  const auto window = g.get_int(a + "attention.sliding_window");
  c.sliding_window = g2 ? window.value_or(4096) : window.value_or(0);
  if (c.sliding_window < 0 || c.sliding_window > (1 << 24))
    fail("{}: metadata key '{}attention.sliding_window' = {} is out of range (0..{})", g.path(), a, c.sliding_window,
         1 << 24);
  c.sliding_window_pattern = g.get_int(a + "attention.sliding_window_pattern").value_or(g2 ? 2 : 6);
  if (c.sliding_window_pattern < 0 || c.sliding_window_pattern > 4096)
    fail("{}: metadata key '{}attention.sliding_window_pattern' = {} is out of range (0..4096)", g.path(), a,
         c.sliding_window_pattern);
  const auto cap = [&](const std::string& key, double dflt) {
    const double v = g.get_float(a + key).value_or(dflt);
    if (!(v >= 0) || v > 1e6) fail("{}: metadata key '{}{}' = {} is out of range (0..1e6)", g.path(), a, key, v);
    return static_cast<float>(v);
  };
  c.attn_softcap = g2 ? cap("attn_logit_softcapping", 50.0) : 0.0f;
  c.final_softcap = cap("final_logit_softcapping", g2 ? 30.0 : 0.0);
  if (!g2) {
    c.rope_freq_base_local = static_cast<float>(g.get_float(a + "rope.freq_base_swa").value_or(10000.0));
    const double factor = g.get_float(a + "rope.scaling.factor").value_or(0.0);
    if (factor < 0 || factor > 1e6)
      fail("{}: metadata key '{}rope.scaling.factor' = {} is out of range", g.path(), a, factor);
    c.rope_freq_scale = factor == 0 ? 1.0f : static_cast<float>(1.0 / factor);
  }
  const bool big = c.n_layers == (g2 ? 46 : 62);
  c.attn_scale = 1.0f / std::sqrt(static_cast<float>(big ? c.dim / c.n_heads : c.head_dim));
}

// Gemma2ForCausalLM / Gemma3ForCausalLM (transformers' Gemma2Config / Gemma3TextConfig and their defaults): the
// local layers' window and pattern (sliding_window_pattern, or a layer_types list of that shape), soft-caps,
// query_pre_attn_scalar, Gemma 3's local rope base and linear rope scaling.
void gemma_from_hf(const nlohmann::json& j, const std::string& f, ModelConfig& c) {
  const bool g2 = c.arch == "gemma2";
  const auto number = [&](const char* key, double dflt, bool nullable) -> double {
    if (!j.contains(key)) return dflt;
    if (j[key].is_null()) {
      if (nullable) return 0.0;
      fail("{}: \"{}\" must be a number, found null", f, key);
    }
    if (!j[key].is_number() || j[key].get<double>() < 0)
      fail("{}: \"{}\" must be a non-negative number, found {}", f, key, j[key].dump());
    return j[key].get<double>();
  };
  c.sliding_window = static_cast<int64_t>(number("sliding_window", g2 ? 4096 : 512, true));
  if (c.sliding_window > (1 << 24)) fail("{}: \"sliding_window\" = {} is out of range", f, c.sliding_window);
  c.sliding_window_pattern = static_cast<int64_t>(number("sliding_window_pattern", g2 ? 2 : 6, false));
  if (j.contains("layer_types") && !j["layer_types"].is_null()) {
    const nlohmann::json& lt = j["layer_types"];
    if (!lt.is_array() || static_cast<int64_t>(lt.size()) != c.n_layers)
      fail("{}: \"layer_types\" must be a list of {} entries", f, c.n_layers);
    int64_t first_global = -1;
    for (int64_t l = 0; l < c.n_layers && first_global < 0; ++l)
      if (lt[l] == "full_attention") first_global = l;
    c.sliding_window_pattern = first_global < 0 ? 0 : first_global + 1;
    for (int64_t l = 0; l < c.n_layers; ++l) {
      const bool local = c.sliding_window_pattern == 0 || l % c.sliding_window_pattern < c.sliding_window_pattern - 1;
      if (lt[l] != (local ? "sliding_attention" : "full_attention"))
        fail("{}: \"layer_types\" entry {} is {}: kvik runs a repeating pattern of sliding layers then one full one", f,
             l, lt[l].dump());
    }
  }
  if (c.sliding_window_pattern > 4096) fail("{}: \"sliding_window_pattern\" is out of range", f);
  if (c.sliding_window == 0) c.sliding_window_pattern = 0;
  c.attn_softcap = static_cast<float>(number("attn_logit_softcapping", g2 ? 50.0 : 0.0, true));
  c.final_softcap = static_cast<float>(number("final_logit_softcapping", g2 ? 30.0 : 0.0, true));
  const double qpas = number("query_pre_attn_scalar", 256, false);
  if (!(qpas > 0)) fail("{}: \"query_pre_attn_scalar\" must be positive", f);
  c.attn_scale = static_cast<float>(1.0 / std::sqrt(qpas));
  if (!g2) c.rope_freq_base_local = static_cast<float>(number("rope_local_base_freq", 10000.0, false));
  if (j.contains("hidden_activation") && j["hidden_activation"] != "gelu_pytorch_tanh")
    fail("{}: \"hidden_activation\" {} is not supported (Gemma's is gelu_pytorch_tanh)", f,
         j["hidden_activation"].dump());
}

// Phi-3's LongRoPE (llama.cpp's get_rope_factors at a context of context_length): rope_factors_long.weight when
// context_length exceeds rope.scaling.original_context_length, else rope_factors_short.weight (both optional: a
// Phi-3 without them rotates plainly); cos / sin times rope.scaling.attn_factor.
void longrope_from_gguf(const GgufFile& g, ModelConfig& c) {
  const int64_t orig = g.get_int("phi3.rope.scaling.original_context_length").value_or(c.context_length);
  if (orig <= 0 || orig > (1 << 24))
    fail("{}: metadata key 'phi3.rope.scaling.original_context_length' = {} is out of range", g.path(), orig);
  for (const char* name : {"rope_factors_short.weight", "rope_factors_long.weight"}) {
    const GgufTensorInfo* t = g.find_tensor(name);
    if (!t) continue;
    if (t->dtype != DType::F32 || t->shape != std::vector<int64_t>{c.rope_dim / 2})
      fail("{}: tensor '{}' must be f32 [{}]", g.path(), name, c.rope_dim / 2);
    const auto* f = reinterpret_cast<const float*>(t->data);
    (name[13] == 's' ? c.rope_short_factors : c.rope_long_factors).assign(f, f + c.rope_dim / 2);
  }
  c.rope_original_context = orig;
  const std::vector<float>& picked = c.context_length > orig ? c.rope_long_factors : c.rope_short_factors;
  if (!picked.empty()) c.rope_freq_factors = picked;
  const double m = g.get_float("phi3.rope.scaling.attn_factor").value_or(1.0);
  if (!(m > 0) || m > 100) fail("{}: metadata key 'phi3.rope.scaling.attn_factor' = {} is out of range", g.path(), m);
  c.rope_mscale = static_cast<float>(m);
}

// Gemma3ForConditionalGeneration's config.json: the language model's fields in text_config, with Gemma3TextConfig's
// defaults for those a release leaves out (the 4B's text_config names only what differs from them), and the
// top-level fields the text part shares (special token ids).
nlohmann::json gemma3_text_config(const nlohmann::json& j, const std::string& f) {
  if (!j.contains("text_config") || !j["text_config"].is_object())
    fail("{}: Gemma3ForConditionalGeneration without a \"text_config\" object", f);
  nlohmann::json t = {{"vocab_size", 262208},
                      {"hidden_size", 2304},
                      {"intermediate_size", 9216},
                      {"num_hidden_layers", 26},
                      {"num_attention_heads", 8},
                      {"num_key_value_heads", 4},
                      {"head_dim", 256},
                      {"max_position_embeddings", 131072},
                      {"rms_norm_eps", 1e-6},
                      {"rope_theta", 1000000.0},
                      {"rope_local_base_freq", 10000.0},
                      {"sliding_window", 4096},
                      {"sliding_window_pattern", 6},
                      {"query_pre_attn_scalar", 256},
                      {"final_logit_softcapping", nullptr},
                      {"attn_logit_softcapping", nullptr},
                      {"tie_word_embeddings", true}};
  t.update(j["text_config"]);
  for (const char* key : {"bos_token_id", "eos_token_id", "pad_token_id", "torch_dtype"})
    if (j.contains(key) && !t.contains(key)) t[key] = j[key];
  t["architectures"] = {"Gemma3ForCausalLM"};
  return t;
}

// Phi3Config's LongRoPE (rope_scaling type "longrope", or "su" in the first releases): short_factor and long_factor
// lists of rope_dim / 2 divisors, the long ones when max_position_embeddings exceeds original_max_position_embeddings
// (the choice llama.cpp makes at that context, and what its GGUF then holds); the attention factor given, else
// convert_hf_to_gguf.py's √(1 + ln(scale) / ln(original)) for scale = max / original > 1.
void longrope_from_hf(const nlohmann::json& j, const std::string& f, ModelConfig& c) {
  const nlohmann::json& rs = j["rope_scaling"];
  const int64_t orig =
      j.contains("original_max_position_embeddings") && j["original_max_position_embeddings"].is_number_integer()
          ? j["original_max_position_embeddings"].get<int64_t>()
          : c.context_length;
  if (orig <= 0 || orig > c.context_length)
    fail("{}: \"original_max_position_embeddings\" {} must be in 1..max_position_embeddings ({})", f, orig,
         c.context_length);
  for (const char* key : {"short_factor", "long_factor"}) {
    if (!rs.contains(key) || !rs[key].is_array() || static_cast<int64_t>(rs[key].size()) != c.rope_dim / 2)
      fail("{}: rope_scaling \"{}\" must be a list of {} numbers (rotated dimensions / 2)", f, key, c.rope_dim / 2);
    std::vector<float>& out = key[0] == 's' ? c.rope_short_factors : c.rope_long_factors;
    for (const nlohmann::json& x : rs[key]) {
      if (!x.is_number() || !(x.get<double>() > 0))
        fail("{}: rope_scaling \"{}\" holds {}, not a positive number", f, key, x.dump());
      out.push_back(x.get<float>());
    }
  }
  c.rope_original_context = orig;
  c.rope_freq_factors = c.context_length > orig ? c.rope_long_factors : c.rope_short_factors;
  const double scale = static_cast<double>(c.context_length) / static_cast<double>(orig);
  double m = scale > 1 ? std::sqrt(1 + std::log(scale) / std::log(static_cast<double>(orig))) : 1.0;
  if (rs.contains("attention_factor") && !rs["attention_factor"].is_null()) {
    if (!rs["attention_factor"].is_number() || !(rs["attention_factor"].get<double>() > 0))
      fail("{}: rope_scaling \"attention_factor\" must be a positive number", f);
    m = rs["attention_factor"].get<double>();
  }
  c.rope_mscale = static_cast<float>(m);
}

// Phi-3's configs name a sliding window (2047 in Phi-3-mini-4k) that llama.cpp does not apply (its phi3 attends the
// whole context): kvik follows the reference it is checked against, and says so.
void phi3_sliding_window_ignored(const std::string& where, int64_t window) {
  if (window > 0)
    log_info("{}: phi3 sliding_window {} is not applied (as in llama.cpp, every layer attends the whole context)",
             where, window);
}

}  // namespace

ModelConfig config_from_gguf(const GgufFile& g) {
  ModelConfig c;
  c.arch = g.require_string("general.architecture");
  if (c.arch != "llama" && c.arch != "qwen2" && c.arch != "qwen3" && c.arch != "qwen3moe" && !c.is_gemma() &&
      c.arch != "phi3")
    fail(
        "{}: general.architecture '{}' is not supported (kvik runs llama, qwen2, qwen3, qwen3moe, gemma2, gemma3 "
        "and phi3 GGUF models)",
        g.path(), c.arch);
  // llama.cpp's converter permutes llama q/k rows to the interleaved rotation; Qwen keeps HF's halves.
  c.rope_type = c.arch == "llama" ? RopeType::kNorm : RopeType::kNeox;
  c.name = g.get_string("general.name").value_or("");
  const std::string a = c.arch + ".";
  auto positive = [&](const std::string& key, int64_t v, int64_t max) {
    if (v <= 0 || v > max) fail("{}: metadata key '{}' = {} is out of range (1..{})", g.path(), key, v, max);
    return v;
  };
  c.dim = positive(a + "embedding_length", g.require_int(a + "embedding_length"), 1 << 20);
  c.n_layers = positive(a + "block_count", g.require_int(a + "block_count"), 4096);
  if (c.arch != "qwen3moe")  // Qwen3-MoE's experts have their own width; its feed_forward_length is informational
    c.ff_dim = positive(a + "feed_forward_length", g.require_int(a + "feed_forward_length"), 1 << 22);
  experts_from_gguf(g, c);
  c.n_heads = positive(a + "attention.head_count", g.require_int(a + "attention.head_count"), 1 << 14);
  c.n_kv_heads =
      positive(a + "attention.head_count_kv", g.get_int(a + "attention.head_count_kv").value_or(c.n_heads), c.n_heads);
  if (c.n_heads % c.n_kv_heads != 0)
    fail("{}: attention.head_count {} is not a multiple of attention.head_count_kv {}", g.path(), c.n_heads,
         c.n_kv_heads);
  c.head_dim =
      positive(a + "attention.key_length", g.get_int(a + "attention.key_length").value_or(c.dim / c.n_heads), 1 << 14);
  if (auto vl = g.get_int(a + "attention.value_length"); vl && *vl != c.head_dim)
    fail("{}: attention.value_length {} differs from key_length {} (not supported)", g.path(), *vl, c.head_dim);
  c.context_length = positive(a + "context_length", g.get_int(a + "context_length").value_or(2048), 1 << 24);
  c.rope_dim =
      positive(a + "rope.dimension_count", g.get_int(a + "rope.dimension_count").value_or(c.head_dim), c.head_dim);
  if (c.rope_dim % 2 != 0) fail("{}: rope.dimension_count {} must be even", g.path(), c.rope_dim);
  c.rope_freq_base = static_cast<float>(g.get_float(a + "rope.freq_base").value_or(10000.0));
  c.rms_eps = static_cast<float>(g.get_float(a + "attention.layer_norm_rms_epsilon").value_or(1e-5));
  if (auto w = g.get_int(a + "attention.sliding_window"); w && *w != 0)
    c.sliding_window = positive(a + "attention.sliding_window", *w, 1 << 24);
  if (!(c.rms_eps > 0.0f)) fail("{}: attention.layer_norm_rms_epsilon must be positive", g.path());
  if (c.is_gemma()) gemma_from_gguf(g, c);

  const GgufTensorInfo* emb = g.find_tensor("token_embd.weight");
  if (!emb) fail("{}: required tensor 'token_embd.weight' is missing", g.path());
  if (emb->shape.size() != 2)
    fail("{}: tensor 'token_embd.weight' has {} dimensions, expected 2", g.path(), emb->shape.size());
  c.vocab_size = emb->shape[1];
  if (auto v = g.get_int(a + "vocab_size"); v && *v != c.vocab_size)
    fail("{}: {}vocab_size {} disagrees with token_embd.weight rows {}", g.path(), a, *v, c.vocab_size);
  c.tied_embeddings = c.arch == "gemma2" || g.find_tensor("output.weight") == nullptr;  // llama.cpp's gemma2 ties
  c.attn_bias = g.find_tensor("blk.0.attn_q.bias") != nullptr;
  c.qk_norm = g.find_tensor("blk.0.attn_q_norm.weight") != nullptr;
  if (const GgufTensorInfo* rf = g.find_tensor("rope_freqs.weight")) {
    if (rf->dtype != DType::F32 || rf->shape != std::vector<int64_t>{c.rope_dim / 2})
      fail("{}: tensor 'rope_freqs.weight' must be f32 [{}], found {} with {} dims", g.path(), c.rope_dim / 2,
           dtype_name(rf->dtype), rf->shape.size());
    const auto* f = reinterpret_cast<const float*>(rf->data);
    c.rope_freq_factors.assign(f, f + c.rope_dim / 2);
  }
  if (c.arch == "phi3") {
    longrope_from_gguf(g, c);
    phi3_sliding_window_ignored(g.path(), c.sliding_window);
    c.sliding_window = 0;
  }
  return c;
}

std::vector<float> llama3_rope_freq_factors(float base, int64_t rope_dim, float factor, float low_freq_factor,
                                            float high_freq_factor, float original_max_position) {
  const double low_wavelen = original_max_position / low_freq_factor;
  const double high_wavelen = original_max_position / high_freq_factor;
  std::vector<float> f;
  for (int64_t i = 0; i < rope_dim; i += 2) {
    const double freq = 1.0 / std::pow(static_cast<double>(base), static_cast<double>(i) / rope_dim);
    const double wavelen = 2 * M_PI / freq;
    if (wavelen < high_wavelen) {
      f.push_back(1.0f);
    } else if (wavelen > low_wavelen) {
      f.push_back(factor);
    } else {
      const double smooth = (original_max_position / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
      f.push_back(static_cast<float>(1.0 / ((1 - smooth) / factor + smooth)));
    }
  }
  return f;
}

ModelConfig config_from_hf(const std::string& dir) {
  const std::filesystem::path path = std::filesystem::path(dir) / "config.json";
  if (!std::filesystem::exists(path)) fail("{}: no config.json in this directory", dir);
  nlohmann::json j = read_json_file(path);
  const std::string f = path.string();
  if (!j.is_object()) fail("{}: not a JSON object", f);
  std::string arch;
  if (j.contains("architectures") && j["architectures"].is_array() && !j["architectures"].empty() &&
      j["architectures"][0].is_string())
    arch = j["architectures"][0].get<std::string>();
  if (arch == "Gemma3ForConditionalGeneration") {  // Gemma 3 4B and up: the text part (the vision tower is not run)
    j = gemma3_text_config(j, f);
    arch = "Gemma3ForCausalLM";
  }
  ModelConfig c;
  if (arch == "LlamaForCausalLM" || arch == "MistralForCausalLM")
    c.arch = "llama";
  else if (arch == "Qwen2ForCausalLM")
    c.arch = "qwen2";
  else if (arch == "Qwen3ForCausalLM")
    c.arch = "qwen3";
  else if (arch == "MixtralForCausalLM")
    c.arch = "llama";  // llama.cpp's arch for Mixtral: llama with experts
  else if (arch == "Qwen3MoeForCausalLM")
    c.arch = "qwen3moe";
  else if (arch == "Gemma2ForCausalLM")
    c.arch = "gemma2";
  else if (arch == "Gemma3ForCausalLM")
    c.arch = "gemma3";
  else if (arch == "Phi3ForCausalLM")
    c.arch = "phi3";
  else
    fail(
        "{}: architectures '{}' is not supported (kvik runs LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, "
        "Qwen3ForCausalLM, MixtralForCausalLM, Qwen3MoeForCausalLM, Gemma2ForCausalLM, Gemma3ForCausalLM, "
        "Gemma3ForConditionalGeneration's text part, Phi3ForCausalLM)",
        f, arch);
  c.name = j.value("_name_or_path", std::string());
  const auto integer = [&](const char* key, std::optional<int64_t> dflt, int64_t max) -> int64_t {
    if (!j.contains(key) || j[key].is_null()) {
      if (!dflt) fail("{}: required field \"{}\" is missing", f, key);
      return *dflt;
    }
    if (!j[key].is_number_integer()) fail("{}: \"{}\" must be an integer, found {}", f, key, j[key].dump());
    const int64_t v = j[key].get<int64_t>();
    if (v <= 0 || v > max) fail("{}: \"{}\" = {} is out of range (1..{})", f, key, v, max);
    return v;
  };
  const auto number = [&](const char* key, double dflt) -> double {
    if (!j.contains(key) || j[key].is_null()) return dflt;
    if (!j[key].is_number()) fail("{}: \"{}\" must be a number, found {}", f, key, j[key].dump());
    return j[key].get<double>();
  };
  c.dim = integer("hidden_size", std::nullopt, 1 << 20);
  c.n_layers = integer("num_hidden_layers", std::nullopt, 4096);
  c.n_heads = integer("num_attention_heads", std::nullopt, 1 << 14);
  c.n_kv_heads = integer("num_key_value_heads", c.n_heads, c.n_heads);
  if (c.n_heads % c.n_kv_heads != 0)
    fail("{}: num_attention_heads {} is not a multiple of num_key_value_heads {}", f, c.n_heads, c.n_kv_heads);
  c.head_dim = integer("head_dim", c.dim / c.n_heads, 1 << 14);
  c.ff_dim = integer("intermediate_size", std::nullopt, 1 << 22);
  if (arch == "MixtralForCausalLM") {
    c.n_experts = integer("num_local_experts", std::nullopt, 4096);
    c.n_experts_used = integer("num_experts_per_tok", std::nullopt, c.n_experts);
    c.expert_ff_dim = c.ff_dim;
  } else if (arch == "Qwen3MoeForCausalLM") {
    c.n_experts = integer("num_experts", std::nullopt, 4096);
    c.n_experts_used = integer("num_experts_per_tok", std::nullopt, c.n_experts);
    c.expert_ff_dim = integer("moe_intermediate_size", std::nullopt, 1 << 22);
    if (j.contains("norm_topk_prob") && !j["norm_topk_prob"].is_boolean())
      fail("{}: \"norm_topk_prob\" must be true or false, found {}", f, j["norm_topk_prob"].dump());
    c.norm_topk_prob = j.value("norm_topk_prob", false);  // transformers' Qwen3MoeConfig default
    // Every block sparse (what the released models and llama.cpp's qwen3moe have).
    if (integer("decoder_sparse_step", 1, 4096) != 1 ||
        (j.contains("mlp_only_layers") && j["mlp_only_layers"].is_array() && !j["mlp_only_layers"].empty()))
      fail("{}: dense layers in a Qwen3-MoE (decoder_sparse_step != 1 or mlp_only_layers) are not supported", f);
  }
  c.vocab_size = integer("vocab_size", std::nullopt, 1 << 24);
  c.context_length = integer("max_position_embeddings", 2048, 1 << 24);
  c.rope_dim = c.head_dim;
  if (j.contains("partial_rotary_factor") && !j["partial_rotary_factor"].is_null()) {  // Phi-4-mini: 0.75
    const double prf = number("partial_rotary_factor", 1.0);
    c.rope_dim = static_cast<int64_t>(c.head_dim * prf);
    if (!(prf > 0 && prf <= 1) || c.rope_dim <= 0 || c.rope_dim % 2 != 0)
      fail("{}: \"partial_rotary_factor\" {} must give an even number of rotated dimensions (head_dim {})", f, prf,
           c.head_dim);
  }
  c.rope_freq_base = static_cast<float>(number("rope_theta", 10000.0));
  c.rms_eps = static_cast<float>(number("rms_norm_eps", 1e-6));
  if (!(c.rms_eps > 0)) fail("{}: \"rms_norm_eps\" must be positive", f);
  c.rope_type = RopeType::kNeox;                                       // HF checkpoints rotate halves (rotate_half)
  if (arch == "MistralForCausalLM" || arch == "MixtralForCausalLM") {  // null or absent: full attention
    if (j.contains("sliding_window") && !j["sliding_window"].is_null())
      c.sliding_window = integer("sliding_window", std::nullopt, 1 << 24);
  } else if (c.is_gemma()) {
    gemma_from_hf(j, f, c);
  } else if (c.arch == "phi3") {
    phi3_sliding_window_ignored(f, j.contains("sliding_window") && j["sliding_window"].is_number_integer()
                                       ? j["sliding_window"].get<int64_t>()
                                       : 0);
  } else if (j.contains("use_sliding_window") && j["use_sliding_window"].is_boolean() &&
             j["use_sliding_window"].get<bool>()) {
    fail("{}: use_sliding_window (Qwen's per-layer sliding window) is not supported", f);
  }
  c.tied_embeddings = j.value("tie_word_embeddings", c.is_gemma());  // Gemma's configs tie by default
  c.attn_bias = c.arch == "qwen2" ? true : j.value("attention_bias", false);
  if (c.is_gemma() && c.attn_bias) fail("{}: \"attention_bias\" true is not supported for Gemma", f);
  c.qk_norm = c.arch == "qwen3" || c.arch == "qwen3moe" || c.arch == "gemma3";
  c.torch_dtype = j.value("torch_dtype", std::string());
  if (j.contains("rope_scaling") && !j["rope_scaling"].is_null()) {
    const nlohmann::json& rs = j["rope_scaling"];
    const std::string type = rs.value("rope_type", rs.value("type", std::string()));
    if (type == "llama3") {
      const auto field = [&](const char* k) {
        if (!rs.contains(k) || !rs[k].is_number()) fail("{}: rope_scaling \"{}\" is missing or not a number", f, k);
        return rs[k].get<float>();
      };
      c.rope_freq_factors =
          llama3_rope_freq_factors(c.rope_freq_base, c.rope_dim, field("factor"), field("low_freq_factor"),
                                   field("high_freq_factor"), field("original_max_position_embeddings"));
    } else if (type == "linear") {  // positions divided by factor (Gemma 3's global layers)
      if (!rs.contains("factor") || !rs["factor"].is_number() || !(rs["factor"].get<double>() > 0))
        fail("{}: rope_scaling \"factor\" is missing or not a positive number", f);
      c.rope_freq_scale = static_cast<float>(1.0 / rs["factor"].get<double>());
    } else if (c.arch == "phi3" && (type == "longrope" || type == "su")) {
      longrope_from_hf(j, f, c);
    } else if (type != "default") {
      fail("{}: rope_scaling type '{}' is not supported (kvik knows llama3, linear and Phi-3's longrope)", f, type);
    }
  }
  return c;
}

GenerationConfig generation_config_from_hf(const std::string& dir) {
  GenerationConfig g;
  const std::filesystem::path path = std::filesystem::path(dir) / "generation_config.json";
  if (!std::filesystem::exists(path)) return g;
  const nlohmann::json j = read_json_file(path);
  if (j.contains("eos_token_id")) {
    const auto& e = j["eos_token_id"];
    if (e.is_number_integer())
      g.eos_token_ids.push_back(e.get<int32_t>());
    else if (e.is_array())
      for (const auto& x : e) {
        if (!x.is_number_integer()) fail("{}: eos_token_id entries must be integers", path.string());
        g.eos_token_ids.push_back(x.get<int32_t>());
      }
  }
  if (j.contains("temperature") && j["temperature"].is_number()) g.temperature = j["temperature"].get<float>();
  if (j.contains("top_p") && j["top_p"].is_number()) g.top_p = j["top_p"].get<float>();
  if (j.contains("top_k") && j["top_k"].is_number_integer()) g.top_k = j["top_k"].get<int32_t>();
  if (j.contains("do_sample") && j["do_sample"].is_boolean()) g.do_sample = j["do_sample"].get<bool>();
  return g;
}

}  // namespace kvik
