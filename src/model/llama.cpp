#include "model/llama.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include <sys/mman.h>
#include <unistd.h>

#include "core/error.h"
#include "core/log.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/paged_attention.h"
#include "kernels/cpu/rope.h"

namespace kvik {
namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

const GgufTensorInfo& require_tensor(const GgufFile& g, const std::string& name, const std::vector<int64_t>& shape) {
  const GgufTensorInfo* t = g.find_tensor(name);
  if (!t) fail("{}: required tensor '{}' is missing", g.path(), name);
  if (t->shape != shape)
    fail("{}: tensor '{}' has shape {}, expected {}", g.path(), name, shape_str(t->shape), shape_str(shape));
  if (!traits(t->dtype).can_compute)
    fail(
        "{}: tensor '{}' has type {}, which kvik cannot compute with yet (supported: f32, f16, bf16, q8_0, q4_0, q4_K, "
        "q5_K, q6_K)",
        g.path(), name, dtype_name(t->dtype));
  return *t;
}

// GGUF shape [cols, rows]: rows output features of cols inputs each.
WeightMatrix matrix(const GgufFile& g, const std::string& name, int64_t rows, int64_t cols) {
  const GgufTensorInfo& t = require_tensor(g, name, {cols, rows});
  return WeightMatrix{t.dtype, rows, cols, t.data, *row_bytes(t.dtype, cols)};
}

// A stacked expert tensor (GGUF shape [cols, rows, E], llama.cpp's ffn_*_exps): E matrices of rows × cols.
std::vector<WeightMatrix> expert_matrices(const GgufFile& g, const std::string& name, int64_t E, int64_t rows,
                                          int64_t cols) {
  const GgufTensorInfo& t = require_tensor(g, name, {cols, rows, E});
  const size_t rb = *row_bytes(t.dtype, cols);
  std::vector<WeightMatrix> m;
  for (int64_t e = 0; e < E; ++e)
    m.push_back(WeightMatrix{t.dtype, rows, cols, t.data + static_cast<size_t>(e * rows) * rb, rb});
  return m;
}

const float* norm_vector(const GgufFile& g, const std::string& name, int64_t n) {
  const GgufTensorInfo& t = require_tensor(g, name, {n});
  if (t.dtype != DType::F32) fail("{}: tensor '{}' has type {}, expected f32", g.path(), name, dtype_name(t.dtype));
  if (reinterpret_cast<uintptr_t>(t.data) % alignof(float) != 0)
    fail("{}: tensor '{}' data is not 4-byte aligned", g.path(), name);
  return reinterpret_cast<const float*>(t.data);
}

}  // namespace

