// Reasoning ("thinking") text in a model's output, as vLLM's --reasoning-parser splits it:
//   qwen3        an output that opens with <think> reasons until </think>; one without <think> is all content
//                (enable_thinking: false puts the empty think block into the prompt instead)
//   deepseek_r1  the template opens <think> in the prompt, so everything up to </think> is reasoning (all of
//                it when </think> never comes); a leading <think> the model writes itself is dropped
// Incremental like the tool-call parser: streamed deltas reassemble to the whole-output split. Whitespace right
// after </think> is not content.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace kvik {

enum class ReasoningFormat { kQwen3, kDeepSeekR1 };

std::optional<ReasoningFormat> reasoning_format_from_name(std::string_view name);  // "qwen3", "deepseek_r1"

struct ReasoningDelta {
  std::string reasoning;
  std::string content;
};

class ReasoningParser {
 public:
  explicit ReasoningParser(ReasoningFormat format) : format_(format) {}
  ReasoningDelta push(std::string_view text);
  ReasoningDelta finish();

 private:
  void step(bool final, ReasoningDelta& out);

  enum class State { kStart, kThinking, kAfterThinking, kContent };
  ReasoningFormat format_;
  State state_ = State::kStart;
  std::string buf_;
};

// The whole output at once.
ReasoningDelta split_reasoning(ReasoningFormat format, std::string_view text);

}  // namespace kvik
