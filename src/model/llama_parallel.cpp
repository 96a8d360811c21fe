// Tensor and pipeline parallelism of LlamaModel (model_shard.h): the shard a rank keeps at load, and the forward
// pass of a pipeline stage over micro-batches.
#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/log.h"
#include "model/llama.h"

namespace kvik {

namespace {

constexpr int kTagStream = 1;  // stage s → s + 1: a micro-batch's residual stream x [T, d]
constexpr int kTagLogits = 2;  // the last stage → world rank 0: a micro-batch's logits [N, V]

}  // namespace

void LlamaModel::check_parallel_config(const ParallelConfig& p) const {
  const ModelConfig& c = config_;
  const int64_t T = p.tensor_parallel_size, P = p.pipeline_parallel_size;
  if (T < 1 || P < 1) fail("--tensor-parallel-size and --pipeline-parallel-size must be at least 1 (got {}, {})", T, P);
  if (world_->size() != T * P)
    fail(
        "this job has {} rank(s), but --tensor-parallel-size {} x --pipeline-parallel-size {} = {}: start it with "
        "mpirun -np {}",
        world_->size(), T, P, T * P, T * P);
  if (c.n_heads % T != 0)
    fail("--tensor-parallel-size {}: the model's {} query heads do not divide into {} equal shares", T, c.n_heads, T);
  if (c.n_kv_heads % T != 0 && T % c.n_kv_heads != 0)
    fail(
        "--tensor-parallel-size {}: the model's {} KV heads neither divide by {} nor divide it (to be replicated): "
        "choose a divisor or a multiple of {}",
        T, c.n_kv_heads, T, c.n_kv_heads);
  if (!c.is_moe() && c.ff_dim % T != 0)
    fail("--tensor-parallel-size {}: d_ff {} does not divide by {}", T, c.ff_dim, T);
  if (c.is_moe() && !p.enable_expert_parallel && c.expert_ff_dim % T != 0)
    fail(
        "--tensor-parallel-size {}: the experts' d_ff_exp {} does not divide by {}: choose a divisor, or add "
        "--enable-expert-parallel (whole experts per rank)",
        T, c.expert_ff_dim, T);
  if (c.n_layers < P)
    fail("--pipeline-parallel-size {}: the model has only {} layers (a stage needs at least one)", P, c.n_layers);
  if (P > 1 && c.sliding_window > 0)
    fail("--pipeline-parallel-size {}: sliding-window models run with one pipeline stage", P);
}

// --enable-expert-parallel needs experts and tensor-parallel ranks to place them on, E / T whole experts each.
void LlamaModel::check_expert_parallel(const ParallelConfig& p) const {
  if (!p.enable_expert_parallel) return;
  const ModelConfig& c = config_;
  const int64_t T = p.tensor_parallel_size, E = c.n_experts;
  if (!c.is_moe()) fail("--enable-expert-parallel: {} is a dense model (no experts to place): drop the flag", path_);
  if (T < 2)
    fail(
        "--enable-expert-parallel places whole experts on the ranks of --tensor-parallel-size T > 1 (got {}): start "
        "kvik with mpirun -np T ... --tensor-parallel-size T --enable-expert-parallel",
        T);
  if (E % T != 0)
    fail(
        "--enable-expert-parallel: the model's {} experts do not divide into {} equal shares (--tensor-parallel-size "
        "{}): choose a divisor of {}, or drop the flag to slice every expert",
        E, T, T, E);
}

// Every rank must read the same model: each rank's file size and shape against rank 0's.
void LlamaModel::check_same_model() const {
  const ModelConfig& c = config_;
  constexpr int kN = 5;
  const int64_t mine[kN] = {weight_bytes(), c.n_layers, c.dim, c.n_heads, c.vocab_size};
  std::vector<int64_t> all(kN * static_cast<size_t>(world_->size()));
  world_->all_gather(mine, kN, all.data());
  for (int r = 1; r < world_->size(); ++r) {
    const int64_t* o = &all[kN * r];
    if (!std::equal(o, o + kN, all.data()))
      fail(
          "rank {} read a different model than rank 0 ({} bytes, L {}, d {}, n_h {}, V {} vs {} bytes, L {}, d {}, n_h "
          "{}, V {}): every rank needs the same file at {}",
          r, o[0], o[1], o[2], o[3], o[4], all[0], all[1], all[2], all[3], all[4], path_);
  }
}

void LlamaModel::shard_weights(const LoadOptions& o) {
  shard_ = ModelShard{};
  assign_layers(shard_, config_.n_layers);
  shard_.end_expert = config_.n_experts;
  check_expert_parallel(o.parallel);
  if (!o.parallel.enabled()) return;
  world_ = o.world ? o.world : dist::world();
  check_parallel_config(o.parallel);
  const ModelConfig& c = config_;
  ModelShard& s = shard_;
  s.tp_size = o.parallel.tensor_parallel_size;
  s.pp_size = o.parallel.pipeline_parallel_size;
  s.stage = world_->rank() / s.tp_size;
  s.tp_rank = world_->rank() % s.tp_size;
  assign_layers(s, c.n_layers);
  tp_ = world_->split(s.stage, s.tp_rank);
  check_same_model();
  s.expert_parallel = o.parallel.enable_expert_parallel;
  if (s.expert_parallel) {  // tensor rank t: experts [t·E/T, (t+1)·E/T)
    s.first_expert = s.tp_rank * (c.n_experts / s.tp_size);
    s.end_expert = s.first_expert + c.n_experts / s.tp_size;
  }

  // Heads: q [q0, q0 + nh); KV heads [kv0, kv0 + nkv), or (T > n_kv) the one KV head the rank's q heads read.
  const int64_t T = s.tp_size, dh = c.head_dim;
  const int64_t nh = c.n_heads / T, q0 = s.tp_rank * nh;
  const int64_t nkv = c.n_kv_heads % T == 0 ? c.n_kv_heads / T : 1;
  const int64_t kv0 = c.n_kv_heads % T == 0 ? s.tp_rank * nkv : s.tp_rank / (T / c.n_kv_heads);
  const int64_t ff = c.ff_dim / T, ff0 = s.tp_rank * ff;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    LayerWeights& w = layers_[l];
    if (!s.owns_layer(l)) {  // another stage's: never touched here
      w = LayerWeights{};
      continue;
    }
    if (T == 1) continue;
    w.wq = rows_of(w.wq, q0 * dh, nh * dh);  // column parallel: this rank's output rows
    w.wk = rows_of(w.wk, kv0 * dh, nkv * dh);
    w.wv = rows_of(w.wv, kv0 * dh, nkv * dh);
    if (w.bq) w.bq += q0 * dh, w.bk += kv0 * dh, w.bv += kv0 * dh;
    w.wo = columns_of(w.wo, q0 * dh, nh * dh);  // row parallel: this rank's input columns, then an all-reduce
    if (c.is_moe()) {
      shard_experts(w.moe);
      continue;
    }
    w.w_gate = rows_of(w.w_gate, ff0, ff);
    w.w_up = rows_of(w.w_up, ff0, ff);
    w.w_down = columns_of(w.w_down, ff0, ff);
  }
  // LM head: the last stage's tensor ranks each take V/T vocabulary rows (vocab parallel); when V does not divide
  // by T, tensor rank 0 keeps the whole head.
  if (!s.last_stage() || (c.vocab_size % T != 0 && !s.computes_logits()))
    output_ = WeightMatrix{};
  else if (c.vocab_size % T == 0)
    output_ = rows_of(output_, s.tp_rank * (c.vocab_size / T), c.vocab_size / T);
  config_.n_heads = nh;
  config_.n_kv_heads = nkv;
  config_.ff_dim = ff;
  if (c.is_moe() && !s.expert_parallel) config_.expert_ff_dim = c.expert_ff_dim / T;
}