std::unique_ptr<LlamaModel> LlamaModel::load(const std::string& path, const LoadOptions& options) {
  if (std::filesystem::is_directory(path)) return load_hf(path, options);
  std::unique_ptr<LlamaModel> m(new LlamaModel());
  m->path_ = path;
  m->gguf_ = GgufFile::open(path);
  const GgufFile& g = *m->gguf_;
  const ModelConfig& c = m->config_ = config_from_gguf(g);
  m->token_embd_ = matrix(g, "token_embd.weight", c.vocab_size, c.dim);
  m->output_norm_ = norm_vector(g, "output_norm.weight", c.dim);
  m->output_ = c.tied_embeddings ? matrix(g, "token_embd.weight", c.vocab_size, c.dim)
                                 : matrix(g, "output.weight", c.vocab_size, c.dim);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    LayerWeights w;
    w.attn_norm = norm_vector(g, p + "attn_norm.weight", c.dim);
    if (c.arch == "phi3") {  // fused q/k/v rows: three views of one matrix
      const WeightMatrix qkv = matrix(g, p + "attn_qkv.weight", c.q_dim() + 2 * c.kv_dim(), c.dim);
      w.wq = rows_of(qkv, 0, c.q_dim());
      w.wk = rows_of(qkv, c.q_dim(), c.kv_dim());
      w.wv = rows_of(qkv, c.q_dim() + c.kv_dim(), c.kv_dim());
    } else {
      w.wq = matrix(g, p + "attn_q.weight", c.q_dim(), c.dim);
      w.wk = matrix(g, p + "attn_k.weight", c.kv_dim(), c.dim);
      w.wv = matrix(g, p + "attn_v.weight", c.kv_dim(), c.dim);
    }
    w.wo = matrix(g, p + "attn_output.weight", c.dim, c.q_dim());
    if (c.attn_bias) {
      w.bq = norm_vector(g, p + "attn_q.bias", c.q_dim());
      w.bk = norm_vector(g, p + "attn_k.bias", c.kv_dim());
      w.bv = norm_vector(g, p + "attn_v.bias", c.kv_dim());
    }
    if (c.qk_norm) {
      w.q_norm = norm_vector(g, p + "attn_q_norm.weight", c.head_dim);
      w.k_norm = norm_vector(g, p + "attn_k_norm.weight", c.head_dim);
    }
    w.ffn_norm = norm_vector(g, p + "ffn_norm.weight", c.dim);
    if (c.is_gemma()) {
      w.post_attn_norm = norm_vector(g, p + "post_attention_norm.weight", c.dim);
      w.post_ffn_norm = norm_vector(g, p + "post_ffw_norm.weight", c.dim);
    }
    if (c.is_moe()) {
      w.moe.router = matrix(g, p + "ffn_gate_inp.weight", c.n_experts, c.dim);
      w.moe.gate = expert_matrices(g, p + "ffn_gate_exps.weight", c.n_experts, c.expert_ff_dim, c.dim);
      w.moe.up = expert_matrices(g, p + "ffn_up_exps.weight", c.n_experts, c.expert_ff_dim, c.dim);
      w.moe.down = expert_matrices(g, p + "ffn_down_exps.weight", c.n_experts, c.dim, c.expert_ff_dim);
    } else if (c.arch == "phi3") {  // fused gate (first half) and up rows
      const WeightMatrix gate_up = matrix(g, p + "ffn_up.weight", 2 * c.ff_dim, c.dim);
      w.w_gate = rows_of(gate_up, 0, c.ff_dim);
      w.w_up = rows_of(gate_up, c.ff_dim, c.ff_dim);
      w.w_down = matrix(g, p + "ffn_down.weight", c.dim, c.ff_dim);
    } else {
      w.w_gate = matrix(g, p + "ffn_gate.weight", c.ff_dim, c.dim);
      w.w_up = matrix(g, p + "ffn_up.weight", c.ff_dim, c.dim);
      w.w_down = matrix(g, p + "ffn_down.weight", c.dim, c.ff_dim);
    }
    m->layers_.push_back(w);
  }
  m->shard_weights(options);
  m->pack_weights(options.repack_weights);
  if (c.is_moe()) m->log_moe_summary();
  return m;
}

const float* LlamaModel::owned_floats(const uint8_t* data, DType dtype, int64_t n) {
  owned_.emplace_back(static_cast<size_t>(n));
  dequantize_row(dtype, data, owned_.back().data(), n);
  return owned_.back().data();
}

