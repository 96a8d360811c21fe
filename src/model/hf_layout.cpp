#include "model/hf_layout.h"

#include <fmt/format.h>

#include "formats/gguf.h"

namespace kvik {

std::vector<HfTensorLayout> hf_tensor_layout(const ModelConfig& c) {
  const bool perm = c.arch == "llama";
  const int64_t d = c.dim, q = c.q_dim(), kv = c.kv_dim(), ff = c.ff_dim;
  std::vector<HfTensorLayout> t = {{"model.embed_tokens.weight", "token_embd.weight", {c.vocab_size, d}},
                                   {"model.norm.weight", "output_norm.weight", {d}}};
  if (!c.tied_embeddings) t.push_back({"lm_head.weight", "output.weight", {c.vocab_size, d}});
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l), b = fmt::format("blk.{}.", l);
    const auto add = [&](const char* hf, const char* gguf, std::vector<int64_t> shape, bool permute = false) {
      t.push_back({p + hf, b + gguf, std::move(shape), permute});
    };
    add("input_layernorm.weight", "attn_norm.weight", {d});
    add("self_attn.q_proj.weight", "attn_q.weight", {q, d}, perm);
    add("self_attn.k_proj.weight", "attn_k.weight", {kv, d}, perm);
    add("self_attn.v_proj.weight", "attn_v.weight", {kv, d});
    add("self_attn.o_proj.weight", "attn_output.weight", {d, q});
    if (c.attn_bias) {
      add("self_attn.q_proj.bias", "attn_q.bias", {q}, perm);
      add("self_attn.k_proj.bias", "attn_k.bias", {kv}, perm);
      add("self_attn.v_proj.bias", "attn_v.bias", {kv});
    }
    if (c.qk_norm) {
      add("self_attn.q_norm.weight", "attn_q_norm.weight", {c.head_dim});
      add("self_attn.k_norm.weight", "attn_k_norm.weight", {c.head_dim});
    }
    add("post_attention_layernorm.weight", "ffn_norm.weight", {d});
    if (c.is_moe()) {
      // Mixtral (arch llama): block_sparse_moe.gate + experts.N.w1/w3/w2; Qwen3-MoE: mlp.gate + mlp.experts.N.*.
      const bool mixtral = c.arch == "llama";
      const std::string m = mixtral ? "block_sparse_moe." : "mlp.";
      const int64_t eff = c.expert_ff_dim;
      add((m + "gate.weight").c_str(), "ffn_gate_inp.weight", {c.n_experts, d});
      for (int64_t e = 0; e < c.n_experts; ++e) {
        const std::string x = p + m + fmt::format("experts.{}.", e);
        t.push_back({x + (mixtral ? "w1" : "gate_proj") + ".weight", b + "ffn_gate_exps.weight", {eff, d}, false, e});
        t.push_back({x + (mixtral ? "w3" : "up_proj") + ".weight", b + "ffn_up_exps.weight", {eff, d}, false, e});
        t.push_back({x + (mixtral ? "w2" : "down_proj") + ".weight", b + "ffn_down_exps.weight", {d, eff}, false, e});
      }
      continue;
    }
    add("mlp.gate_proj.weight", "ffn_gate.weight", {ff, d});
    add("mlp.up_proj.weight", "ffn_up.weight", {ff, d});
    add("mlp.down_proj.weight", "ffn_down.weight", {d, ff});
  }
  return t;
}

bool hf_tensor_dropped(const std::string& hf_name) {
  const std::string_view tail = ".rotary_emb.inv_freq";
  return hf_name.size() >= tail.size() && hf_name.compare(hf_name.size() - tail.size(), tail.size(), tail) == 0;
}

void write_arch_metadata(const ModelConfig& c, GgufWriter& w) {
  const std::string a = c.arch + ".";
  const auto u32 = [&](const std::string& key, int64_t v) { w.set_u32(a + key, static_cast<uint32_t>(v)); };
  u32("context_length", c.context_length);
  u32("embedding_length", c.dim);
  u32("block_count", c.n_layers);
  u32("feed_forward_length", c.ff_dim);
  u32("attention.head_count", c.n_heads);
  u32("attention.head_count_kv", c.n_kv_heads);
  u32("attention.key_length", c.head_dim);
  u32("attention.value_length", c.head_dim);
  w.set_f32(a + "attention.layer_norm_rms_epsilon", c.rms_eps);
  w.set_f32(a + "rope.freq_base", c.rope_freq_base);
  u32("rope.dimension_count", c.rope_dim);
  u32("vocab_size", c.vocab_size);
  if (c.sliding_window > 0) u32("attention.sliding_window", c.sliding_window);
  if (c.is_moe()) {
    u32("expert_count", c.n_experts);
    u32("expert_used_count", c.n_experts_used);
    if (c.arch == "qwen3moe") u32("expert_feed_forward_length", c.expert_ff_dim);
  }
}

}  // namespace kvik