// A MoE block on tensor rank t of T. Without expert parallelism (vLLM's default) every expert is split like the
// dense MLP: gate and up rows [t·d_ff_exp/T, (t+1)·d_ff_exp/T) (views), down those columns (copied). With it, the
// rank keeps whole experts [first_expert, end_expert) and drops the other experts' views: their pages are never
// read. The router is replicated; either way the block's output is a partial sum that the all-reduce after
// moe_mlp completes.
void LlamaModel::shard_experts(MoeWeights& m) {
  const ModelShard& s = shard_;
  if (s.expert_parallel) {
    for (auto* v : {&m.gate, &m.up, &m.down})
      *v = std::vector<WeightMatrix>(v->begin() + s.first_expert, v->begin() + s.end_expert);
    m.first_expert = s.first_expert;
    return;
  }
  const int64_t ff = config_.expert_ff_dim / s.tp_size, ff0 = s.tp_rank * ff;
  for (size_t e = 0; e < m.gate.size(); ++e) {
    const DType dt = m.down[e].dtype;
    if (!row_bytes(dt, ff0) || !row_bytes(dt, ff))
      fail(
          "{}: --tensor-parallel-size {} splits the experts' d_ff_exp {} into slices of {}, but their {} down "
          "matrices hold blocks of {} values: choose a size that splits at block boundaries, or add "
          "--enable-expert-parallel (whole experts per rank)",
          path_, s.tp_size, config_.expert_ff_dim, ff, dtype_name(dt), traits(dt).block_size);
    m.gate[e] = rows_of(m.gate[e], ff0, ff);
    m.up[e] = rows_of(m.up[e], ff0, ff);
    m.down[e] = columns_of(m.down[e], ff0, ff);
  }
}