// A Hugging Face checkpoint: tensors named model.layers.N.self_attn.q_proj.weight, stored [out, in] row-major,
// which is WeightMatrix's rows = out features; q/k rows in HF's rotate_half order (RopeType::kNeox).
std::unique_ptr<LlamaModel> LlamaModel::load_hf(const std::string& dir, const LoadOptions& options) {
  std::unique_ptr<LlamaModel> m(new LlamaModel());
  m->path_ = dir;
  const ModelConfig& c = m->config_ = config_from_hf(dir);
  m->safetensors_ = SafetensorsModel::open_dir(dir);
  const SafetensorsModel& st = *m->safetensors_;
  const auto tensor = [&](const std::string& name, const std::vector<int64_t>& shape) -> const SafetensorsTensor& {
    const SafetensorsTensor* t = st.find(name);
    if (!t) fail("{}: required tensor '{}' is missing from the safetensors files", dir, name);
    if (t->shape != shape)
      fail("{}: tensor '{}' has shape {}, expected {} (config.json)", t->file, name, shape_str(t->shape),
           shape_str(shape));
    if (reinterpret_cast<uintptr_t>(t->data) % (t->dtype == DType::F32 ? 4 : 2) != 0)
      fail("{}: tensor '{}' data is not aligned to its element size", t->file, name);
    return *t;
  };
  const auto mat = [&](const std::string& name, int64_t rows, int64_t cols) {
    const SafetensorsTensor& t = tensor(name, {rows, cols});
    return WeightMatrix{t.dtype, rows, cols, t.data, *row_bytes(t.dtype, cols)};
  };
  // Gemma's RMSNorm multiplies by (1 + w): its norm weights get the 1 added here, as the GGUF converter adds it.
  const float norm_offset = c.is_gemma() ? 1.0f : 0.0f;
  const auto vec = [&](const std::string& name, int64_t n, float offset = 0.0f) {
    const SafetensorsTensor& t = tensor(name, {n});
    const float* v = m->owned_floats(t.data, t.dtype, n);
    for (float& x : m->owned_.back()) x += offset;
    return v;
  };
  // The decoder's tensors sit under "model." — or, in a multimodal checkpoint's language model (Gemma 3 4B and up),
  // under "language_model.model." (as the hub's files name them) or "model.language_model." (newer transformers).
  std::string base = "model.";
  for (const char* alt : {"language_model.model.", "model.language_model."})
    if (!st.find(base + "embed_tokens.weight") && st.find(std::string(alt) + "embed_tokens.weight")) base = alt;
  m->token_embd_ = mat(base + "embed_tokens.weight", c.vocab_size, c.dim);
  m->output_norm_ = vec(base + "norm.weight", c.dim, norm_offset);
  if (c.tied_embeddings) {
    m->output_ = m->token_embd_;
  } else {
    if (!st.find("lm_head.weight"))
      fail("{}: tensor 'lm_head.weight' is missing and config.json has tie_word_embeddings false", dir);
    m->output_ = mat("lm_head.weight", c.vocab_size, c.dim);
  }
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const std::string p = base + "layers." + std::to_string(l) + ".";
    LayerWeights w;
    w.attn_norm = vec(p + "input_layernorm.weight", c.dim, norm_offset);
    if (c.arch == "phi3") {  // Phi3ForCausalLM: q/k/v rows fused in qkv_proj, three views of it
      const WeightMatrix qkv = mat(p + "self_attn.qkv_proj.weight", c.q_dim() + 2 * c.kv_dim(), c.dim);
      w.wq = rows_of(qkv, 0, c.q_dim());
      w.wk = rows_of(qkv, c.q_dim(), c.kv_dim());
      w.wv = rows_of(qkv, c.q_dim() + c.kv_dim(), c.kv_dim());
    } else {
      w.wq = mat(p + "self_attn.q_proj.weight", c.q_dim(), c.dim);
      w.wk = mat(p + "self_attn.k_proj.weight", c.kv_dim(), c.dim);
      w.wv = mat(p + "self_attn.v_proj.weight", c.kv_dim(), c.dim);
    }
    w.wo = mat(p + "self_attn.o_proj.weight", c.dim, c.q_dim());
    if (c.attn_bias) {
      w.bq = vec(p + "self_attn.q_proj.bias", c.q_dim());
      w.bk = vec(p + "self_attn.k_proj.bias", c.kv_dim());
      w.bv = vec(p + "self_attn.v_proj.bias", c.kv_dim());
    }
    if (c.qk_norm) {
      w.q_norm = vec(p + "self_attn.q_norm.weight", c.head_dim, norm_offset);
      w.k_norm = vec(p + "self_attn.k_norm.weight", c.head_dim, norm_offset);
    }
    if (c.is_gemma()) {  // norms before and after attention and the MLP
      w.post_attn_norm = vec(p + "post_attention_layernorm.weight", c.dim, norm_offset);
      w.ffn_norm = vec(p + "pre_feedforward_layernorm.weight", c.dim, norm_offset);
      w.post_ffn_norm = vec(p + "post_feedforward_layernorm.weight", c.dim, norm_offset);
    } else {
      w.ffn_norm = vec(p + "post_attention_layernorm.weight", c.dim);
    }
    if (c.is_moe()) {
      // Mixtral: block_sparse_moe.gate + experts.N.w1 (gate) / w3 (up) / w2 (down); Qwen3-MoE: mlp.gate +
      // mlp.experts.N.gate_proj / up_proj / down_proj.
      const bool mixtral = c.arch == "llama";
      const std::string b = p + (mixtral ? "block_sparse_moe." : "mlp.");
      w.moe.router = mat(b + "gate.weight", c.n_experts, c.dim);
      for (int64_t e = 0; e < c.n_experts; ++e) {
        const std::string x = b + "experts." + std::to_string(e) + ".";
        w.moe.gate.push_back(mat(x + (mixtral ? "w1" : "gate_proj") + ".weight", c.expert_ff_dim, c.dim));
        w.moe.up.push_back(mat(x + (mixtral ? "w3" : "up_proj") + ".weight", c.expert_ff_dim, c.dim));
        w.moe.down.push_back(mat(x + (mixtral ? "w2" : "down_proj") + ".weight", c.dim, c.expert_ff_dim));
      }
    } else if (c.arch == "phi3") {  // gate (first half) and up rows fused in gate_up_proj
      const WeightMatrix gate_up = mat(p + "mlp.gate_up_proj.weight", 2 * c.ff_dim, c.dim);
      w.w_gate = rows_of(gate_up, 0, c.ff_dim);
      w.w_up = rows_of(gate_up, c.ff_dim, c.ff_dim);
      w.w_down = mat(p + "mlp.down_proj.weight", c.dim, c.ff_dim);
    } else {
      w.w_gate = mat(p + "mlp.gate_proj.weight", c.ff_dim, c.dim);
      w.w_up = mat(p + "mlp.up_proj.weight", c.ff_dim, c.dim);
      w.w_down = mat(p + "mlp.down_proj.weight", c.dim, c.ff_dim);
    }
    m->layers_.push_back(w);
  }
  m->shard_weights(options);
  m->pack_weights(options.repack_weights);
  if (c.is_moe()) m->log_moe_summary();
  return m;
}

