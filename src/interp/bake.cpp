#include "interp/bake.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "core/error.h"
#include "formats/gguf.h"
#include "model/model_config.h"

namespace kvik::interp {

double orthogonalize_outputs(float* w, int64_t d, int64_t cols, const float* r) {
  std::vector<double> rw(static_cast<size_t>(cols), 0.0);  // r̂ᵀ W, [cols]
  for (int64_t i = 0; i < d; ++i)
    for (int64_t j = 0; j < cols; ++j) rw[j] += static_cast<double>(r[i]) * w[i * cols + j];
  double max_change = 0;
  for (int64_t i = 0; i < d; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      const double delta = r[i] * rw[j];
      w[i * cols + j] = static_cast<float>(w[i * cols + j] - delta);
      max_change = std::max(max_change, std::abs(delta));
    }
  return max_change;
}

double orthogonalize_rows(float* e, int64_t rows, int64_t d, const float* r) {
  double max_change = 0;
  for (int64_t v = 0; v < rows; ++v) {
    float* row = e + v * d;
    double dot = 0;
    for (int64_t i = 0; i < d; ++i) dot += static_cast<double>(row[i]) * r[i];
    for (int64_t i = 0; i < d; ++i) {
      row[i] = static_cast<float>(row[i] - dot * r[i]);
      max_change = std::max(max_change, std::abs(dot * r[i]));
    }
  }
  return max_change;
}

namespace {

// Which stream layer's writer a tensor is: 0 for the embedding, ℓ for block ℓ−1's o_proj / down, else -1.
int32_t writer_layer(const std::string& name) {
  if (name == "token_embd.weight") return 0;
  int32_t blk = 0;
  char kind[32] = {};
  if (std::sscanf(name.c_str(), "blk.%d.%31s", &blk, kind) != 2) return -1;
  const std::string k = kind;
  return k == "attn_output.weight" || k == "ffn_down.weight" ? blk + 1 : -1;
}

std::vector<float> dequantize_all(const GgufTensorInfo& t, int64_t rows, int64_t cols) {
  std::vector<float> w(static_cast<size_t>(rows * cols));
  const size_t rb = *row_bytes(t.dtype, cols);
  for (int64_t i = 0; i < rows; ++i) dequantize_row(t.dtype, t.data + i * rb, &w[i * cols], cols);
  return w;
}

std::vector<uint8_t> quantize_all(const std::vector<float>& w, int64_t rows, int64_t cols, DType type,
                                  const std::string& name) {
  const std::optional<size_t> rb = row_bytes(type, cols);
  if (!rb)
    fail("tensor '{}': rows of {} values cannot be stored as {} (its block holds {} values)", name, cols,
         dtype_name(type), traits(type).block_size);
  std::vector<uint8_t> out(*rb * rows);
  for (int64_t i = 0; i < rows; ++i) quantize_row(type, &w[i * cols], out.data() + i * *rb, cols);
  return out;
}

}  // namespace

BakeReport bake_ablation(const BakeOptions& opt) {
  auto src = GgufFile::open(opt.model_path);
  const ModelConfig c = config_from_gguf(*src);
  if (c.is_gemma())
    fail(
        "{}: a {} model normalizes the attention and MLP outputs after attn_output / ffn_down, so removing the "
        "direction from those matrices would not remove it from the stream; ablate at run time (--ablate) instead",
        opt.model_path, c.arch);
  if (static_cast<int64_t>(opt.direction.vector.size()) != c.dim)
    fail("the direction has d = {}, the model {} has d = {}", opt.direction.vector.size(), opt.model_path, c.dim);
  static const DType quantizable[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0,
                                      DType::Q4_0, DType::Q4_K, DType::Q5_K, DType::Q6_K};
  const auto can_write = [](DType t) {
    return std::find(std::begin(quantizable), std::end(quantizable), t) != std::end(quantizable);
  };
  if (opt.type && !can_write(*opt.type))
    fail("--type {}: kvik cannot quantize to it (f32, f16, bf16, q8_0, q4_0, q4_K, q5_K, q6_K)", dtype_name(*opt.type));
  std::vector<bool> at(static_cast<size_t>(c.n_layers + 1), opt.layers.empty());
  for (int32_t l : opt.layers) {
    if (l < 0 || l > c.n_layers) fail("--layers: {} is outside 0..{}", l, c.n_layers);
    at[l] = true;
  }
  // r̂ normalized again in double (the file's vector is unit length up to float rounding).
  std::vector<float> r = opt.direction.vector;
  double n2 = 0;
  for (float v : r) n2 += static_cast<double>(v) * v;
  if (!(n2 > 0) || !std::isfinite(n2)) fail("the direction is zero or not finite");
  for (float& v : r) v = static_cast<float>(v / std::sqrt(n2));

  GgufWriter w;
  if (src->alignment() != 32) w.set_alignment(src->alignment());
  for (const auto& [key, value] : src->metadata())
    if (key != "general.alignment" && key.rfind("kvik.ablation.", 0) != 0) w.set_raw(key, value.raw);
  std::vector<int32_t> layers;
  for (int32_t l = 0; l <= c.n_layers; ++l)
    if (at[l]) layers.push_back(l);
  w.set_array_i32("kvik.ablation.layers", layers);
  w.set_string("kvik.ablation.direction_model", opt.direction.model);
  w.set_i32("kvik.ablation.direction_layer", opt.direction.layer);

  BakeReport rep;
  for (const GgufTensorInfo& t : src->tensors()) {
    const int32_t l = writer_layer(t.name);
    const std::span<const uint8_t> bytes(t.data, t.nbytes);
    if (l < 0 || !at[l]) {
      w.add_tensor(t.name, t.dtype, t.shape, bytes);
      continue;
    }
    if (t.shape.size() != 2) fail("{}: tensor '{}' is not a matrix", opt.model_path, t.name);
    const int64_t cols = t.shape[0], rows = t.shape[1];
    if (!can_write(t.dtype) && !opt.type)
      fail("tensor '{}' is {}, which kvik cannot requantize; give --type", t.name, dtype_name(t.dtype));
    std::vector<float> m = dequantize_all(t, rows, cols);
    const double change = l == 0 ? orthogonalize_rows(m.data(), rows, cols, r.data())
                                 : orthogonalize_outputs(m.data(), rows, cols, r.data());
    rep.max_abs_change = std::max(rep.max_abs_change, change);
    const DType type = opt.type.value_or(t.dtype);
    w.add_tensor(t.name, type, t.shape, quantize_all(m, rows, cols, type, t.name));
    ++rep.tensors_rewritten;
    // A tied LM head reads the embedding table: keep it as it was, as its own output.weight.
    if (l == 0 && c.tied_embeddings) {
      w.add_tensor("output.weight", t.dtype, t.shape, bytes);
      rep.untied_output = true;
    }
  }
  w.write(opt.out_path);
  return rep;
}

}  // namespace kvik::interp
