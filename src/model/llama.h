// The Llama-family transformer (llama2.c's run.c is the bar for how this reads): embedding, L pre-norm blocks
// of attention + SwiGLU MLP on the residual stream, final norm, LM head.
#pragma once

#include <cstdlib>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "dist/communicator.h"
#include "formats/gguf.h"
#include "formats/safetensors.h"
#include "kernels/cpu/packed.h"
#include "model/intervention.h"
#include "model/kv_cache.h"
#include "model/lora.h"
#include "model/model_config.h"
#include "model/model_shard.h"
#include "model/moe.h"
#include "tensor/tensor.h"

namespace kvik {

// One step's flat batch: all scheduled tokens of all requests, [T] rows, as vLLM's model runner builds it.
struct ForwardBatch {
  std::span<const int32_t> token_ids;        // [T]
  std::span<const int32_t> positions;        // [T]
  std::span<const int64_t> slot_mapping;     // [T] cache slot each token's K/V is written to
  std::span<const int32_t> query_start_loc;  // [R + 1]
  std::span<const int32_t> seq_lens;         // [R] tokens in the cache after this step
  std::span<const int32_t> block_tables;     // [R, max_blocks_per_seq]
  int32_t max_blocks_per_seq = 0;
  std::span<const int32_t> logits_indices;  // rows whose logits are wanted, [N]
  // Interventions (model/intervention.h), per token: its request's list or nullptr. Empty when no token of the
  // batch has any: the forward pass then does no extra work.
  std::span<const InterventionList* const> interventions;  // [T] or empty
  // Called with the residual stream x [T, d] at every stream layer (0 = after the embedding, ℓ = after block
  // ℓ−1), after interventions: the logit lens, direction finding and trace read the stream through it.
  std::function<void(int32_t layer, const float* x, int64_t T)> observe;
  // LoRA adapters (model/lora.h), per token: its request's adapter or nullptr (the base model). Empty when no token
  // of the batch has one: the forward pass then does no extra work.
  std::span<const LoraAdapter* const> loras;  // [T] or empty
  // The local (sliding-window) layers' own block tables and slots, when they keep their KV in a pool of their own
  // (KvCacheTensors::local_num_blocks); empty: they use block_tables and slot_mapping like every layer.
  std::span<const int64_t> local_slot_mapping;  // [T]
  std::span<const int32_t> local_block_tables;  // [R, max_blocks_per_seq]
};

struct LayerWeights {
  const float* attn_norm = nullptr;                         // [d]
  WeightMatrix wq, wk, wv, wo;                              // [d → n_h·d_h], [d → n_kv·d_h] ×2, [n_h·d_h → d]
  const float *bq = nullptr, *bk = nullptr, *bv = nullptr;  // attention biases (Qwen2), or null
  const float *q_norm = nullptr, *k_norm = nullptr;         // per-head RMSNorm weights [d_h] (Qwen3), or null
  const float *post_attn_norm = nullptr, *post_ffn_norm = nullptr;  // [d]: Gemma's norms of the two outputs, or null
  const float* ffn_norm = nullptr;                                  // [d]
  WeightMatrix w_gate, w_up, w_down;  // [d → d_ff] ×2, [d_ff → d]; empty in a MoE model
  MoeWeights moe;                     // router and experts (Mixtral, Qwen3-MoE), or empty
};

struct LoadOptions {
  LoadOptions(bool repack = true) : repack_weights(repack) {}  // NOLINT: LoadOptions{false} = unpacked
  // Repack the matmul weights the CPU's kernels have a packed layout for (`--repack`, default on); off, every
  // weight runs in its file layout.
  bool repack_weights;
  // Tensor and pipeline parallelism: this rank loads only its shard (model/model_shard.h), talking to the other
  // ranks through `world` (default: dist::world()).
  ParallelConfig parallel;
  std::shared_ptr<dist::Communicator> world;
};

class LlamaModel {
 public:
  // Loads (mmaps) a GGUF file, or a Hugging Face directory (config.json + model.safetensors or a sharded
  // index), and validates every tensor's dtype and shape; throws kvik::Error naming the file and the tensor
  // with expected vs found.
  static std::unique_ptr<LlamaModel> load(const std::string& path, const LoadOptions& options = {});

