// The engine flags shared by `generate`, `bench`, `serve` and `chat`, spelled as vLLM spells them.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "engine/engine_core.h"

namespace kvik::cli {

struct EngineFlags {
  EngineConfig config;
  std::string kv_cache_dtype = "auto";
  std::string speculative_config;  // JSON, parsed by resolve()
  // The engine config the flags give (string-valued flags resolved). Load the model with load_model(path, it)
  // and build the engine with it: the thread count and the repack switch are fields of it, applied there.
  EngineConfig resolve() const;
};

void add_engine_flags(CLI::App* cmd, EngineFlags& f);
// "auto" (= f16), "f16", "f32", "q8_0", "fp8" / "fp8_e4m3"; throws kvik::Error naming the value otherwise.
DType parse_kv_dtype(const std::string& name);

}  // namespace kvik::cli
