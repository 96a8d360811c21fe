// This process's part of the model under tensor and pipeline parallelism (vLLM's parallel_state): world rank
// r = stage · T + tp_rank. A stage owns a contiguous range of layers; within it, tensor-parallel rank t owns query
// heads [t·n_h/T, (t+1)·n_h/T), the KV heads they read, and d_ff/T of the MLP (Megatron's column- and
// row-parallel split: q, k, v, gate, up by rows, o and down by columns, an all-reduce after each of the last two).
// A mixture-of-experts block splits each expert's d_ff_exp the same way, or, with expert parallelism
// (--enable-expert-parallel), tensor rank t owns whole experts [t·E/T, (t+1)·E/T) instead.
#pragma once

#include <cstdint>

namespace kvik {

struct ParallelConfig {
  int32_t tensor_parallel_size = 1;     // T (--tensor-parallel-size)
  int32_t pipeline_parallel_size = 1;   // P (--pipeline-parallel-size)
  bool enable_expert_parallel = false;  // --enable-expert-parallel: whole experts per tensor rank
  int32_t world_size() const { return tensor_parallel_size * pipeline_parallel_size; }
  bool enabled() const { return world_size() > 1; }
};

struct ModelShard {
  int32_t tp_rank = 0, tp_size = 1;
  int32_t stage = 0, pp_size = 1;
  int64_t first_layer = 0, end_layer = 0;  // the stage's layers [first_layer, end_layer)
  int64_t n_layers = 0;                    // of the whole model
  // Experts [first_expert, end_expert) of each MoE block are held here (whole: expert parallelism; every expert,
  // sliced, without it); none in a dense model.
  bool expert_parallel = false;
  int64_t first_expert = 0, end_expert = 0;
  int32_t world_rank() const { return stage * tp_size + tp_rank; }
  int32_t rank_of(int32_t s, int32_t t) const { return s * tp_size + t; }
  bool first_stage() const { return stage == 0; }
  bool last_stage() const { return stage == pp_size - 1; }
  // The LM head runs on one rank: tensor rank 0 of the last stage (which sends the logits to world rank 0).
  bool computes_logits() const { return last_stage() && tp_rank == 0; }
  bool distributed() const { return tp_size * pp_size > 1; }
  bool owns_layer(int64_t l) const { return l >= first_layer && l < end_layer; }
};

// Stage s of P over L layers: [s·L/P, (s+1)·L/P), the remainder spread over the first stages.
inline void assign_layers(ModelShard& s, int64_t n_layers) {
  const int64_t base = n_layers / s.pp_size, extra = n_layers % s.pp_size;
  s.n_layers = n_layers;
  s.first_layer = s.stage * base + (s.stage < extra ? s.stage : extra);
  s.end_layer = s.first_layer + base + (s.stage < extra ? 1 : 0);
}

}  // namespace kvik
