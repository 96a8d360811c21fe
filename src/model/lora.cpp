#include "model/lora.h"

#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>

#include "core/error.h"
#include "formats/gguf.h"
#include "formats/json_file.h"
#include "formats/safetensors.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/parallel.h"
#include "model/hf_layout.h"

namespace kvik {
namespace {

constexpr const char* kGgufNames[kNumLoraTargets] = {"attn_q",   "attn_k", "attn_v",  "attn_output",
                                                     "ffn_gate", "ffn_up", "ffn_down"};
constexpr const char* kHfNames[kNumLoraTargets] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                                   "self_attn.o_proj", "mlp.gate_proj",    "mlp.up_proj",
                                                   "mlp.down_proj"};
constexpr const char* kSupported =
    "supported targets: q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj (GGUF attn_q, attn_k, attn_v, "
    "attn_output, ffn_gate, ffn_up, ffn_down)";

// One lora_A or lora_B tensor as found in the file, row-major.
struct RawTensor {
  std::string name;
  DType dtype = DType::F32;
  int64_t rows = 0, cols = 0;
  const uint8_t* data = nullptr;
};

struct RawPair {
  std::optional<RawTensor> a, b;
};
using RawPairs = std::map<std::pair<int64_t, int>, RawPair>;  // (layer, target) → A, B

// Row-major [rows, cols] of a 2-D tensor; anything else is an error naming it.
std::pair<int64_t, int64_t> matrix_shape(const std::string& file, const std::string& name,
                                         const std::vector<int64_t>& shape_rowmajor) {
  if (shape_rowmajor.size() != 2 || shape_rowmajor[0] <= 0 || shape_rowmajor[1] <= 0)
    fail("{}: tensor '{}' is not a non-empty matrix", file, name);
  return {shape_rowmajor[0], shape_rowmajor[1]};
}

void check_dtype(const std::string& file, const std::string& name, DType t) {
  if (t != DType::F32 && t != DType::F16 && t != DType::BF16)
    fail("{}: tensor '{}' has type {}; LoRA weights must be f32, f16 or bf16", file, name, dtype_name(t));
}

// Refuses what is not one of the seven projections, naming it.
[[noreturn]] void refuse_target(const std::string& file, const std::string& tensor, const std::string& what) {
  fail("{}: tensor '{}' targets {}, which kvik cannot apply a LoRA to ({})", file, tensor, what, kSupported);
}

enum class RowOrder { kSame, kHfToGguf, kGgufToHf };

// Copies A [r, in] into the adapter's storage in its file type (the matmul kernels take it as it is) and checks every
// value is finite.
WeightMatrix store_a(LoraAdapter& ad, const std::string& file, const RawTensor& t) {
  const size_t rb = *row_bytes(t.dtype, t.cols);
  std::vector<uint8_t>& bytes = ad.storage.emplace_back(rb * static_cast<size_t>(t.rows));
  std::memcpy(bytes.data(), t.data, bytes.size());
  std::vector<float> row(static_cast<size_t>(t.cols));
  for (int64_t r = 0; r < t.rows; ++r) {
    dequantize_row(t.dtype, bytes.data() + r * rb, row.data(), t.cols);
    for (float v : row)
      if (!std::isfinite(v)) fail("{}: tensor '{}' holds a NaN or infinite value (row {})", file, t.name, r);
  }
  return WeightMatrix{t.dtype, t.rows, t.cols, bytes.data(), rb};
}

// B [out, r] as the F32 Bᵀ [r, out] LoraWeight::b holds, its rows (out) permuted as `order` says; every value checked
// finite.
WeightMatrix store_bt(LoraAdapter& ad, const std::string& file, const RawTensor& t, RowOrder order, int64_t head_dim) {
  const int64_t out = t.rows, r = t.cols;
  const size_t rb = *row_bytes(t.dtype, r);
  std::vector<uint8_t>& bytes = ad.storage.emplace_back(static_cast<size_t>(r * out) * sizeof(float));
  float* bt = reinterpret_cast<float*>(bytes.data());
  std::vector<float> row(static_cast<size_t>(r));
  for (int64_t i = 0; i < out; ++i) {
    int64_t dst = i, src = i;
    if (order == RowOrder::kHfToGguf) src = hf_row_of_gguf_row(i, head_dim);
    if (order == RowOrder::kGgufToHf) dst = hf_row_of_gguf_row(i, head_dim);
    dequantize_row(t.dtype, t.data + src * rb, row.data(), r);
    for (int64_t k = 0; k < r; ++k) {
      if (!std::isfinite(row[k])) fail("{}: tensor '{}' holds a NaN or infinite value (row {})", file, t.name, src);
      bt[k * out + dst] = row[k];
    }
  }
  return WeightMatrix{DType::F32, r, out, bytes.data(), static_cast<size_t>(out) * sizeof(float)};
}

struct PairRules {
  std::string file;
  RowOrder qk_order = RowOrder::kSame;
  std::optional<int64_t> config_rank;  // PEFT: every tensor's r must be the config's
  float alpha = 0;                     // 0 (GGUF without alpha): scale = the user's scale, as llama.cpp
  bool rslora = false;
};

void add_pairs(LoraAdapter& ad, const RawPairs& pairs, const ModelConfig& c, const PairRules& rules,
               const LoraLoadOptions& opt) {
  if (pairs.empty()) fail("{}: no LoRA tensors found", rules.file);
  for (const auto& [key, p] : pairs) {
    const auto [layer, ti] = key;
    const auto target = static_cast<LoraTarget>(ti);
    const std::string where = fmt::format("layer {} {}", layer, kGgufNames[ti]);
    if (!p.a || !p.b)
      fail("{}: {}: tensor '{}' has no {} partner (missing tensor)", rules.file, where, (p.a ? p.a : p.b)->name,
           p.a ? "lora_B" : "lora_A");
    const auto [in, out] = lora_projection_dims(c, target);
    const int64_t r = p.a->rows;
    if (p.a->cols != in)
      fail(
          "{}: tensor '{}' has {} columns, but the base model's {} takes {} inputs (shape mismatch: an adapter for "
          "another model?)",
          rules.file, p.a->name, p.a->cols, kGgufNames[ti], in);
    if (p.b->rows != out)
      fail(
          "{}: tensor '{}' has {} rows, but the base model's {} has {} outputs (shape mismatch: an adapter for another "
          "model?)",
          rules.file, p.b->name, p.b->rows, kGgufNames[ti], out);
    if (p.b->cols != r)
      fail("{}: rank mismatch: '{}' has rank {}, '{}' has {} columns", rules.file, p.a->name, r, p.b->name, p.b->cols);
    if (rules.config_rank && r != *rules.config_rank)
      fail("{}: tensor '{}' has rank {}, but adapter_config.json says r = {}", rules.file, p.a->name, r,
           *rules.config_rank);
    if (opt.max_rank > 0 && r > opt.max_rank)
      fail("{}: rank {} is above --max-lora-rank {}", rules.file, r, opt.max_rank);
    const bool qk = target == LoraTarget::kQ || target == LoraTarget::kK;
    LoraWeight& w = ad.layers[layer][ti];
    w.a = store_a(ad, rules.file, *p.a);
    w.b = store_bt(ad, rules.file, *p.b, qk ? rules.qk_order : RowOrder::kSame, c.head_dim);
    const float base_scale = rules.alpha == 0 ? 1.0f
                             : rules.rslora   ? rules.alpha / std::sqrt(static_cast<float>(r))
                                              : rules.alpha / static_cast<float>(r);
    w.scale = base_scale * opt.scale;
    ad.rank = std::max(ad.rank, r);
  }
}

// "blk.N.<target>.weight.lora_a" → (layer, target, is_b); anything else is refused by name.
std::tuple<int64_t, int, bool> parse_gguf_name(const std::string& file, const std::string& name, int64_t n_layers) {
  const bool is_a = name.ends_with(".weight.lora_a"), is_b = name.ends_with(".weight.lora_b");
  if (!is_a && !is_b)
    fail("{}: tensor '{}' is not a LoRA tensor (expected <name>.weight.lora_a / .lora_b)", file, name);
  const std::string base = name.substr(0, name.size() - std::string(".weight.lora_a").size());
  if (base == "token_embd") refuse_target(file, name, "the token embeddings");
  if (base == "output") refuse_target(file, name, "the LM head");
  int layer = -1, consumed = 0;
  if (std::sscanf(base.c_str(), "blk.%d.%n", &layer, &consumed) != 1 || consumed == 0)
    refuse_target(file, name, "'" + base + "'");
  const std::string proj = base.substr(static_cast<size_t>(consumed));
  for (int t = 0; t < kNumLoraTargets; ++t)
    if (proj == kGgufNames[t]) {
      if (layer < 0 || layer >= n_layers)
        fail("{}: tensor '{}' is for layer {}, but the base model has {} layers", file, name, layer, n_layers);
      return {layer, t, is_b};
    }
  refuse_target(file, name, "'" + proj + "'");
}

std::shared_ptr<LoraAdapter> load_gguf_lora(const std::string& path, const ModelConfig& c, const LoraLoadOptions& opt) {
  auto g = GgufFile::open(path);
  const std::string type = g->get_string("general.type").value_or("");
  if (type != "adapter")
    fail("{}: general.type is '{}', expected 'adapter' (is this a model rather than a LoRA?)", path, type);
  const std::string atype = g->get_string("adapter.type").value_or("");
  if (atype != "lora") fail("{}: adapter.type is '{}', expected 'lora'", path, atype);
  const std::string arch = g->get_string("general.architecture").value_or("");
  if (arch != c.arch)
    fail("{}: the adapter is for architecture '{}', the base model is '{}' (base-model mismatch)", path, arch, c.arch);
  PairRules rules;
  rules.file = path;
  rules.alpha = static_cast<float>(g->get_float("adapter.lora.alpha").value_or(0.0));
  if (!std::isfinite(rules.alpha)) fail("{}: adapter.lora.alpha is not finite", path);
  // convert_lora_to_gguf.py permutes Llama q/k rows; a Hugging Face directory base keeps HF's order.
  if (c.arch == "llama" && !lora_base_uses_gguf_qk_order(c)) rules.qk_order = RowOrder::kGgufToHf;
  RawPairs pairs;
  for (const GgufTensorInfo& t : g->tensors()) {
    const auto [layer, target, is_b] = parse_gguf_name(path, t.name, c.n_layers);
    check_dtype(path, t.name, t.dtype);
    std::vector<int64_t> shape(t.shape.rbegin(), t.shape.rend());  // GGUF lists ne[0] (the row) first
    const auto [rows, cols] = matrix_shape(path, t.name, shape);
    (is_b ? pairs[{layer, target}].b : pairs[{layer, target}].a) = RawTensor{t.name, t.dtype, rows, cols, t.data};
  }
  auto ad = std::make_shared<LoraAdapter>();
  ad->alpha = rules.alpha;
  ad->layers.resize(static_cast<size_t>(c.n_layers));
  add_pairs(*ad, pairs, c, rules, opt);
  return ad;  // the weights were copied: the file closes here
}

// PEFT's tensor name "base_model.model.model.layers.N.self_attn.q_proj.lora_A.weight" → (layer, target, is_b).
std::tuple<int64_t, int, bool> parse_peft_name(const std::string& file, const std::string& name, int64_t n_layers) {
  if (name.find("lora_magnitude_vector") != std::string::npos)
    fail("{}: tensor '{}' is a DoRA magnitude; kvik serves plain LoRA only (DoRA is not supported)", file, name);
  if (name.find("lora_embedding_") != std::string::npos || name.find("embed_tokens") != std::string::npos)
    refuse_target(file, name, "the token embeddings");
  if (name.find("lm_head") != std::string::npos) refuse_target(file, name, "the LM head");
  const bool is_a = name.ends_with(".lora_A.weight"), is_b = name.ends_with(".lora_B.weight");
  if (!is_a && !is_b)
    fail("{}: tensor '{}' is not a LoRA tensor (expected ...lora_A.weight / lora_B.weight)", file, name);
  const std::string base = name.substr(0, name.size() - std::string(".lora_A.weight").size());
  int layer = -1, consumed = 0;
  if (std::sscanf(base.c_str(), "base_model.model.model.layers.%d.%n", &layer, &consumed) != 1 || consumed == 0)
    refuse_target(file, name, "'" + base + "'");
  const std::string proj = base.substr(static_cast<size_t>(consumed));
  for (int t = 0; t < kNumLoraTargets; ++t)
    if (proj == kHfNames[t]) {
      if (layer < 0 || layer >= n_layers)
        fail("{}: tensor '{}' is for layer {}, but the base model has {} layers", file, name, layer, n_layers);
      return {layer, t, is_b};
    }
  refuse_target(file, name, "'" + proj + "'");
}

// adapter_config.json's keys that change what the weights mean; refuses what kvik does not implement.
PairRules peft_rules(const std::string& dir, const nlohmann::json& j) {
  const std::string f = dir + "/adapter_config.json";
  if (!j.is_object()) fail("{}: not a JSON object", f);
  const auto refuse_key = [&](const char* key, const std::string& why) { fail("{}: \"{}\": {}", f, key, why); };
  if (j.contains("peft_type") && j["peft_type"] != "LORA")
    refuse_key("peft_type", "only LORA adapters are supported, got " + j["peft_type"].dump());
  if (j.value("use_dora", false) == true) refuse_key("use_dora", "DoRA is not supported");
  if (j.contains("modules_to_save") && !j["modules_to_save"].is_null() && !j["modules_to_save"].empty())
    refuse_key("modules_to_save", "fully trained modules (" + j["modules_to_save"].dump() + ") are not supported");
  for (const char* key : {"rank_pattern", "alpha_pattern"})
    if (j.contains(key) && !j[key].is_null() && !j[key].empty())
      refuse_key(key, "per-module ranks and alphas are not supported");
  if (j.value("bias", std::string("none")) != "none") refuse_key("bias", "LoRA biases are not supported");
  if (!j.contains("r") || !j["r"].is_number_integer() || j["r"].get<int64_t>() <= 0)
    refuse_key("r", "missing or not a positive integer");
  if (!j.contains("lora_alpha") || !j["lora_alpha"].is_number()) refuse_key("lora_alpha", "missing or not a number");
  PairRules rules;
  rules.file = dir;
  rules.config_rank = j["r"].get<int64_t>();
  rules.alpha = j["lora_alpha"].get<float>();
  if (!std::isfinite(rules.alpha) || rules.alpha == 0) refuse_key("lora_alpha", "must be finite and nonzero");
  rules.rslora = j.value("use_rslora", false);
  if (j.contains("target_modules") && j["target_modules"].is_array())
    for (const auto& m : j["target_modules"]) {
      const std::string s = m.is_string() ? m.get<std::string>() : m.dump();
      bool known = false;
      for (const char* h : kHfNames) known |= std::string(h).ends_with("." + s);
      if (!known) fail("{}: target_modules has '{}', which kvik cannot apply a LoRA to ({})", f, s, kSupported);
    }
  return rules;
}

std::shared_ptr<LoraAdapter> load_peft_lora(const std::string& dir, const ModelConfig& c, const LoraLoadOptions& opt) {
  PairRules rules = peft_rules(dir, read_json_file(std::filesystem::path(dir) / "adapter_config.json"));
  if (lora_base_uses_gguf_qk_order(c)) rules.qk_order = RowOrder::kHfToGguf;
  const std::string st_path = dir + "/adapter_model.safetensors";
  if (!std::filesystem::exists(st_path))
    fail("{}: adapter_model.safetensors is missing (adapter_model.bin is not supported)", dir);
  auto st = SafetensorsFile::open(st_path);
  RawPairs pairs;
  for (const auto& [name, t] : st->tensors()) {
    const auto [layer, target, is_b] = parse_peft_name(st_path, name, c.n_layers);
    check_dtype(st_path, name, t.dtype);
    const auto [rows, cols] = matrix_shape(st_path, name, t.shape);
    (is_b ? pairs[{layer, target}].b : pairs[{layer, target}].a) = RawTensor{name, t.dtype, rows, cols, t.data};
  }
  auto ad = std::make_shared<LoraAdapter>();
  ad->alpha = rules.alpha;
  ad->layers.resize(static_cast<size_t>(c.n_layers));
  add_pairs(*ad, pairs, c, rules, opt);
  return ad;
}

}  // namespace

