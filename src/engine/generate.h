// The simplest generation loop: one prompt, one sequence, prefill then decode until a stop.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/sampling_params.h"
#include "model/kv_cache.h"
#include "model/llama.h"
#include "tokenizer/tokenizer.h"

namespace kvik {

struct GenerateResult {
  std::vector<int32_t> prompt_token_ids;
  std::vector<int32_t> token_ids;
  std::string text;
  std::string finish_reason;  // "stop" (EOS) or "length" (max_tokens or the context length)
  double prefill_ms = 0, decode_ms = 0;
  int64_t decode_steps = 0;
};

struct GenerateOptions {
  int64_t max_model_len = 0;  // 0 = the model's context length
  KvDType kv_dtype = KvDType::kF32;
  std::function<void(const std::string&)> on_text;  // streamed text, complete UTF-8 characters only
};

GenerateResult generate(LlamaModel& model, const Tokenizer& tok, std::vector<int32_t> prompt_ids,
                        const SamplingParams& params, const GenerateOptions& opt);

}  // namespace kvik