  const ModelConfig& config() const { return config_; }
  const std::string& path() const { return path_; }
  const GgufFile& gguf() const;  // throws kvik::Error for a Hugging Face directory
  int64_t parameter_count() const;
  // Parameters one token runs through: all of them, less the experts its router did not pick (E − k of E per block).
  int64_t active_parameter_count() const;
  int64_t weight_bytes() const;
  // Memory the weights occupy: the mapped file less the pages of repacked originals handed back, plus the packed
  // copies (what the KV cache budget subtracts); a shard: the bytes of the matrices it holds (shard_weight_bytes).
  int64_t resident_weight_bytes() const {
    return shard_.distributed() ? shard_weight_bytes() : weight_bytes() - released_bytes_ + packed_bytes_;
  }
  // This rank's part of the model (the whole model in one process) and the job's communicator.
  const ModelShard& shard() const { return shard_; }
  dist::Communicator& world() const { return *world_; }
  // The bytes of the matrices, norms and embedding rows this rank reads: its slices (packed where repacked), the
  // embedding table on the first stage, the LM head where logits are computed.
  int64_t shard_weight_bytes() const;
  // The bytes of the MoE experts this rank holds (packed where repacked): all of them in one process, its share
  // under tensor or expert parallelism; 0 for a dense model.
  int64_t expert_weight_bytes() const;
  // Weight bytes one batch-1 decode step reads: every matrix once (in its packed form where repacked), of the
  // embedding table only one row, of a block's experts only k of E (their mean size).
  int64_t decode_bytes_per_token() const;
  DType embedding_dtype() const { return token_embd_.dtype; }

  // Runs the batch; writes K/V of every token into `cache` and logits [N, V] for batch.logits_indices. A rank of a
  // parallel job runs its shard; `logits` is written on world rank 0 only (null elsewhere is fine).
  void forward(const ForwardBatch& batch, KvCacheTensors& cache, float* logits);
  // Final norm and LM head on N stream rows x [N, d]: logits [N, V] (what the logit lens applies per layer).
  void lm_head(const float* x, int64_t N, float* logits);

  // Fake quantization (kvik eval quant-error): every layer's seven projections become F32 copies of their
  // weights, rows × cols row-major, which f may change in place; the embedding table and the LM head stay.
  // `name` is the GGUF tensor name without ".weight" ("blk.0.attn_q").
  using WeightEdit = std::function<void(const std::string& name, float* w, int64_t rows, int64_t cols)>;
  void edit_layer_weights(const WeightEdit& f);

 private:
  struct Workspace {
    int64_t capacity = 0;
    std::vector<float> x, xn, q, k, v, attn, proj, gate, up, rows;
    void reserve(const ModelConfig& c, int64_t T);
  };

