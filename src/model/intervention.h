// Run-time interventions on the residual stream (docs/interpretability.md): a unit direction r̂ in
// the stream's d dimensions, and per request either steering (x ← x + α r̂) or directional ablation
// (x ← x − (x · r̂) r̂) at chosen stream layers.
//
// Stream layers are numbered as the logit lens numbers them: ℓ = 0 is the stream after the embedding, ℓ = i + 1
// the stream after block i (so ℓ = L is what the final norm and LM head read).
//  - steer at ℓ: α r̂ is added once to x_ℓ (after the embedding, or after block ℓ−1's MLP add).
//  - ablate at ℓ: r̂ is projected out of the stream after every write that produces x_ℓ: after the embedding for
//    ℓ = 0, after block ℓ−1's attention add and again after its MLP add for ℓ ≥ 1. Ablating every layer is
//    therefore the same as removing r̂ from the outputs of the embedding and of every o_proj and down
//    projection, which is what `kvik bake-ablation` writes into the weights.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kvik {

// A concept direction as `kvik direction` saves it (JSON: model, layer, d, norm, vector).
struct Direction {
  std::string model;          // the model it was found in (general.name or file name)
  int32_t layer = 0;          // the stream layer it was measured at
  float norm = 0;             // |mean_pos − mean_neg| before normalizing
  std::vector<float> vector;  // r̂, unit length, [d]
};

// Reads a direction file; throws kvik::Error naming the file and what is wrong. `dim` > 0 checks its d.
Direction load_direction(const std::string& path, int64_t dim = 0);

struct Intervention {
  enum class Op { kSteer, kAblate };
  Op op = Op::kSteer;
  std::shared_ptr<const std::vector<float>> direction;  // r̂ [d], unit length
  float alpha = 0;                                      // steering strength (steer only)
  std::vector<int32_t> layers;                          // stream layers it applies at, sorted, unique

  bool at(int32_t layer) const;
};

// The interventions of one request, checked against the model (build with make_interventions).
struct InterventionList {
  std::vector<Intervention> items;
  uint64_t cache_key = 0;  // hash of everything above: the prefix cache keeps steered KV apart from plain KV
};

// Validates (layers within 0..n_layers, direction of length dim and nonzero) and normalizes each direction;
// returns the list with its cache key. Throws kvik::Error naming the intervention and what is wrong.
std::shared_ptr<const InterventionList> make_interventions(std::vector<Intervention> items, int64_t n_layers,
                                                           int64_t dim);

// Applies the list's interventions at stream layer `layer` to one token's stream row x [d]. `block_end` is false
// after an attention add (only ablations apply there) and true where x_ℓ is complete.
void apply_interventions(const InterventionList& list, int32_t layer, bool block_end, float* x, int64_t dim);

// Parses a layer list "3,4,8-10" (stream layers); throws kvik::Error naming `what` on bad input.
std::vector<int32_t> parse_layer_list(const std::string& s, const std::string& what);

}  // namespace kvik
