// Looking inside the model (docs/interpretability.md): the residual stream of a prompt at every layer,
// the logit lens, and concept directions as the difference of two prompt groups' mean activations.
// Sits above engine/ (it runs prompts through SingleSequence) and below cli/.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/intervention.h"
#include "model/llama.h"

namespace kvik::interp {

// The residual stream of one prompt: x[ℓ] is [T, d] for stream layers ℓ = 0 (after the embedding) .. L.
struct StreamCapture {
  int64_t T = 0, dim = 0;
  std::vector<std::vector<float>> x;  // [L + 1][T · d]
  const float* row(int32_t layer, int64_t t) const { return &x[layer][t * dim]; }
};

// Runs the tokens through the model as one prefill (with `interventions` applied, when given) and returns the
// stream at every layer and the logits of every position [T, V] in `logits` (when not null).
StreamCapture capture_stream(LlamaModel& model, const std::vector<int32_t>& tokens,
                             std::shared_ptr<const InterventionList> interventions = nullptr,
                             std::vector<float>* logits = nullptr);

struct TokenProb {
  int32_t id = 0;
  float prob = 0;
};

// Logit lens: LMHead(FinalNorm(x_ℓ)) for every stream layer and position.
struct LensCell {
  std::vector<TokenProb> top;  // the top-k, most likely first
  int32_t target = 0;          // the prompt's next token; at the last position the model's own greedy token
  int32_t target_rank = 0;     // its rank here (0 = top)
  float target_prob = 0;
};
struct Lens {
  int64_t T = 0;
  std::vector<std::vector<LensCell>> cells;  // [L + 1][T]
};
Lens logit_lens(LlamaModel& model, const StreamCapture& s, const std::vector<int32_t>& tokens, int32_t top_k);

// Softmax of one logits row (max-subtracted, double accumulation) and its top-k.
std::vector<float> softmax(const float* logits, int64_t n);
std::vector<TokenProb> top_k(const std::vector<float>& probs, int32_t k);

// A concept direction between two prompt groups, and where in the model it separates them.
struct LayerSeparation {
  double pos_mean = 0, pos_std = 0, neg_mean = 0, neg_std = 0;
};
struct DirectionResult {
  Direction direction;                      // r̂ at the chosen layer, with the raw difference's norm
  std::vector<LayerSeparation> separation;  // per stream layer: projections x_ℓ · r̂ of each group
};
enum class Pooling { kLast, kMean };  // the prompt's last position, or the mean over its positions
DirectionResult find_direction(LlamaModel& model, const std::vector<std::vector<int32_t>>& positive,
                               const std::vector<std::vector<int32_t>>& negative, int32_t layer, Pooling pool);
void save_direction(const DirectionResult& r, int64_t dim, const std::string& path);

// The model's id as directions record it: general.name, else the file name.
std::string model_id(const LlamaModel& model);

// Share of repeated 4-grams among the 4-grams of `tokens` (0 when fewer than 4 tokens): the looping measure.
double repeated_4gram_rate(const std::vector<int32_t>& tokens);

}  // namespace kvik::interp
