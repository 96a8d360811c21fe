#include "engine/sample/sampler.h"

#include <chrono>
#include <limits>

#include "core/error.h"
#include "core/thread_pool.h"

namespace kvik {

namespace {
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Whether the row needs a modified copy before the grammar: bias, stops blocked by min_tokens, penalties.
bool adjusts_logits(const SamplingParams& p, int64_t num_output_tokens) {
  return !p.logit_bias.empty() || num_output_tokens < p.min_tokens || p.has_penalties();
}
}  // namespace

Sampler::Sampler(int64_t vocab_size) : vocab_size_(vocab_size) {
  adjusted_.resize(static_cast<size_t>(vocab_size));
  masked_.resize(static_cast<size_t>(vocab_size));
}

// A mask depends only on its sequence's grammar state, so the constrained inputs are independent and run on
// the thread pool; each GrammarDfa serializes the sequences that share it, and its per-state mask cache makes
// repeated states free.
void Sampler::compute_grammar_masks(std::span<const SampleInput> inputs) {
  last_mask_s_ = 0;
  masks_.assign(inputs.size(), nullptr);
  mask_errors_.assign(inputs.size(), std::string());
  std::vector<size_t> constrained;
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].grammar) constrained.push_back(i);
  if (constrained.empty()) return;
  const auto t0 = std::chrono::steady_clock::now();
  auto one = [&](size_t i) {
    try {
      masks_[i] = inputs[i].grammar->mask();
    } catch (const Error& e) {
      mask_errors_[i] = e.what();
    }
  };
  if (constrained.size() == 1) {
    one(constrained[0]);
  } else {
    ThreadPool::global().parallel_for_dynamic(static_cast<int64_t>(constrained.size()), 1, [&](int64_t b, int64_t e) {
      for (int64_t k = b; k < e; ++k) one(constrained[static_cast<size_t>(k)]);
    });
  }
  last_mask_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void Sampler::sample(const float* logits, std::span<const SampleInput> inputs, std::vector<SampleResult>& results) {
  compute_grammar_masks(inputs);
  results.clear();
  results.reserve(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::span<const float> row{logits + inputs[i].logits_row * vocab_size_, static_cast<size_t>(vocab_size_)};
    results.push_back(sample_one(row, inputs[i], i));
  }
}

std::span<const float> Sampler::adjusted_logits(std::span<const float> row, const SampleInput& in) {
  const SamplingParams& p = *in.params;
  const auto num_output = static_cast<int64_t>(in.output_ids.size());
  if (!adjusts_logits(p, num_output)) return row;
  adjusted_.assign(row.begin(), row.end());
  for (const auto& [id, bias] : p.logit_bias) adjusted_[id] += bias;
  if (num_output < p.min_tokens) {  // no stop before min_tokens
    for (int32_t id : in.eos_ids) adjusted_[id] = kNegInf;
    for (int32_t id : p.stop_token_ids) adjusted_[id] = kNegInf;
  }
  if (p.has_penalties()) apply_penalties(adjusted_, in.prompt_ids, in.output_ids, p);
  return adjusted_;
}

SampleResult Sampler::sample_unconstrained(std::span<const float> row, const SampleInput& in) {
  if (in.grammar) fail("internal: sample_unconstrained with a grammar");
  return sample_one(row, in, 0);
}

SampleResult Sampler::sample_one(std::span<const float> row, const SampleInput& in, size_t i) {
  const SamplingParams& p = *in.params;
  std::span<const float> x = adjusted_logits(row, in);
  SampleResult r;
  if (in.grammar) {
    // Tokens the grammar rejects get −∞. With nothing left to allow, the output is complete when the
    // grammar accepts it and an error otherwise — never an invalid token.
    const structured::TokenMask* mask = masks_[i].get();
    if (!mask || !mask->any) {
      r.status = mask && mask->accepting ? SampleResult::Status::kGrammarComplete : SampleResult::Status::kGrammarError;
      if (r.status == SampleResult::Status::kGrammarError)
        r.error = mask ? "structured output: no token of the vocabulary can continue the output here" : mask_errors_[i];
      return r;
    }
    structured::apply_token_mask(x, masked_, *mask, in.eos_ids, !p.ignore_eos);
    x = masked_;
  }
  r.token = sample_token(x, p, *in.rng);
  if (p.logprobs >= 0) r.logprobs = compute_logprobs(row, r.token, p.logprobs);
  return r;
}

}  // namespace kvik