void LlamaModel::pack_weights(bool repack) {
  if (!repack) return;
  // One arena for every packed matrix (huge-page aligned, each matrix at a 64-byte offset).
  size_t total = 0;
  int64_t count = 0;
  for_each_matmul_weight(*this, [&](const WeightMatrix& w) {
    if (packable(w.dtype)) total += packed_bytes(w), ++count;
  });
  if (total == 0) return;
  packed_ = allocate_packed(total);
  if (!packed_) {
    log_warn("cannot allocate {:.1f} MiB for repacked weights; running them unpacked", total / 1048576.0);
    return;
  }
  packed_bytes_ = static_cast<int64_t>(total);
  uint8_t* next = packed_.get();
  for_each_matmul_weight(*this, [&](WeightMatrix& w) {
    if (!packable(w.dtype)) return;
    pack_into(w, next);
    next += packed_bytes(w);
    // The mapped original is not read again (unless it is also the embedding table): hand its pages back, so the
    // packed copy replaces it in memory instead of doubling it. Advice only; a later read would fault them in.
    if (w.data != token_embd_.data) released_bytes_ += release_pages(w.data, w.rows * w.row_bytes);
  });
  log_info("repacked {} weight matrices ({:.1f} MiB) into 16-row groups for the {} kernels", count, total / 1048576.0,
           cpu_kernels().isa);
}

