// kvik inspect --fit: the memory-fit table — for each weight type a user would pick and each KV cache
// dtype, the weight bytes, KV bytes per token and how many full-length sequences fit in a memory budget.
#include <fmt/format.h>

#include <cstdio>
#include <string>

#include "cli/inspect_fit.h"
#include "model/kv_cache.h"

namespace kvik::cli {
namespace {

struct TypeSize {
  const char* name;
  int64_t block;  // elements per block
  int64_t bytes;  // bytes per block
};
constexpr TypeSize kF16{"F16", 1, 2}, kQ8_0{"Q8_0", 32, 34}, kQ6_K{"Q6_K", 256, 210}, kQ4_K{"Q4_K", 256, 144},
    kQ5_0{"Q5_0", 32, 22}, kQ4_0{"Q4_0", 32, 18}, kIQ4_NL{"IQ4_NL", 32, 18};

// llama-quantize's use_more_bits: the first and last eighth of the layers and every third in between.
bool use_more_bits(int64_t i, int64_t n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

// The type llama-quantize gives a matrix under `ftype` (no imatrix): the output head (or the tied embedding)
// Q6_K, Q4_K_M's extra bits for attn_v / ffn_down, and its fallbacks for rows that are not whole blocks.
TypeSize matrix_type(const std::string& ftype, const std::string& name, int64_t cols, int64_t layers, bool has_output) {
  TypeSize t = ftype == "F16"      ? kF16
               : ftype == "Q8_0"   ? kQ8_0
               : ftype == "Q6_K"   ? kQ6_K
               : ftype == "Q4_K_M" ? kQ4_K
               : ftype == "Q4_0"   ? kQ4_0
                                   : kIQ4_NL;
  const bool head = name == "output.weight" || (!has_output && name == "token_embd.weight");
  if (head && ftype != "F16" && ftype != "Q8_0") t = kQ6_K;
  if (ftype == "Q4_K_M" && (name.find("attn_v.") != std::string::npos || name.find("ffn_down.") != std::string::npos)) {
    const int64_t layer = std::stoll(name.substr(4));  // "blk.N."
    if (use_more_bits(layer, layers)) t = kQ6_K;
  }
  if (cols % t.block != 0) t = t.block == 256 ? (t.bytes == kQ6_K.bytes ? kQ8_0 : kQ5_0) : t;
  if (cols % t.block != 0) t = kF16;
  return t;
}

std::string size_str(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) b /= 1024, ++u;
  return fmt::format("{:.2f} {}", b, units[u]);
}

int64_t weight_bytes_as(const GgufFile& g, const ModelConfig& c, const std::string& ftype) {
  const bool has_output = g.find_tensor("output.weight") != nullptr;
  int64_t total = 0;
  for (const GgufTensorInfo& t : g.tensors()) {
    if (t.shape.size() < 2) {  // norms and biases stay f32
      total += static_cast<int64_t>(t.nbytes);
      continue;
    }
    const TypeSize ts = matrix_type(ftype, t.name, t.shape[0], c.n_layers, has_output);
    total += t.numel() / ts.block * ts.bytes;
  }
  return total;
}

}  // namespace

void print_memory_fit(const GgufFile& g, const ModelConfig& c, double gib, int64_t max_model_len) {
  const int64_t len = max_model_len > 0 ? max_model_len : c.context_length;
  const double budget = gib * static_cast<double>(int64_t{1} << 30);
  std::printf(
      "memory fit in %.2f GiB, sequences of %lld tokens (weights as llama-quantize would type them, no "
      "imatrix; KV as kvik stores it)\n",
      gib, (long long)len);
  std::printf("  %-7s %11s  %-5s %9s %11s  %s\n", "weights", "size", "KV", "KV B/tok", "KV per seq", "fits");
  for (const char* ftype : {"F16", "Q8_0", "Q6_K", "Q4_K_M", "Q4_0", "IQ4_NL"}) {
    const int64_t wb = weight_bytes_as(g, c, ftype);
    for (DType kv : {DType::F16, DType::Q8_0}) {
      if (kv == DType::Q8_0 && c.kv_dim() % 32 != 0) {
        std::printf("  %-7s %11s  %-5s  n/a (n_kv x d_h = %lld is not a multiple of 32)\n", ftype,
                    size_str(static_cast<double>(wb)).c_str(), std::string(dtype_name(kv)).c_str(),
                    (long long)c.kv_dim());
        continue;
      }
      const int64_t per_tok = KvCacheTensors::bytes_per_token(c, kv);
      const double per_seq = static_cast<double>(per_tok) * static_cast<double>(len);
      const double left = budget - static_cast<double>(wb);
      const int64_t seqs = left > 0 ? static_cast<int64_t>(left / per_seq) : 0;
      const std::string fits = seqs > 0 ? fmt::format("{} sequence{} ({} tokens)", seqs, seqs == 1 ? "" : "s",
                                                      static_cast<int64_t>(left / per_tok))
                                        : fmt::format("does not fit: {} short of one sequence",
                                                      size_str(static_cast<double>(wb) + per_seq - budget));
      std::printf("  %-7s %11s  %-5s %9lld %11s  %s\n", ftype, size_str(static_cast<double>(wb)).c_str(),
                  std::string(dtype_name(kv)).c_str(), (long long)per_tok, size_str(per_seq).c_str(), fits.c_str());
    }
  }
  std::printf("\n");
}

}  // namespace kvik::cli
