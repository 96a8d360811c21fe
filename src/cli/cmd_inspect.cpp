// kvik inspect: the metadata, shapes (docs/concepts.md's notation), parameter count and KV bytes per token of a
// GGUF file.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>

#include "cli/commands.h"
#include "cli/inspect_fit.h"
#include "core/error.h"
#include "formats/gguf.h"
#include "model/model_config.h"

namespace kvik::cli {
namespace {

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) b /= 1024, ++u;
  return fmt::format("{:.2f} {}", b, units[u]);
}

std::string value_str(const GgufValue& v) {
  switch (v.type) {
    case GgufType::STRING: {
      std::string s(v.str.substr(0, 80));
      for (char& ch : s)
        if (ch == '\n') ch = ' ';
      return "\"" + s + (v.str.size() > 80 ? "...\"" : "\"");
    }
    case GgufType::F32:
    case GgufType::F64: return fmt::format("{}", v.f);
    case GgufType::BOOL: return v.u ? "true" : "false";
    case GgufType::ARRAY: {
      std::string s = fmt::format("[{} x {}]", v.count, gguf_type_name(v.elem_type));
      if (v.elem_type == GgufType::STRING && !v.strings.empty())
        s += fmt::format(" \"{}\", ...", v.strings[0].substr(0, 20));
      return s;
    }
    case GgufType::I8:
    case GgufType::I16:
    case GgufType::I32:
    case GgufType::I64: return std::to_string(v.i);
    default: return std::to_string(v.u);
  }
}

// Per decode token a MoE model runs k of E experts: the active parameters, and the weight bytes one token reads
// (every tensor once, the embedding table one row, of each block's experts k / E) — what `kvik bench`'s roofline
// divides the bandwidth by (before repacking).
void print_active(const GgufFile& g, const ModelConfig& c, int64_t params, int64_t bytes) {
  int64_t expert_params = 0, expert_bytes = 0, emb_bytes = 0;
  for (const auto& t : g.tensors()) {
    if (t.name.find("_exps.") != std::string::npos)
      expert_params += t.numel(), expert_bytes += static_cast<int64_t>(t.nbytes);
    if (t.name == "token_embd.weight") emb_bytes = static_cast<int64_t>(t.nbytes);
  }
  const int64_t E = std::max<int64_t>(c.n_experts, 1), k = c.is_moe() ? c.n_experts_used : 1;
  const int64_t active = params - expert_params / E * (E - k);
  const int64_t read = bytes - (c.tied_embeddings ? 0 : emb_bytes) - expert_bytes / E * (E - k);
  if (c.is_moe())
    std::printf("active parameters per token: %s (%.3f M; %lld of %lld experts per block)\n",
                fmt::format("{:L}", active).c_str(), active / 1e6, (long long)k, (long long)E);
  std::printf("weight bytes read per decode token: %s (%lld)%s\n", human_bytes(static_cast<double>(read)).c_str(),
              (long long)read, c.is_moe() ? ", active experts only" : "");
}

}  // namespace