int64_t LlamaModel::release_pages(const uint8_t* data, size_t bytes) {
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(data) + page - 1) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(data) + bytes) / page * page;
  if (end > begin && madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED) == 0)
    return static_cast<int64_t>(end - begin);
  return 0;
}

const GgufFile& LlamaModel::gguf() const {
  if (!gguf_) fail("{}: a Hugging Face directory, not a GGUF file", path_);
  return *gguf_;
}

int64_t LlamaModel::parameter_count() const {
  int64_t n = 0;
  if (gguf_)
    for (const auto& t : gguf_->tensors()) n += t.numel();
  else
    for (const SafetensorsTensor* t : safetensors_->all()) n += t->numel();
  return n;
}

int64_t LlamaModel::weight_bytes() const {
  int64_t n = 0;
  if (gguf_)
    for (const auto& t : gguf_->tensors()) n += static_cast<int64_t>(t.nbytes);
  else
    for (const SafetensorsTensor* t : safetensors_->all()) n += static_cast<int64_t>(t->nbytes);
  return n;
}

int64_t LlamaModel::decode_bytes_per_token() const {
  const int64_t emb = static_cast<int64_t>(token_embd_.row_bytes) * token_embd_.rows;
  int64_t n = weight_bytes() - (config_.tied_embeddings ? 0 : emb);
  const auto add_packing = [&n](const WeightMatrix& w) {
    if (w.packed) n += static_cast<int64_t>(packed_bytes(w)) - w.rows * static_cast<int64_t>(w.row_bytes);
  };
  for_each_matmul_weight(*this, add_packing);
  // A token reads k of each block's E experts: take the other E − k experts' share of the expert bytes off (one
  // expert's bytes: the held experts' mean; a rank of an expert-parallel job holds E / T of them).
  const int64_t E = config_.n_experts, k = config_.n_experts_used;
  for (const LayerWeights& l : layers_) {
    const int64_t held = static_cast<int64_t>(l.moe.gate.size());
    int64_t experts = 0;
    for (const auto* ws : {&l.moe.gate, &l.moe.up, &l.moe.down})
      for (const WeightMatrix& w : *ws) experts += held_bytes(w);
    if (held > 0) n -= experts / held * (E - k);
  }
  return n;
}

int64_t LlamaModel::active_parameter_count() const {
  const ModelConfig& c = config_;
  return parameter_count() - c.n_layers * (c.n_experts - c.n_experts_used) * 3 * c.dim * c.expert_ff_dim;
}

void LlamaModel::log_moe_summary() const {
  const ModelConfig& c = config_;
  log_info(
      "mixture of experts: {} experts of width {}, {} active per token; parameters {:.1f} M total, {:.1f} M active",
      c.n_experts, c.expert_ff_dim, c.n_experts_used, parameter_count() / 1e6, active_parameter_count() / 1e6);
  log_info("weight bytes read per decode token (active experts only): {:.1f} MiB of {:.1f} MiB",
           decode_bytes_per_token() / 1048576.0, resident_weight_bytes() / 1048576.0);
}

