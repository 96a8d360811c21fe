// The mixture-of-experts MLP (Mixtral, Qwen3-MoE): llama.cpp's build_moe_ffn over mul_mat_id, vLLM's fused_moe.
// Per block, a router scores the E experts for each token, the k best are run and their outputs summed with the
// router's weights. Only k of E experts' weights are read per token; within a step the tokens are grouped by
// expert, so each active expert's weights are read once for all of its tokens (kernels/cpu/ops.h matmul_grouped).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cpu/ops.h"
#include "model/model_config.h"
#include "tensor/tensor.h"

namespace kvik {

struct MoeWeights {
  WeightMatrix router;                       // ffn_gate_inp [d → E]
  std::vector<WeightMatrix> gate, up, down;  // per expert: [d → d_ff_exp] ×2, [d_ff_exp → d]
  // gate, up, down hold experts [first_expert, first_expert + gate.size()) of the router's E: all E in one process,
  // a tensor rank's own under expert parallelism (model/model_shard.h).
  int64_t first_expert = 0;
};

// The router, as both families define it (HF MixtralSparseMoeBlock / Qwen3MoeSparseMoeBlock, llama.cpp's
// build_moe_ffn): p = softmax(logits) over all E experts, the k largest p in descending order, and, when `norm`,
// those k weights divided by their sum. (Mixtral's "softmax over the top-k logits" is the same numbers:
// exp(l_i) / Σ_topk exp(l_j) = p_i / Σ_topk p_j.) logits [T, E] → ids [T, k], weights [T, k].
void route_experts(const float* logits, int64_t T, int64_t E, int64_t k, bool norm, int32_t* ids, float* weights);

// Buffers of one step's MoE MLP, sized for `T` tokens at a time (reused every step).
struct MoeWorkspace {
  int64_t capacity = 0;  // tokens per chunk
  std::vector<float> logits, weights, xs, gate, up, ys;
  std::vector<int32_t> ids, pos, counts, offsets;
  std::vector<MatmulGroup> groups;
  void reserve(const ModelConfig& c, int64_t T);
};

// out [T, d] = Σ_k weight · down_e(silu(gate_e(xn)) · up_e(xn)) over each token's k routed experts, summed in
// routing order (llama.cpp's). xn [T, d] is the normed stream. Tokens run in chunks of the workspace's capacity.
// When `w` holds only some experts (expert parallelism), the sum runs over the routed experts it holds (0 for a
// token with none): the partial sum that the all-reduce over the ranks completes.
void moe_mlp(const MoeWeights& w, const ModelConfig& c, const float* xn, int64_t T, MoeWorkspace& ws, float* out);

// Tokens per chunk of moe_mlp: bounds the workspace (chunk·k rows of d and d_ff_exp floats).
constexpr int64_t kMoeChunkTokens = 256;

}  // namespace kvik