WeightMatrix LlamaModel::columns_of(const WeightMatrix& w, int64_t first, int64_t n) {
  if (first == 0 && n == w.cols) return w;
  const std::optional<size_t> skip = row_bytes(w.dtype, first), bytes = row_bytes(w.dtype, n);
  if (!skip || !bytes)
    fail(
        "{}: a {} matrix of {} columns cannot be split at column {} (its blocks hold {} values): use a "
        "--tensor-parallel-size that splits it at block boundaries",
        path_, dtype_name(w.dtype), w.cols, first, traits(w.dtype).block_size);
  const size_t total = (*bytes * w.rows + 4095) / 4096 * 4096;  // page-aligned: pack_weights may hand it back
  auto* p = static_cast<uint8_t*>(std::aligned_alloc(4096, total));
  if (!p) fail("cannot allocate {} bytes for a tensor-parallel slice", total);
  slices_.emplace_back(p);
  for (int64_t r = 0; r < w.rows; ++r) std::memcpy(p + r * *bytes, w.row(r) + *skip, *bytes);
  if (w.data != token_embd_.data) release_pages(w.data, w.rows * w.row_bytes);
  return WeightMatrix{w.dtype, w.rows, n, p, *bytes};
}

void LlamaModel::vocab_parallel_lm_head(int64_t N, float* logits) {
  const int64_t Vt = output_.rows, T = shard_.tp_size, V = config_.vocab_size;
  if (static_cast<int64_t>(vocab_part_.size()) < N * Vt) vocab_part_.resize(N * Vt);
  if (static_cast<int64_t>(vocab_gathered_.size()) < N * V) vocab_gathered_.resize(N * V);
  lm_head(ws_.rows.data(), N, vocab_part_.data());  // [N, V/T]: this rank's vocabulary rows
  tp_->gather(vocab_part_.data(), N * Vt, vocab_gathered_.data(), 0);
  if (shard_.tp_rank != 0) return;
  for (int64_t t = 0; t < T; ++t)  // [T, N, V/T] → [N, V]
    for (int64_t i = 0; i < N; ++i) std::copy_n(&vocab_gathered_[(t * N + i) * Vt], Vt, &logits[i * V + t * Vt]);
}

int64_t LlamaModel::expert_weight_bytes() const {
  int64_t n = 0;
  for (const LayerWeights& l : layers_)
    for (const auto* ws : {&l.moe.gate, &l.moe.up, &l.moe.down})
      for (const WeightMatrix& w : *ws) n += held_bytes(w);
  return n;
}

int64_t LlamaModel::shard_weight_bytes() const {
  int64_t n = 0;
  for_each_matmul_weight(*this, [&n](const WeightMatrix& w) { n += held_bytes(w); });
  if (shard_.first_stage() && !(output_.rows > 0 && output_.data == token_embd_.data))
    n += token_embd_.rows * static_cast<int64_t>(token_embd_.row_bytes);
  const int64_t norms = (config_.is_gemma() ? 4 : 2) * config_.dim * static_cast<int64_t>(sizeof(float));
  return n + (shard_.end_layer - shard_.first_layer) * norms;
}

