#include "model/lora_merge.h"

#include <map>
#include <vector>

#include "core/error.h"
#include "formats/gguf.h"
#include "model/lora.h"
#include "tensor/quantize.h"

namespace kvik {
namespace {

// w [out, in] += s · B A, with A [r, in] and B [out, r] (LoraWeight::b holds Bᵀ [r, out] in F32; F32 sums, r terms
// per element).
void add_product(float* w, const LoraWeight& lw) {
  const int64_t r = lw.a.rows, in = lw.a.cols, out = lw.b.cols;
  std::vector<float> a(static_cast<size_t>(r * in));
  dequantize_rows(lw.a.dtype, lw.a.data, a.data(), r, in);
  const auto* bt = reinterpret_cast<const float*>(lw.b.data);
  std::vector<float> row(static_cast<size_t>(in));
  for (int64_t o = 0; o < out; ++o) {
    std::fill(row.begin(), row.end(), 0.0f);
    for (int64_t k = 0; k < r; ++k) {
      const float bk = bt[k * out + o];
      const float* ak = &a[k * in];
      for (int64_t i = 0; i < in; ++i) row[i] += bk * ak[i];
    }
    for (int64_t i = 0; i < in; ++i) w[o * in + i] += lw.scale * row[i];
  }
}

}  // namespace

int64_t merge_lora(const MergeLoraOptions& opt) {
  auto src = GgufFile::open(opt.base_path);
  const ModelConfig c = config_from_gguf(*src);
  LoraLoadOptions lo;
  lo.scale = opt.scale;
  const auto adapter = load_lora_adapter(opt.adapter_path, c, lo);
  if (opt.type && !can_quantize(*opt.type)) fail("--type {}: kvik cannot write that type", dtype_name(*opt.type));
  std::map<std::string, const LoraWeight*> targeted;  // GGUF tensor name → its LoRA
  for (int64_t l = 0; l < c.n_layers; ++l)
    for (int t = 0; t < kNumLoraTargets; ++t) {
      const LoraWeight& w = adapter->weight(l, static_cast<LoraTarget>(t));
      if (w.targeted())
        targeted[fmt::format("blk.{}.{}.weight", l, lora_target_gguf_name(static_cast<LoraTarget>(t)))] = &w;
    }
  GgufWriter w;
  if (src->alignment() != 32) w.set_alignment(src->alignment());
  for (const auto& [key, value] : src->metadata())
    if (key != "general.alignment") w.set_raw(key, value.raw);
  int64_t rewritten = 0;
  for (const GgufTensorInfo& t : src->tensors()) {
    auto it = targeted.find(t.name);
    if (it == targeted.end()) {
      w.add_tensor(t.name, t.dtype, t.shape, {t.data, t.nbytes});
      continue;
    }
    const int64_t cols = t.shape[0], rows = t.shape[1];
    const DType type = opt.type.value_or(t.dtype);
    if (!can_quantize(type))
      fail("{}: tensor '{}' is {}, which kvik cannot write back; give --type", opt.base_path, t.name,
           dtype_name(t.dtype));
    std::vector<float> m(static_cast<size_t>(rows * cols));
    dequantize_rows(t.dtype, t.data, m.data(), rows, cols);
    add_product(m.data(), *it->second);
    std::vector<uint8_t> bytes(*row_bytes(type, cols) * static_cast<size_t>(rows));
    quantize_rows(type, m.data(), bytes.data(), rows, cols);
    w.add_tensor(t.name, type, t.shape, bytes);
    ++rewritten;
  }
  w.write(opt.out_path);
  return rewritten;
}

}  // namespace kvik
