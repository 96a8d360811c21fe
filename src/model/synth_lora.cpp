#include "model/synth_lora.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "formats/gguf.h"
#include "formats/safetensors.h"
#include "model/hf_layout.h"

namespace kvik {
namespace {

std::vector<uint8_t> encode(DType type, const std::vector<float>& v, int64_t rows, int64_t cols) {
  const size_t rb = *row_bytes(type, cols);
  std::vector<uint8_t> out(rb * static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) quantize_row(type, &v[r * cols], out.data() + r * rb, cols);
  return out;
}

}  // namespace

std::vector<LoraTarget> parse_lora_targets(const std::string& csv) {
  static const char* const kShort[kNumLoraTargets] = {"q", "k", "v", "o", "gate", "up", "down"};
  std::vector<LoraTarget> targets;
  size_t at = 0;
  while (at <= csv.size()) {
    const size_t comma = std::min(csv.find(',', at), csv.size());
    const std::string part = csv.substr(at, comma - at);
    const auto* it = std::find(std::begin(kShort), std::end(kShort), part);
    if (it == std::end(kShort)) fail("--targets: '{}' is not one of q, k, v, o, gate, up, down", part);
    targets.push_back(static_cast<LoraTarget>(it - std::begin(kShort)));
    at = comma + 1;
  }
  return targets;
}

void synth_lora(const SynthLoraOptions& opt, const ModelConfig& c) {
  if (opt.rank <= 0) fail("--rank must be positive, got {}", opt.rank);
  if (opt.type != DType::F32 && opt.type != DType::F16 && opt.type != DType::BF16)
    fail("--type {}: LoRA weights are f32, f16 or bf16", dtype_name(opt.type));
  std::mt19937_64 rng(opt.seed);
  const int64_t r = opt.rank;
  GgufWriter g;
  std::vector<SafetensorsWriteTensor> st;
  g.set_string("general.architecture", c.arch);
  g.set_string("general.type", "adapter");
  g.set_string("general.name", std::filesystem::path(opt.out).filename().string());
  g.set_string("adapter.type", "lora");
  // rsLoRA folded into α (α·√r), so that a GGUF reader's α / r is PEFT's α / √r.
  g.set_f32("adapter.lora.alpha", opt.rslora ? opt.alpha * std::sqrt(static_cast<float>(r)) : opt.alpha);
  for (int64_t l = 0; l < c.n_layers; ++l)
    for (LoraTarget t : opt.targets) {
      const auto [in, out] = lora_projection_dims(c, t);
      std::normal_distribution<float> na(0.0f, 1.0f / std::sqrt(static_cast<float>(in))), nb(0.0f, opt.b_std);
      std::vector<float> a(static_cast<size_t>(r * in)), b(static_cast<size_t>(out * r));
      for (float& v : a) v = na(rng);
      for (float& v : b) v = nb(rng);
      const std::string hf = fmt::format("base_model.model.model.layers.{}.{}", l, lora_target_hf_name(t));
      st.push_back({hf + ".lora_A.weight", opt.type, {r, in}, encode(opt.type, a, r, in)});
      st.push_back({hf + ".lora_B.weight", opt.type, {out, r}, encode(opt.type, b, out, r)});
      // The GGUF form: the converter's q/k row permutation on B (Llama), shapes listed ne[0] first.
      std::vector<float> bg = b;
      if (c.arch == "llama" && (t == LoraTarget::kQ || t == LoraTarget::kK))
        for (int64_t row = 0; row < out; ++row)
          std::copy_n(&b[hf_row_of_gguf_row(row, c.head_dim) * r], r, &bg[row * r]);
      const std::string gn = fmt::format("blk.{}.{}.weight", l, lora_target_gguf_name(t));
      g.add_tensor(gn + ".lora_a", opt.type, {in, r}, encode(opt.type, a, r, in));
      g.add_tensor(gn + ".lora_b", opt.type, {r, out}, encode(opt.type, bg, out, r));
    }
  if (!opt.peft) return g.write(opt.out);
  std::filesystem::create_directories(opt.out);
  nlohmann::json cfg = {{"peft_type", "LORA"},      {"r", r},         {"lora_alpha", opt.alpha},
                        {"use_rslora", opt.rslora}, {"bias", "none"}, {"use_dora", false},
                        {"task_type", "CAUSAL_LM"}};
  cfg["target_modules"] = nlohmann::json::array();
  for (LoraTarget t : opt.targets) {
    const std::string m = lora_target_hf_name(t);
    cfg["target_modules"].push_back(m.substr(m.find('.') + 1));
  }
  std::ofstream f(opt.out + "/adapter_config.json");
  f << cfg.dump(2) << "\n";
  if (!f) fail("{}: cannot write adapter_config.json", opt.out);
  write_safetensors(opt.out + "/adapter_model.safetensors", st);
}

}  // namespace kvik