  LlamaModel() = default;
  static std::unique_ptr<LlamaModel> load_hf(const std::string& dir, const LoadOptions& options);
  const float* owned_floats(const uint8_t* data, DType dtype, int64_t n);  // a dequantized copy kept by the model
  void pack_weights(
      bool repack);  // when `repack`, repacks the matmul weights the CPU's kernels have a packed layout for
  // f(w) for the LM head and every layer's projections: seven, or four + router + 3 per expert (const or not, as
  // `self` is).
  template <typename Self, typename F>
  static void for_each_matmul_weight(Self& self, F&& f) {
    if (self.output_.rows > 0) f(self.output_);
    for (auto& l : self.layers_) {
      for (auto* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down})
        if (w->rows > 0) f(*w);
      if (l.moe.router.rows > 0) f(l.moe.router);
      for (auto* ws : {&l.moe.gate, &l.moe.up, &l.moe.down})
        for (auto& w : *ws) f(w);
    }
  }
  // The bytes a matrix occupies here: its packed copy where repacked, else its rows in the file's layout.
  static int64_t held_bytes(const WeightMatrix& w) {
    return w.packed ? static_cast<int64_t>(packed_bytes(w)) : w.rows * static_cast<int64_t>(w.row_bytes);
  }
  void log_moe_summary() const;
  // Tensor and pipeline parallelism (llama_parallel.cpp): keeps this rank's slices of the loaded views.
  void shard_weights(const LoadOptions& options);
  void check_parallel_config(const ParallelConfig& p) const;
  void check_same_model() const;
  void check_expert_parallel(const ParallelConfig& p) const;
  // A MoE block's share on this tensor rank: each expert's d_ff_exp slice, or whole experts (expert parallelism).
  void shard_experts(MoeWeights& m);
  // Columns [first, first + n) of every row, copied (a row-parallel matrix's slice is not contiguous); the mapped
  // original's pages are handed back.
  WeightMatrix columns_of(const WeightMatrix& w, int64_t first, int64_t n);
  int64_t release_pages(const uint8_t* data, size_t bytes);  // madvise(DONTNEED) of the whole pages inside
  // One stage's layers on one (micro-)batch: embedding or the received stream, the layers, the LM head.
  void run_stage(const ForwardBatch& b, KvCacheTensors& cache, float* logits);
  // The last stage's tensor ranks each compute V/T of the logits of ws_.rows [N, d]; tensor rank 0 gathers them
  // into logits [N, V].
  void vocab_parallel_lm_head(int64_t N, float* logits);
  // Pipeline parallelism: the batch in micro-batches, each sent on to the next stage as soon as it is done.
  void forward_pipelined(const ForwardBatch& b, KvCacheTensors& cache, float* logits);
  ForwardBatch micro_batch(const ForwardBatch& b, int64_t r0, int64_t r1);
  void all_reduce_partial(float* x, int64_t n) {  // a row-parallel matmul's partial sums → the full output
    if (shard_.tp_size > 1) tp_->all_reduce_sum(x, n);
  }
  void attention_block(int64_t layer, const ForwardBatch& b, KvCacheTensors& cache, int64_t T);
  void mlp_block(int64_t layer, const ForwardBatch& b, int64_t T);
  void post_norm(const float* g, int64_t T);
  // The stream at layer `layer` is written (block_end: x_layer is complete): interventions, then the observer.
  void stream_written(const ForwardBatch& b, int32_t layer, bool block_end, int64_t T);

  std::string path_;
  std::unique_ptr<GgufFile> gguf_;
  std::unique_ptr<SafetensorsModel> safetensors_;
  std::vector<std::vector<float>> owned_;  // norms/biases converted to f32
  PackedBuffer packed_;                    // repacked copies of weights (WeightMatrix::packed points here)
  int64_t packed_bytes_ = 0, released_bytes_ = 0;
  ModelConfig config_;
  WeightMatrix token_embd_;  // [V, d]
  const float* output_norm_ = nullptr;
  WeightMatrix output_;
  std::vector<LayerWeights> layers_;
  Workspace ws_;
  MoeWorkspace moe_ws_;
  LoraRunner lora_;  // the step's tokens grouped by adapter
  ModelShard shard_;
  std::shared_ptr<dist::Communicator> world_;
  std::unique_ptr<dist::Communicator> tp_;  // this stage's tensor-parallel group
  struct FreeSlice {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  std::vector<std::unique_ptr<uint8_t, FreeSlice>> slices_;  // row-parallel column slices (columns_of)
  std::vector<float> pp_stream_;                             // [T, d] micro-batches' streams being sent on
  std::vector<float> vocab_part_, vocab_gathered_;           // [N, V/T] and [T, N, V/T] (vocab-parallel LM head)
  std::vector<int32_t> mb_query_start_loc_, mb_logits_indices_;
  std::vector<int64_t> mb_bounds_, mb_rows_;  // micro-batch k: requests [bounds[k], bounds[k + 1]), rows[k] logits
};

}  // namespace kvik
