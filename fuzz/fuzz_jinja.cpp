// libFuzzer entry point for the Jinja engine (src/chat): the input is a chat template, rendered with a
// conversation that reaches the usual template paths (system prompt, tools, tool calls and results, several
// turns). Any template either renders or throws kvik::Error (jinja::TemplateError): never a crash, never
// unbounded recursion, memory or time. The limits are smaller than the defaults so that runs stay fast.
#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "core/error.h"

namespace {

const nlohmann::ordered_json& messages() {
  static const auto m = nlohmann::ordered_json::parse(R"([
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "What is the weather in Umeå?"},
    {"role": "assistant", "content": null, "tool_calls": [{"id": "abc123XYZ", "type": "function",
      "function": {"name": "get_weather", "arguments": {"city": "Umeå", "unit": "c"}}}]},
    {"role": "tool", "content": "{\"temp\": -3}", "tool_call_id": "abc123XYZ"},
    {"role": "assistant", "content": "<think>\nCold.\n</think>\n\nIt is -3 °C.", "reasoning_content": "Cold."},
    {"role": "user", "content": "Thanks! 🦙 [1, 2.5, true]"}
  ])");
  return m;
}

const nlohmann::ordered_json& extra() {
  static const auto e = nlohmann::ordered_json::parse(R"({
    "bos_token": "<s>", "eos_token": "</s>", "add_generation_prompt": true, "enable_thinking": false,
    "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"},
        "unit": {"type": "string", "enum": ["c", "f"]}}, "required": ["city"]}}}]
  })");
  return e;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kvik::jinja::Limits limits;
  limits.max_output_bytes = 1 << 20;
  limits.max_loop_iterations = 100'000;
  try {
    (void)kvik::render_chat_template(std::string(reinterpret_cast<const char*>(data), size), messages(), extra(),
                                     limits);
  } catch (const kvik::Error&) {
  }
  return 0;
}