void LlamaModel::edit_layer_weights(const WeightEdit& f) {
  if (config_.is_moe()) fail("{}: editing layer weights of a mixture-of-experts model is not supported", path_);
  static const char* const kNames[] = {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"};
  for (size_t l = 0; l < layers_.size(); ++l) {
    LayerWeights& lw = layers_[l];
    WeightMatrix* ws[] = {&lw.wq, &lw.wk, &lw.wv, &lw.wo, &lw.w_gate, &lw.w_up, &lw.w_down};
    for (int i = 0; i < 7; ++i) {
      WeightMatrix& w = *ws[i];
      std::vector<float> copy(static_cast<size_t>(w.rows * w.cols));
      for (int64_t r = 0; r < w.rows; ++r) dequantize_row(w.dtype, w.row(r), &copy[r * w.cols], w.cols);
      f(fmt::format("blk.{}.{}", l, kNames[i]), copy.data(), w.rows, w.cols);
      owned_.push_back(std::move(copy));  // the buffer moves with the vector: pointers into it stay valid
      w = WeightMatrix{DType::F32, w.rows, w.cols, reinterpret_cast<const uint8_t*>(owned_.back().data()),
                       static_cast<size_t>(w.cols) * sizeof(float)};
    }
  }
}

void LlamaModel::Workspace::reserve(const ModelConfig& c, int64_t T) {
  if (T <= capacity) return;
  capacity = T;
  x.resize(T * c.dim);
  xn.resize(T * c.dim);
  q.resize(T * c.q_dim());
  k.resize(T * c.kv_dim());
  v.resize(T * c.kv_dim());
  attn.resize(T * c.q_dim());
  proj.resize(T * c.dim);
  const int64_t ff = c.is_moe() ? 0 : c.ff_dim;  // a MoE block's buffers are in MoeWorkspace
  gate.resize(T * ff);
  up.resize(T * ff);
  rows.resize(T * c.dim);
}

void LlamaModel::forward(const ForwardBatch& b, KvCacheTensors& cache, float* logits) {
  if (shard_.pp_size > 1) return forward_pipelined(b, cache, logits);
  run_stage(b, cache, shard_.computes_logits() ? logits : nullptr);
}

void LlamaModel::run_stage(const ForwardBatch& b, KvCacheTensors& cache, float* logits) {
  const ModelConfig& c = config_;
  const int64_t T = static_cast<int64_t>(b.token_ids.size());
  if (T == 0) return;
  ws_.reserve(c, T);
  lora_.begin(b.loras);  // groups the tokens by adapter; inactive (no work below) without any

  if (shard_.first_stage()) {  // a later stage's x [T, d] is the previous stage's output, received into ws_.x
    // Embedding lookup: x [T, d]
    for (int64_t t = 0; t < T; ++t) {
      const int32_t id = b.token_ids[t];
      if (id < 0 || id >= c.vocab_size) fail("token id {} is outside the vocabulary (0..{})", id, c.vocab_size - 1);
      dequantize_row(token_embd_.dtype, token_embd_.row(id), &ws_.x[t * c.dim], c.dim);
    }
    if (c.is_gemma()) {  // Gemma scales the embedding by √d
      const float s = std::sqrt(static_cast<float>(c.dim));
      for (int64_t i = 0; i < T * c.dim; ++i) ws_.x[i] *= s;
    }
    stream_written(b, 0, true, T);
  }

  for (int64_t l = shard_.first_layer; l < shard_.end_layer; ++l) {
    attention_block(l, b, cache, T);
    mlp_block(l, b, T);
  }
  if (!shard_.last_stage() || output_.rows == 0) return;

  // Final norm and LM head, only for the rows asked for: logits [N, V]
  const int64_t N = static_cast<int64_t>(b.logits_indices.size());
  for (int64_t i = 0; i < N; ++i) std::copy_n(&ws_.x[b.logits_indices[i] * c.dim], c.dim, &ws_.rows[i * c.dim]);
  if (output_.rows < c.vocab_size) return vocab_parallel_lm_head(N, logits);
  lm_head(ws_.rows.data(), N, logits);
}

void LlamaModel::lm_head(const float* x, int64_t N, float* logits) {
  ws_.reserve(config_, N);
  rmsnorm(x, output_norm_, ws_.xn.data(), N, config_.dim, config_.rms_eps);
  matmul(ws_.xn.data(), N, output_, logits);
  if (const float cap = config_.final_softcap; cap > 0)  // Gemma 2: logits capped at ±cap
    for (int64_t i = 0; i < N * output_.rows; ++i) logits[i] = cap * std::tanh(logits[i] / cap);
}

void LlamaModel::stream_written(const ForwardBatch& b, int32_t layer, bool block_end, int64_t T) {
  if (!b.interventions.empty()) {
    for (int64_t t = 0; t < T; ++t)
      if (const InterventionList* list = b.interventions[t])
        apply_interventions(*list, layer, block_end, &ws_.x[t * config_.dim], config_.dim);
  }
  if (block_end && b.observe) b.observe(layer, ws_.x.data(), T);
}

void LlamaModel::attention_block(int64_t l, const ForwardBatch& b, KvCacheTensors& cache, int64_t T) {
  const ModelConfig& c = config_;
  const LayerWeights& w = layers_[l];
  rmsnorm(ws_.x.data(), w.attn_norm, ws_.xn.data(), T, c.dim, c.rms_eps);  // xn [T, d]
  // q [T, n_h, d_h], k and v [T, n_kv, d_h]
  matmul(ws_.xn.data(), T, {{&w.wq, ws_.q.data()}, {&w.wk, ws_.k.data()}, {&w.wv, ws_.v.data()}});
  if (lora_.active()) {  // q, k, v += s · B (A xn) per adapter group
    lora_.apply(l, LoraTarget::kQ, ws_.xn.data(), c.dim, ws_.q.data(), c.q_dim());
    lora_.apply(l, LoraTarget::kK, ws_.xn.data(), c.dim, ws_.k.data(), c.kv_dim());
    lora_.apply(l, LoraTarget::kV, ws_.xn.data(), c.dim, ws_.v.data(), c.kv_dim());
  }
  if (w.bq) {  // q += b_q, k += b_k, v += b_v (Qwen2)
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t i = 0; i < c.q_dim(); ++i) ws_.q[t * c.q_dim() + i] += w.bq[i];
      for (int64_t i = 0; i < c.kv_dim(); ++i) ws_.k[t * c.kv_dim() + i] += w.bk[i];
      for (int64_t i = 0; i < c.kv_dim(); ++i) ws_.v[t * c.kv_dim() + i] += w.bv[i];
    }
  }
  if (w.q_norm) {  // RMSNorm over each head's d_h (Qwen3): q [T·n_h, d_h], k [T·n_kv, d_h]
    rmsnorm(ws_.q.data(), w.q_norm, ws_.attn.data(), T * c.n_heads, c.head_dim, c.rms_eps);
    std::copy_n(ws_.attn.data(), T * c.q_dim(), ws_.q.data());
    rmsnorm(ws_.k.data(), w.k_norm, ws_.attn.data(), T * c.n_kv_heads, c.head_dim, c.rms_eps);
    std::copy_n(ws_.attn.data(), T * c.kv_dim(), ws_.k.data());
  }
  const RopeParams rp{c.head_dim,   c.rope_dim,          c.layer_rope_base(l),
                      c.rope_type,  c.rope_freq_factors, c.layer_rope_scale(l),
                      c.rope_mscale};
  for (int64_t t = 0; t < T; ++t) {
    rope(&ws_.q[t * c.q_dim()], c.n_heads, b.positions[t], rp);
    rope(&ws_.k[t * c.kv_dim()], c.n_kv_heads, b.positions[t], rp);
  }
  const bool own_pool = c.layer_is_local(l) && !b.local_block_tables.empty();  // the local layers' pool
  const int64_t* slots = own_pool ? b.local_slot_mapping.data() : b.slot_mapping.data();
  write_kv(ws_.k.data(), ws_.v.data(), slots, T, c.kv_dim(), cache.k(l), cache.v(l), cache.dtype());

  PagedAttentionArgs a;
  a.q = ws_.q.data();
  a.k_cache = cache.k(l);
  a.v_cache = cache.v(l);
  a.kv_dtype = cache.dtype();
  a.out = ws_.attn.data();  // [T, n_h, d_h]
  a.num_reqs = static_cast<int32_t>(b.seq_lens.size());
  a.query_start_loc = b.query_start_loc.data();
  a.seq_lens = b.seq_lens.data();
  a.positions = b.positions.data();
  a.block_tables = own_pool ? b.local_block_tables.data() : b.block_tables.data();
  a.max_blocks_per_seq = b.max_blocks_per_seq;
  a.block_size = cache.block_size();
  a.n_heads = c.n_heads;
  a.n_kv_heads = c.n_kv_heads;
  a.head_dim = c.head_dim;
  a.scale = c.attention_scale();
  a.sliding_window = c.layer_is_local(l) ? static_cast<int32_t>(c.sliding_window) : 0;
  a.softcap = c.attn_softcap;
  paged_attention(a);

  matmul(ws_.attn.data(), T, w.wo, ws_.proj.data());  // [T, d]
  all_reduce_partial(ws_.proj.data(), T * c.dim);     // tensor parallel: Σ over the ranks' heads
  if (lora_.active()) lora_.apply(l, LoraTarget::kO, ws_.attn.data(), c.q_dim(), ws_.proj.data(), c.dim);
  if (w.post_attn_norm) post_norm(w.post_attn_norm, T);
  for (int64_t i = 0; i < T * c.dim; ++i) ws_.x[i] += ws_.proj[i];
  if (!b.interventions.empty()) stream_written(b, static_cast<int32_t>(l + 1), false, T);
}

