// Speculative decoding's rejection sampler (vLLM's v1/sample/rejection_sampler.py), beside the Sampler and
// through the same filter chain, one draft position at a time. With a one-hot proposal q = δ(draft):
//   accept the draft with probability min(1, p(draft) / q(draft)) = p(draft);
//   on rejection draw from norm(max(0, p − q)), which is p with the draft's mass removed.
// P(token = t) = p(draft)·[t = draft] + (1 − p(draft)) · p(t) / (1 − p(draft))·[t ≠ draft] = p(t): the
// output is distributed exactly as plain sampling from p.
#include "core/error.h"
#include "engine/sample/sampler.h"

namespace kvik {

SampleResult Sampler::verify_draft(std::span<const float> row, const SampleInput& in, int32_t draft, bool& accepted) {
  if (in.grammar) fail("internal: verify_draft with a grammar");
  const SamplingParams& p = *in.params;
  const std::span<const float> x = adjusted_logits(row, in);
  SampleResult r;
  if (p.temperature == 0.0f) {
    r.token = argmax(x);  // what sample() would give
    accepted = r.token == draft;
  } else {
    const auto d = sampling_distribution(x, p);  // p after temperature, top-k, top-p, min-p
    double p_draft = 0.0;
    for (const auto& [t, prob] : d)
      if (t == draft) p_draft = prob;
    accepted = in.rng->uniform() < p_draft;
    if (accepted) {
      r.token = draft;
    } else {
      // The residual norm(max(0, p − q)): every other token, in p's order, scaled by 1 / (1 − p(draft)).
      const double u = in.rng->uniform() * (1.0 - p_draft);
      double cum = 0.0;
      r.token = -1;
      for (const auto& [t, prob] : d) {
        if (t == draft) continue;
        r.token = t;  // the last other token catches rounding at the top of the range
        cum += prob;
        if (u < cum) break;
      }
      if (r.token < 0) {  // p is all on the draft (rounding kept u >= p(draft)): accept it after all
        r.token = draft;
        accepted = true;
      }
    }
  }
  if (p.logprobs >= 0) r.logprobs = compute_logprobs(row, r.token, p.logprobs);
  return r;
}

}  // namespace kvik