// Requests [r0, r1) of the batch as a batch of their own: their tokens, tables and logits rows, offsets rebased.
ForwardBatch LlamaModel::micro_batch(const ForwardBatch& b, int64_t r0, int64_t r1) {
  const int32_t t0 = b.query_start_loc[r0], t1 = b.query_start_loc[r1];
  const size_t T = static_cast<size_t>(t1 - t0), R = static_cast<size_t>(r1 - r0);
  const size_t mb = static_cast<size_t>(b.max_blocks_per_seq);
  mb_query_start_loc_.resize(std::max(mb_query_start_loc_.size(), R + 1));
  for (size_t r = 0; r <= R; ++r) mb_query_start_loc_[r] = b.query_start_loc[r0 + r] - t0;
  mb_logits_indices_.resize(std::max(mb_logits_indices_.size(), b.logits_indices.size()));
  size_t n = 0;
  for (const int32_t i : b.logits_indices)
    if (i >= t0 && i < t1) mb_logits_indices_[n++] = i - t0;
  ForwardBatch m;
  m.token_ids = b.token_ids.subspan(t0, T);
  m.positions = b.positions.subspan(t0, T);
  m.slot_mapping = b.slot_mapping.subspan(t0, T);
  m.query_start_loc = {mb_query_start_loc_.data(), R + 1};
  m.seq_lens = b.seq_lens.subspan(r0, R);
  m.block_tables = b.block_tables.subspan(r0 * mb, R * mb);
  m.max_blocks_per_seq = b.max_blocks_per_seq;
  m.logits_indices = {mb_logits_indices_.data(), n};
  return m;
}

// GPipe-style within one step: the R requests in up to P micro-batches of about T/P tokens each. Stage s runs
// micro-batch k + 1 while stage s + 1 runs micro-batch k; the last stage sends each micro-batch's logits to rank 0.
void LlamaModel::forward_pipelined(const ForwardBatch& b, KvCacheTensors& cache, float* logits) {
  const ModelShard& s = shard_;
  const ModelConfig& c = config_;
  const int64_t T = static_cast<int64_t>(b.token_ids.size()), R = static_cast<int64_t>(b.seq_lens.size());
  if (T == 0) return;
  if (!b.interventions.empty() || !b.loras.empty() || b.observe)
    fail("internal: interventions, LoRA and observers do not run under pipeline parallelism");
  ws_.reserve(c, T);
  if (static_cast<int64_t>(pp_stream_.size()) < T * c.dim) pp_stream_.resize(T * c.dim);
  const int64_t M = std::min<int64_t>(s.pp_size, R);
  const int prev = s.rank_of(s.stage - 1, s.tp_rank), next = s.rank_of(s.stage + 1, s.tp_rank);
  const int last = s.rank_of(s.pp_size - 1, 0);
  std::vector<int64_t>& bounds = mb_bounds_;  // micro-batch k: requests [bounds[k], bounds[k + 1])
  std::vector<int64_t>& rows = mb_rows_;
  bounds.assign(M + 1, 0);  // grows to P + 1 once: no allocation after the first steps
  rows.assign(M, 0);
  for (int64_t k = 1; k < M; ++k) {
    int64_t r = bounds[k - 1] + 1;
    while (r < R - (M - k) && b.query_start_loc[r] < k * T / M) ++r;
    bounds[k] = r;
  }
  bounds[M] = R;
  int64_t row = 0;  // the micro-batch's first logits row
  for (int64_t k = 0; k < M; ++k) {
    const ForwardBatch m = micro_batch(b, bounds[k], bounds[k + 1]);
    const int64_t Tm = static_cast<int64_t>(m.token_ids.size()), Nm = static_cast<int64_t>(m.logits_indices.size());
    rows[k] = Nm;
    if (!s.first_stage()) world_->recv(ws_.x.data(), Tm * c.dim * 4, prev, kTagStream);
    float* out = s.computes_logits() && logits ? logits + row * c.vocab_size : nullptr;
    run_stage(m, cache, out);
    if (!s.last_stage()) {  // x [Tm, d] on to the next stage; the buffer stays until wait_sends()
      float* x = &pp_stream_[b.query_start_loc[bounds[k]] * c.dim];
      std::copy_n(ws_.x.data(), Tm * c.dim, x);
      world_->isend(x, Tm * c.dim * 4, next, kTagStream);
    } else if (out && s.world_rank() != 0 && Nm > 0) {
      world_->isend(out, Nm * c.vocab_size * 4, 0, kTagLogits);
    }
    row += Nm;
  }
  if (s.world_rank() == 0 && !s.last_stage())
    for (int64_t k = 0, r = 0; k < M; r += rows[k++])
      if (rows[k] > 0) world_->recv(logits + r * c.vocab_size, rows[k] * c.vocab_size * 4, last, kTagLogits);
  world_->wait_sends();
}

}  // namespace kvik