const char* lora_target_gguf_name(LoraTarget t) { return kGgufNames[static_cast<int>(t)]; }
const char* lora_target_hf_name(LoraTarget t) { return kHfNames[static_cast<int>(t)]; }

std::pair<int64_t, int64_t> lora_projection_dims(const ModelConfig& c, LoraTarget t) {
  switch (t) {
    case LoraTarget::kQ: return {c.dim, c.q_dim()};
    case LoraTarget::kK:
    case LoraTarget::kV: return {c.dim, c.kv_dim()};
    case LoraTarget::kO: return {c.q_dim(), c.dim};
    case LoraTarget::kGate:
    case LoraTarget::kUp: return {c.dim, c.ff_dim};
    case LoraTarget::kDown: return {c.ff_dim, c.dim};
  }
  return {0, 0};
}

bool lora_base_uses_gguf_qk_order(const ModelConfig& base) {
  return base.arch == "llama" && base.rope_type == RopeType::kNorm;
}

std::shared_ptr<const LoraAdapter> load_lora_adapter(const std::string& path, const ModelConfig& base,
                                                     const LoraLoadOptions& options) {
  if (!std::isfinite(options.scale)) fail("{}: the LoRA scale {} is not finite", path, options.scale);
  if (!std::filesystem::exists(path)) fail("{}: no such file or directory", path);
  std::shared_ptr<LoraAdapter> ad =
      std::filesystem::is_directory(path) ? load_peft_lora(path, base, options) : load_gguf_lora(path, base, options);
  if (base.is_moe())  // the MLP of a mixture-of-experts block is its experts: a dense gate/up/down LoRA has no target
    for (const auto& layer : ad->layers)
      for (LoraTarget t : {LoraTarget::kGate, LoraTarget::kUp, LoraTarget::kDown})
        if (layer[static_cast<int>(t)].targeted())
          fail(
              "{}: the LoRA targets {} but the base model is a mixture of experts (LoRA on experts is not supported; "
              "attention targets q, k, v, o are)",
              path, lora_target_gguf_name(t));
  static std::atomic<uint64_t> next_id{1};
  ad->id = next_id++;
  ad->path = path;
  ad->name = options.name.empty() ? std::filesystem::path(path).filename().string() : options.name;
  return ad;
}

