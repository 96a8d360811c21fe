#include "model/quant_recipe.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdio>  // sscanf

namespace kvik {
namespace {

// llama_ftype values (llama.h).
constexpr std::array kMixes = {
    QuantMix{"q8_0", 7, DType::Q8_0},    QuantMix{"q4_0", 2, DType::Q4_0},    QuantMix{"q4_1", 3, DType::Q4_1},
    QuantMix{"q5_0", 8, DType::Q5_0},    QuantMix{"q5_1", 9, DType::Q5_1},    QuantMix{"iq4_nl", 25, DType::IQ4_NL},
    QuantMix{"q4_k_s", 14, DType::Q4_K}, QuantMix{"q4_k_m", 15, DType::Q4_K}, QuantMix{"q5_k_s", 16, DType::Q5_K},
    QuantMix{"q5_k_m", 17, DType::Q5_K}, QuantMix{"q6_k", 18, DType::Q6_K},   QuantMix{"f16", 1, DType::F16},
    QuantMix{"bf16", 32, DType::BF16},   QuantMix{"f32", 0, DType::F32},
};

bool is_quantized(DType t) { return t != DType::F32 && t != DType::F16 && t != DType::BF16; }

bool contains(const std::string& s, std::string_view part) { return s.find(part) != std::string::npos; }

enum class Category {
  kOutput,
  kTokenEmbd,
  kAttnQkv,
  kAttnKvB,
  kAttnV,
  kAttnK,
  kAttnQ,
  kAttnOutput,
  kFfnUp,
  kFfnGate,
  kFfnDown,
  kOther
};

Category category(const std::string& name) {
  if (name == "output.weight") return Category::kOutput;
  if (name == "token_embd.weight" || name == "per_layer_token_embd.weight") return Category::kTokenEmbd;
  if (contains(name, "attn_qkv.weight")) return Category::kAttnQkv;
  if (contains(name, "attn_kv_b.weight")) return Category::kAttnKvB;
  if (contains(name, "attn_v.weight")) return Category::kAttnV;
  if (contains(name, "attn_k.weight")) return Category::kAttnK;
  if (contains(name, "attn_q.weight")) return Category::kAttnQ;
  if (contains(name, "attn_output.weight")) return Category::kAttnOutput;
  if (contains(name, "ffn_up")) return Category::kFfnUp;
  if (contains(name, "ffn_gate")) return Category::kFfnGate;
  if (contains(name, "ffn_down")) return Category::kFfnDown;
  return Category::kOther;
}
bool attn_v_like(Category c) { return c == Category::kAttnV || c == Category::kAttnQkv || c == Category::kAttnKvB; }

int n_dims(const std::vector<int64_t>& shape) {  // ggml_n_dims: trailing 1s do not count
  int n = static_cast<int>(shape.size());
  while (n > 1 && shape[static_cast<size_t>(n - 1)] == 1) --n;
  return n;
}

// llama-quantize quantizes 2-D (and higher) "...weight" tensors except norms and a few small special tables.
bool allows_quantization(const RecipeTensor& t, const RecipeOptions& o) {
  const std::string& n = t.name;
  if (n_dims(t.shape) < 2) return false;
  if (n.size() < 6 || n.compare(n.size() - 6, 6, "weight") != 0) return false;
  if (contains(n, "_norm.weight")) return false;
  if (o.leave_output_tensor && n == "output.weight") return false;
  for (std::string_view skip : {"ffn_gate_inp.weight", "ffn_gate_tid2eid.weight", "altup", "laurel",
                                "per_layer_model_proj", "ssm_conv1d", "shortconv.conv.weight", "attn_rel_b.weight",
                                ".position_embd", ".rel_pos", ".patch_embd", ".patch_merger", "time_mix_"})
    if (contains(n, skip)) return false;
  return n != "position_embd.weight" && n != "token_types.weight";
}

bool use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

struct State {
  const QuantMix& mix;
  const RecipeModel& model;
  const RecipeOptions& opts;
  int n_attention_wv = 0, i_attention_wv = 0, i_ffn_down = 0;
  bool tied_embeddings = true;
  bool is(std::string_view mix_name) const { return mix.name == mix_name; }
  bool is_70b() const {
    return model.n_layers == 80 &&
           ((model.arch == "llama" && model.n_heads != model.n_kv_heads) || model.arch == "qwen2");
  }
  int64_t n_gqa() const { return model.n_kv_heads > 0 ? model.n_heads / model.n_kv_heads : 1; }
};

DType attn_v_type(State& s, DType t) {
  if (s.is("iq4_nl") && s.n_gqa() >= 4)
    t = DType::Q5_K;
  else if ((s.is("q4_k_m") || s.is("q5_k_m")) && use_more_bits(s.i_attention_wv, s.n_attention_wv))
    t = DType::Q6_K;
  else if (s.is("q4_k_s") && s.i_attention_wv < 4)
    t = DType::Q5_K;
  if (s.is_70b() && (t == DType::Q3_K || t == DType::Q4_K)) t = DType::Q5_K;
  ++s.i_attention_wv;
  return t;
}

DType ffn_down_type(State& s, DType t) {
  const int i = s.i_ffn_down, n = static_cast<int>(s.model.n_layers);
  if (s.is("q4_k_m")) {
    if (use_more_bits(i, n)) t = DType::Q6_K;
  } else if (i < n / 8 && s.is("iq4_nl")) {
    t = DType::Q5_K;
  } else if (s.is("q5_k_m") && use_more_bits(i, n)) {
    t = DType::Q6_K;
  } else if (s.is("q4_k_s") && i < n / 8) {
    t = DType::Q5_K;
  }
  ++s.i_ffn_down;
  return t;
}

// llama_tensor_get_type_impl for the mixes above (the branches for other mixes and for MoE models drop out).
DType mix_type(State& s, DType t, const RecipeTensor& tensor, Category c) {
  if (c == Category::kOutput || (s.tied_embeddings && c == Category::kTokenEmbd)) {
    if (s.opts.output_tensor_type) return *s.opts.output_tensor_type;
    if (tensor.shape[0] % traits(t).block_size != 0) return DType::Q8_0;
    return t != DType::Q8_0 ? DType::Q6_K : t;
  }
  if (c == Category::kTokenEmbd) return s.opts.token_embedding_type.value_or(t);
  if (attn_v_like(c)) return attn_v_type(s, t);
  if (c == Category::kFfnDown) return ffn_down_type(s, t);
  if (c == Category::kAttnQkv) {  // unreachable (attn_v_like comes first), as in llama.cpp
    if (s.is("q4_k_m")) return DType::Q5_K;
    if (s.is("q5_k_m")) return DType::Q6_K;
  }
  return t;
}

// Rows a type's blocks do not divide: K-quants step down to a 32-element type, 32-element types to F16.
RecipeEntry fallback(const RecipeTensor& tensor, DType t) {
  const int64_t cols = tensor.shape[0];
  if (cols % traits(t).block_size == 0) return {t, false};
  DType to = t;
  switch (t) {
    case DType::Q2_K:
    case DType::Q3_K: to = DType::Q4_0; break;
    case DType::Q4_K: to = DType::Q5_0; break;
    case DType::Q5_K: to = DType::Q5_1; break;
    case DType::Q6_K: to = DType::Q8_0; break;
    default: break;
  }
  if (cols % traits(to).block_size != 0) to = DType::F16;
  return {to, true, t};
}

RecipeEntry tensor_type(State& s, const RecipeTensor& t) {
  if (!allows_quantization(t, s.opts)) return {t.from, false};
  const Category c = category(t.name);
  if (s.opts.token_embedding_type && c == Category::kTokenEmbd) return {*s.opts.token_embedding_type, false};
  if (s.opts.output_tensor_type && c == Category::kOutput) return {*s.opts.output_tensor_type, false};
  if (!is_quantized(s.mix.base)) return {s.mix.base, false};
  return fallback(t, mix_type(s, s.mix.base, t, c));
}

int layer_of(const std::string& name) {
  int layer = -1;
  std::sscanf(name.c_str(), "blk.%d.", &layer);
  return layer;
}

}  // namespace

std::optional<QuantMix> quant_mix(std::string_view name) {
  std::string lower(name);
  for (auto& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (lower == "q4_k") lower = "q4_k_m";
  if (lower == "q5_k") lower = "q5_k_m";
  for (const auto& m : kMixes)
    if (m.name == lower) return m;
  return std::nullopt;
}

std::string quant_mix_names() {
  std::string s;
  for (const auto& m : kMixes) s += (s.empty() ? "" : ", ") + std::string(m.name);
  return s + " (q4_k, q5_k: the _m mixes)";
}

std::vector<RecipeTensor> in_quantize_order(std::vector<RecipeTensor> tensors) {
  std::stable_sort(tensors.begin(), tensors.end(), [](const RecipeTensor& a, const RecipeTensor& b) {
    const int la = layer_of(a.name), lb = layer_of(b.name);
    return la != lb ? la < lb : a.name < b.name;
  });
  return tensors;
}

std::vector<RecipeEntry> quant_recipe(const QuantMix& mix, const RecipeModel& model,
                                      const std::vector<RecipeTensor>& tensors, const RecipeOptions& opts) {
  State s{mix, model, opts};
  for (const auto& t : tensors) {
    if (attn_v_like(category(t.name))) ++s.n_attention_wv;
    if (t.name == "output.weight") s.tied_embeddings = false;
  }
  std::vector<RecipeEntry> out;
  out.reserve(tensors.size());
  for (const auto& t : tensors) out.push_back(tensor_type(s, t));
  return out;
}

}  // namespace kvik
