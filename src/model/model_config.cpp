#include "model/model_config.h"

#include "core/error.h"
#include "formats/gguf.h"

namespace kvik {

ModelConfig config_from_gguf(const GgufFile& g) {
  ModelConfig c;
  c.arch = g.require_string("general.architecture");
  if (c.arch != "llama")
    fail("{}: general.architecture '{}' is not supported (kvik runs 'llama' GGUF models)", g.path(), c.arch);
  c.name = g.get_string("general.name").value_or("");
  const std::string a = c.arch + ".";
  auto positive = [&](const std::string& key, int64_t v, int64_t max) {
    if (v <= 0 || v > max) fail("{}: metadata key '{}' = {} is out of range (1..{})", g.path(), key, v, max);
    return v;
  };
  c.dim = positive(a + "embedding_length", g.require_int(a + "embedding_length"), 1 << 20);
  c.n_layers = positive(a + "block_count", g.require_int(a + "block_count"), 4096);
  c.ff_dim = positive(a + "feed_forward_length", g.require_int(a + "feed_forward_length"), 1 << 22);
  c.n_heads = positive(a + "attention.head_count", g.require_int(a + "attention.head_count"), 1 << 14);
  c.n_kv_heads = positive(a + "attention.head_count_kv",
                          g.get_int(a + "attention.head_count_kv").value_or(c.n_heads), c.n_heads);
  if (c.n_heads % c.n_kv_heads != 0)
    fail("{}: attention.head_count {} is not a multiple of attention.head_count_kv {}", g.path(), c.n_heads,
         c.n_kv_heads);
  c.head_dim = positive(a + "attention.key_length",
                        g.get_int(a + "attention.key_length").value_or(c.dim / c.n_heads), 1 << 14);
  if (auto vl = g.get_int(a + "attention.value_length"); vl && *vl != c.head_dim)
    fail("{}: attention.value_length {} differs from key_length {} (not supported)", g.path(), *vl, c.head_dim);
  c.context_length = positive(a + "context_length", g.get_int(a + "context_length").value_or(2048), 1 << 24);
  c.rope_dim = positive(a + "rope.dimension_count", g.get_int(a + "rope.dimension_count").value_or(c.head_dim),
                        c.head_dim);
  if (c.rope_dim % 2 != 0) fail("{}: rope.dimension_count {} must be even", g.path(), c.rope_dim);
  c.rope_freq_base = static_cast<float>(g.get_float(a + "rope.freq_base").value_or(10000.0));
  c.rms_eps = static_cast<float>(g.get_float(a + "attention.layer_norm_rms_epsilon").value_or(1e-5));
  if (!(c.rms_eps > 0.0f)) fail("{}: attention.layer_norm_rms_epsilon must be positive", g.path());

  const GgufTensorInfo* emb = g.find_tensor("token_embd.weight");
  if (!emb) fail("{}: required tensor 'token_embd.weight' is missing", g.path());
  if (emb->shape.size() != 2)
    fail("{}: tensor 'token_embd.weight' has {} dimensions, expected 2", g.path(), emb->shape.size());
  c.vocab_size = emb->shape[1];
  if (auto v = g.get_int(a + "vocab_size"); v && *v != c.vocab_size)
    fail("{}: {}vocab_size {} disagrees with token_embd.weight rows {}", g.path(), a, *v, c.vocab_size);
  c.tied_embeddings = g.find_tensor("output.weight") == nullptr;
  return c;
}

}  // namespace kvik
