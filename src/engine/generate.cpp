#include "engine/generate.h"

#include <chrono>
#include <random>

#include "core/error.h"
#include "engine/sampler.h"
#include "engine/single_sequence.h"
#include "tokenizer/streaming_detokenizer.h"

namespace kvik {

GenerateResult generate(LlamaModel& model, const Tokenizer& tok, std::vector<int32_t> prompt_ids,
                        const SamplingParams& params, const GenerateOptions& opt) {
  using Clock = std::chrono::steady_clock;
  const int64_t max_len = opt.max_model_len > 0 ? opt.max_model_len : model.config().context_length;
  if (prompt_ids.empty()) fail("the prompt is empty (no tokens to start from)");
  if (static_cast<int64_t>(prompt_ids.size()) > max_len)
    fail("the prompt has {} tokens, more than the context length {}", prompt_ids.size(), max_len);
  GenerateResult r;
  r.prompt_token_ids = prompt_ids;
  RequestRng rng(params.seed ? *params.seed : std::random_device{}());
  SingleSequence seq(model, max_len, opt.kv_dtype);
  StreamingDetokenizer detok(tok, prompt_ids);
  auto emit = [&](const std::string& s) {
    r.text += s;
    if (opt.on_text && !s.empty()) opt.on_text(s);
  };

  auto t0 = Clock::now();
  std::vector<float> logits = seq.append(prompt_ids);
  r.prefill_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  r.finish_reason = "length";
  auto t1 = Clock::now();
  while (static_cast<int32_t>(r.token_ids.size()) < params.max_tokens) {
    const int32_t id = sample_token(logits, params, rng);
    if (tok.is_eog(id) && !params.ignore_eos) {
      r.finish_reason = "stop";
      break;
    }
    r.token_ids.push_back(id);
    emit(detok.push(id));
    if (static_cast<int32_t>(r.token_ids.size()) >= params.max_tokens || seq.length() >= max_len) break;
    const int32_t one[1] = {id};
    logits = seq.append(one);
    ++r.decode_steps;
  }
  emit(detok.flush());
  r.decode_ms = std::chrono::duration<double, std::milli>(Clock::now() - t1).count();
  return r;
}

}  // namespace kvik
