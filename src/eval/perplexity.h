// Perplexity and agreement with a reference model, by llama.cpp's method (tools/perplexity): the text's tokens
// (BOS first) cut into non-overlapping windows of ctx tokens, each window's first token replaced by BOS, and
// only the second half of each window scored, so every scored token has at least ctx/2 tokens of context.
// Windows run through LlamaModel::forward several at a time (one flat batch, one paged KV cache), as prefill.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "model/llama.h"

namespace kvik {

class Tokenizer;

struct PerplexityOptions {
  int32_t ctx = 512;            // tokens per window
  int32_t chunks = -1;          // windows to score (-1: all that fit)
  int32_t batch_tokens = 2048;  // tokens per forward pass: max(1, batch_tokens / ctx) windows at once
  DType kv_dtype = DType::F16;
  // Passed to every forward pass as ForwardBatch::observe (the residual stream at each layer; the outlier report).
  std::function<void(int32_t layer, const float* x, int64_t T)> observe;
};

struct PerplexityWindows {
  std::vector<int32_t> tokens;  // the whole text, BOS first when the tokenizer adds one
  int32_t ctx = 0, chunks = 0;
  int32_t bos = -1;                          // replaces each window's first token (-1: the tokenizer adds no BOS)
  int32_t first() const { return ctx / 2; }  // first position whose logits are scored
  int32_t scored() const { return ctx - 1 - ctx / 2; }  // scored tokens per window
  int32_t target(int32_t window, int32_t row) const {   // the token logits row `row` predicts
    return tokens[static_cast<size_t>(window) * ctx + first() + row + 1];
  }
};
// Tokenizes `text` as llama-perplexity does and cuts the windows; throws kvik::Error when the text holds fewer
// than ctx tokens or ctx < 4.
PerplexityWindows make_windows(const Tokenizer& tok, const std::string& text, int32_t ctx, int32_t chunks);

// Runs windows [begin, end) through `model` and calls sink(window, logits) with the logits of its scored rows,
// [scored(), V] row-major, windows in order.
using WindowSink = std::function<void(int32_t window, const float* logits)>;
void run_windows(LlamaModel& model, const PerplexityWindows& windows, const PerplexityOptions& opt, int32_t begin,
                 int32_t end, const WindowSink& sink);
// Windows one forward pass holds.
inline int32_t windows_per_pass(const PerplexityOptions& o) {
  return o.batch_tokens / o.ctx > 1 ? o.batch_tokens / o.ctx : 1;
}

// −log p(target) of one logits row, computed as llama.cpp does (float max, double Σ e^(l−max)).
double token_nll(const float* logits, int64_t n_vocab, int32_t target);
// Index of the largest logit (the first of equals).
int32_t argmax(const float* logits, int64_t n_vocab);

// Σ nll and Σ nll² over the scored tokens; ppl = e^mean, its uncertainty as llama.cpp prints it.
struct NllSum {
  double sum = 0, sum2 = 0;
  int64_t count = 0;
  void add(double nll) { sum += nll, sum2 += nll * nll, ++count; }
  double ppl() const;
  double ppl_stderr() const;
};

// The figures llama-perplexity --kl-divergence prints, from the reference's log-probabilities stored as it
// stores them (16-bit, scale and minimum per row) so the numbers match.
struct KlStats {
  NllSum nll;            // the evaluated model's
  double sum_kld = 0;    // Σ KL(reference ‖ model)
  double sum_dp2 = 0;    // Σ (p − p_ref)² of the target token
  int64_t same_top = 0;  // rows whose argmax equals the reference's
  int64_t count = 0;
  double kld_mean() const { return count ? sum_kld / count : 0; }
  double top1_agreement() const { return count ? static_cast<double>(same_top) / count : 0; }
  double delta_p_rms() const;
};
// One row of reference log-probabilities in llama.cpp's 16-bit form: [scale, min] as two floats, then V values.
std::vector<uint16_t> encode_reference_row(const float* logits, int64_t n_vocab);
void add_kl_row(KlStats& s, const float* logits, int64_t n_vocab, const uint16_t* reference, int32_t target);

struct PerplexityResult {
  double ppl = 0, ppl_stderr = 0;
  int64_t tokens = 0;  // scored tokens
  int32_t chunks = 0;
  std::optional<double> kld_mean, top1_agreement, delta_p_rms;  // with a reference model
  double seconds = 0;
  int64_t evaluated_tokens = 0;  // tokens run through the model (chunks × ctx, per model)
};
// Perplexity of `model` on the windows; with `reference`, the agreement figures against it as well (both
// models see the same windows; the reference must share the vocabulary).
PerplexityResult perplexity(LlamaModel& model, const PerplexityWindows& windows, const PerplexityOptions& opt,
                            LlamaModel* reference = nullptr);

}  // namespace kvik