std::string lora_mismatch(const LoraAdapter& ad, const ModelConfig& c) {
  if (static_cast<int64_t>(ad.layers.size()) != c.n_layers)
    return fmt::format("the LoRA '{}' has {} layers, the model {}", ad.name, ad.layers.size(), c.n_layers);
  for (const auto& layer : ad.layers)
    for (int t = 0; t < kNumLoraTargets; ++t) {
      const auto [in, out] = lora_projection_dims(c, static_cast<LoraTarget>(t));
      if (layer[t].targeted() && (layer[t].a.cols != in || layer[t].b.cols != out))
        return fmt::format("the LoRA '{}' was loaded for a model of another shape ({})", ad.name, kGgufNames[t]);
    }
  return {};
}

bool LoraRunner::begin(std::span<const LoraAdapter* const> per_token) {
  groups_.clear();
  const auto T = static_cast<int64_t>(per_token.size());
  const auto group_of = [&](const LoraAdapter* a) -> int64_t {
    for (size_t g = 0; g < groups_.size(); ++g)
      if (groups_[g].adapter == a) return static_cast<int64_t>(g);
    return -1;
  };
  for (int64_t t = 0; t < T; ++t) {
    const LoraAdapter* a = per_token[t];
    if (!a) continue;
    const int64_t g = group_of(a);
    if (g < 0)
      groups_.push_back({a, 0, 1, true});
    else
      ++groups_[g].count;
  }
  if (groups_.empty()) return false;
  if (static_cast<int64_t>(rows_.size()) < T) rows_.resize(static_cast<size_t>(T));
  int64_t first = 0;
  for (Group& g : groups_) g.first = first, first += g.count, g.count = 0;
  for (int64_t t = 0; t < T; ++t)
    if (per_token[t]) {
      Group& g = groups_[group_of(per_token[t])];
      rows_[g.first + g.count++] = static_cast<int32_t>(t);
    }
  for (Group& g : groups_) g.contiguous = rows_[g.first + g.count - 1] - rows_[g.first] == g.count - 1;
  return true;
}

