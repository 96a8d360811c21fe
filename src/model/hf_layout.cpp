#include "model/hf_layout.h"

#include <fmt/format.h>

#include "formats/gguf.h"

namespace kvik {

namespace {

// Gemma 2 / 3: norms before and after attention and the MLP (llama.cpp's post_attention_norm, post_ffw_norm), q/k
// norms (Gemma 3), tied embeddings; every norm weight shifted by 1 in the GGUF.
std::vector<HfTensorLayout> gemma_layout(const ModelConfig& c) {
  const int64_t d = c.dim, q = c.q_dim(), kv = c.kv_dim(), ff = c.ff_dim;
  std::vector<HfTensorLayout> t = {{"model.embed_tokens.weight", "token_embd.weight", {c.vocab_size, d}},
                                   {"model.norm.weight", "output_norm.weight", {d}, false, -1, true}};
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l), b = fmt::format("blk.{}.", l);
    const auto add = [&](const char* hf, const char* gguf, std::vector<int64_t> shape) {
      t.push_back({p + hf, b + gguf, shape, false, -1, shape.size() == 1});
    };
    add("input_layernorm.weight", "attn_norm.weight", {d});
    add("self_attn.q_proj.weight", "attn_q.weight", {q, d});
    add("self_attn.k_proj.weight", "attn_k.weight", {kv, d});
    add("self_attn.v_proj.weight", "attn_v.weight", {kv, d});
    add("self_attn.o_proj.weight", "attn_output.weight", {d, q});
    if (c.qk_norm) {
      add("self_attn.q_norm.weight", "attn_q_norm.weight", {c.head_dim});
      add("self_attn.k_norm.weight", "attn_k_norm.weight", {c.head_dim});
    }
    add("post_attention_layernorm.weight", "post_attention_norm.weight", {d});
    add("pre_feedforward_layernorm.weight", "ffn_norm.weight", {d});
    add("mlp.gate_proj.weight", "ffn_gate.weight", {ff, d});
    add("mlp.up_proj.weight", "ffn_up.weight", {ff, d});
    add("mlp.down_proj.weight", "ffn_down.weight", {d, ff});
    add("post_feedforward_layernorm.weight", "post_ffw_norm.weight", {d});
  }
  return t;
}

// Phi-3: q/k/v fused in qkv_proj (attn_qkv), gate and up in gate_up_proj (ffn_up, gate rows first), an untied head.
std::vector<HfTensorLayout> phi3_layout(const ModelConfig& c) {
  const int64_t d = c.dim, ff = c.ff_dim;
  std::vector<HfTensorLayout> t = {{"model.embed_tokens.weight", "token_embd.weight", {c.vocab_size, d}},
                                   {"model.norm.weight", "output_norm.weight", {d}},
                                   {"lm_head.weight", "output.weight", {c.vocab_size, d}}};
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l), b = fmt::format("blk.{}.", l);
    t.push_back({p + "input_layernorm.weight", b + "attn_norm.weight", {d}});
    t.push_back({p + "self_attn.qkv_proj.weight", b + "attn_qkv.weight", {c.q_dim() + 2 * c.kv_dim(), d}});
    t.push_back({p + "self_attn.o_proj.weight", b + "attn_output.weight", {d, c.q_dim()}});
    t.push_back({p + "post_attention_layernorm.weight", b + "ffn_norm.weight", {d}});
    t.push_back({p + "mlp.gate_up_proj.weight", b + "ffn_up.weight", {2 * ff, d}});
    t.push_back({p + "mlp.down_proj.weight", b + "ffn_down.weight", {d, ff}});
  }
  return t;
}

}  // namespace

std::vector<HfTensorLayout> hf_tensor_layout(const ModelConfig& c) {
  if (c.is_gemma()) return gemma_layout(c);
  if (c.arch == "phi3") return phi3_layout(c);
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
  if (c.arch == "phi3" && (!c.rope_freq_factors.empty() || c.rope_mscale != 1.0f)) {  // LongRoPE (Phi3Model)
    w.set_string(a + "rope.scaling.type", "longrope");
    w.set_f32(a + "rope.scaling.attn_factor", c.rope_mscale);
    u32("rope.scaling.original_context_length",
        c.rope_original_context > 0 ? c.rope_original_context : c.context_length);
  }
  if (c.is_gemma()) {  // llama.cpp's gemma2/gemma3 keys (convert_hf_to_gguf.py's Gemma2Model, Gemma3Model)
    u32("attention.sliding_window_pattern", c.sliding_window_pattern);
    if (c.arch == "gemma2") w.set_f32(a + "attn_logit_softcapping", c.attn_softcap);
    if (c.final_softcap > 0) w.set_f32(a + "final_logit_softcapping", c.final_softcap);
    if (c.arch == "gemma3") w.set_f32(a + "rope.freq_base_swa", c.rope_freq_base_local);
    if (c.rope_freq_scale != 1.0f) {
      w.set_string(a + "rope.scaling.type", "linear");
      w.set_f32(a + "rope.scaling.factor", 1.0f / c.rope_freq_scale);
    }
  }
}

void for_each_rope_factor_tensor(const ModelConfig& c,
                                 const std::function<void(const std::string&, const std::vector<float>&)>& f) {
  if (c.arch == "phi3") {
    if (!c.rope_short_factors.empty()) f("rope_factors_short.weight", c.rope_short_factors);
    if (!c.rope_long_factors.empty()) f("rope_factors_long.weight", c.rope_long_factors);
  } else if (!c.rope_freq_factors.empty()) {
    f("rope_freqs.weight", c.rope_freq_factors);
  }
}

}  // namespace kvik