// proj [T, d] = RMSNorm(proj) · g (Gemma's post-attention and post-MLP norms, before the residual add).
void LlamaModel::post_norm(const float* g, int64_t T) {
  rmsnorm(ws_.proj.data(), g, ws_.xn.data(), T, config_.dim, config_.rms_eps);
  std::copy_n(ws_.xn.data(), T * config_.dim, ws_.proj.data());
}

void LlamaModel::mlp_block(int64_t l, const ForwardBatch& b, int64_t T) {
  const ModelConfig& c = config_;
  const LayerWeights& w = layers_[l];
  rmsnorm(ws_.x.data(), w.ffn_norm, ws_.xn.data(), T, c.dim, c.rms_eps);  // xn [T, d]
  if (c.is_moe()) {
    moe_mlp(w.moe, c, ws_.xn.data(), T, moe_ws_, ws_.proj.data());  // Σ_k weight · expert(xn), [T, d]
    // Tensor parallel: Σ over the ranks' d_ff_exp slices, or (expert parallel) over the ranks' experts — the combine.
    all_reduce_partial(ws_.proj.data(), T * c.dim);
    for (int64_t i = 0; i < T * c.dim; ++i) ws_.x[i] += ws_.proj[i];
    stream_written(b, static_cast<int32_t>(l + 1), true, T);
    return;
  }
  matmul(ws_.xn.data(), T, {{&w.w_gate, ws_.gate.data()}, {&w.w_up, ws_.up.data()}});  // gate, up [T, d_ff]
  if (lora_.active()) {
    lora_.apply(l, LoraTarget::kGate, ws_.xn.data(), c.dim, ws_.gate.data(), c.ff_dim);
    lora_.apply(l, LoraTarget::kUp, ws_.xn.data(), c.dim, ws_.up.data(), c.ff_dim);
  }
  if (c.is_gemma())
    gelu_tanh_mul(ws_.gate.data(), ws_.up.data(), T * c.ff_dim);  // GeGLU: gelu_tanh(gate) · up
  else
    silu_mul(ws_.gate.data(), ws_.up.data(), T * c.ff_dim);  // silu(gate) · up
  matmul(ws_.gate.data(), T, w.w_down, ws_.proj.data());     // [T, d]
  all_reduce_partial(ws_.proj.data(), T * c.dim);            // tensor parallel: Σ over the ranks' d_ff slices
  if (lora_.active()) lora_.apply(l, LoraTarget::kDown, ws_.gate.data(), c.ff_dim, ws_.proj.data(), c.dim);
  if (w.post_ffn_norm) post_norm(w.post_ffn_norm, T);
  for (int64_t i = 0; i < T * c.dim; ++i) ws_.x[i] += ws_.proj[i];
  stream_written(b, static_cast<int32_t>(l + 1), true, T);
}

}  // namespace kvik