void LoraRunner::apply(int64_t layer, LoraTarget target, const float* x, int64_t in, float* y, int64_t out) {
  const auto grow = [](std::vector<float>& v, int64_t n) {
    if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
  };
  for (const Group& g : groups_) {
    const LoraWeight& w = g.adapter->weight(layer, target);
    if (!w.targeted()) continue;
    const int32_t* rows = &rows_[g.first];
    const float* xs = x + static_cast<int64_t>(rows[0]) * in;
    if (!g.contiguous) {  // gather the group's rows: xg [n, in]
      grow(xg_, g.count * in);
      for (int64_t i = 0; i < g.count; ++i) std::copy_n(x + rows[i] * in, in, &xg_[i * in]);
      xs = xg_.data();
    }
    const int64_t r = w.a.rows;
    grow(xa_, g.count * r);
    matmul(xs, g.count, w.a, xa_.data());  // xa = x Aᵀ [n, r]
    for (int64_t i = 0; i < g.count * r; ++i) xa_[i] *= w.scale;
    // y[row] += Σ_k xa[k] · Bᵀ[k] for each token of the group, in column chunks across the threads
    const auto* bt = reinterpret_cast<const float*>(w.b.data);
    constexpr int64_t kChunk = 512;
    const int64_t n_chunks = (out + kChunk - 1) / kChunk;
    cpu_detail::split(n_chunks, g.count * r * out, [&](int64_t c0, int64_t c1) {
      const int64_t j0 = c0 * kChunk, j1 = std::min(out, c1 * kChunk);
      for (int64_t i = 0; i < g.count; ++i) {
        float* yr = y + static_cast<int64_t>(rows[i]) * out;
        for (int64_t k = 0; k < r; ++k) {
          const float c = xa_[i * r + k];
          const float* bk = bt + k * out;
          for (int64_t j = j0; j < j1; ++j) yr[j] += c * bk[j];
        }
      }
    });
  }
}

}  // namespace kvik