Run add_inspect(CLI::App& app) {
  auto path = std::make_shared<std::string>();
  auto fit = std::make_shared<double>(0.0);
  auto max_len = std::make_shared<int64_t>(0);
  auto* c = app.add_subcommand("inspect", "Shapes, tensors, parameter count and KV bytes per token of a GGUF model");
  c->add_option("path", *path, "GGUF file")->required();
  c->add_option("--fit", *fit, "Memory in GiB: print how many full-length sequences fit per weight type and KV dtype")
      ->check(CLI::PositiveNumber);
  c->add_option("--max-model-len", *max_len, "Sequence length for --fit (default: the model's context)")
      ->check(CLI::PositiveNumber);
  return [path, fit, max_len]() {
    auto g = GgufFile::open(*path);
    std::printf("file: %s (GGUF v%u, %zu metadata keys, %zu tensors, alignment %u)\n", path->c_str(), g->version(),
                g->metadata().size(), g->tensors().size(), g->alignment());
    int64_t params = 0, bytes = 0;
    for (const auto& t : g->tensors()) params += t.numel(), bytes += static_cast<int64_t>(t.nbytes);
    try {
      const ModelConfig c = config_from_gguf(*g);
      std::printf("architecture: %s%s%s\n\n", c.arch.c_str(), c.name.empty() ? "" : "  name: ", c.name.c_str());
      std::printf("shapes (the notation of docs/concepts.md)\n");
      std::printf("  d     %8lld  model width (embedding_length)\n", (long long)c.dim);
      std::printf("  L     %8lld  blocks\n", (long long)c.n_layers);
      std::printf("  n_h   %8lld  query heads\n", (long long)c.n_heads);
      std::printf("  n_kv  %8lld  KV heads (%s)\n", (long long)c.n_kv_heads,
                  c.n_kv_heads == c.n_heads ? "MHA"
                  : c.n_kv_heads == 1
                      ? "MQA"
                      : fmt::format("GQA, {} query heads share one KV head", c.n_heads / c.n_kv_heads).c_str());
      std::printf("  d_h   %8lld  head dimension\n", (long long)c.head_dim);
      if (c.is_moe()) {
        std::printf("  E     %8lld  experts per block (mixture of experts), k = %lld used per token\n",
                    (long long)c.n_experts, (long long)c.n_experts_used);
        std::printf("  d_ff  %8lld  expert MLP width\n", (long long)c.expert_ff_dim);
      } else {
        std::printf("  d_ff  %8lld  MLP width\n", (long long)c.ff_dim);
      }
      std::printf("  V     %8lld  vocabulary\n", (long long)c.vocab_size);
      if (c.all_layers_local()) {
        std::printf("  sliding-window attention: each query sees the last %lld positions\n",
                    (long long)c.sliding_window);
      } else if (c.sliding_window > 0) {
        int64_t local = 0;
        for (int64_t l = 0; l < c.n_layers; ++l) local += c.layer_is_local(l);
        std::printf(
            "  sliding-window attention on %lld of %lld layers (every %lld-th global): the last %lld positions\n",
            (long long)local, (long long)c.n_layers, (long long)c.sliding_window_pattern, (long long)c.sliding_window);
      }
      std::printf("  context %lld, rope base %g over %lld dims, rms eps %g, %s LM head\n\n",
                  (long long)c.context_length, c.rope_freq_base, (long long)c.rope_dim, c.rms_eps,
                  c.tied_embeddings ? "tied" : "separate");
      const int64_t kv32 = c.kv_bytes_per_token(4), kv16 = c.kv_bytes_per_token(2);
      std::printf("parameters: %s (%.3f M)\n", fmt::format("{:L}", params).c_str(), params / 1e6);
      std::printf("weight bytes: %s (%lld)\n", human_bytes(static_cast<double>(bytes)).c_str(), (long long)bytes);
      print_active(*g, c, params, bytes);
      std::printf(
          "KV bytes per token: 2 x L x n_kv x d_h x bytes = 2 x %lld x %lld x %lld x 4 = %lld (f32), %lld (f16)\n",
          (long long)c.n_layers, (long long)c.n_kv_heads, (long long)c.head_dim, (long long)kv32, (long long)kv16);
      std::printf("KV bytes for one full context of %lld tokens: %s (f32), %s (f16)\n\n", (long long)c.context_length,
                  human_bytes(static_cast<double>(kv32) * c.context_length).c_str(),
                  human_bytes(static_cast<double>(kv16) * c.context_length).c_str());
      if (*fit > 0) print_memory_fit(*g, c, *fit, *max_len);
    } catch (const Error& e) {
      std::printf("model: not runnable by kvik: %s\n\n", e.what());
      std::printf("parameters: %lld\nweight bytes: %s\n\n", (long long)params,
                  human_bytes(static_cast<double>(bytes)).c_str());
    }
    std::printf("metadata\n");
    for (const auto& [k, v] : g->metadata()) std::printf("  %-44s %s\n", k.c_str(), value_str(v).c_str());
    std::printf("\ntensors\n  %-36s %-6s %-22s %12s\n", "name", "type", "shape", "bytes");
    for (const auto& t : g->tensors()) {
      std::string shape = "[";
      for (size_t i = 0; i < t.shape.size(); ++i) shape += (i ? ", " : "") + std::to_string(t.shape[i]);
      shape += "]";
      std::printf("  %-36s %-6s %-22s %12zu\n", t.name.c_str(), std::string(dtype_name(t.dtype)).c_str(), shape.c_str(),
                  t.nbytes);
    }
    return 0;
  };
}

}  // namespace kvik::cli
