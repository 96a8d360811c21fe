// The engine flags shared by `generate`, `bench` and `serve`, spelled as vLLM spells them.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "engine/engine_core.h"

namespace kvik::cli {

struct EngineFlags {
  EngineConfig config;
  std::string kv_cache_dtype = "auto";
  int threads = 0;
  bool repack = true;
  // Applies the string-valued flags to `config`, sets the thread count; call before building the engine.
  EngineConfig resolve();
};

void add_engine_flags(CLI::App* cmd, EngineFlags& f);
// "auto" (= f16), "f16", "f32", "q8_0", "fp8" / "fp8_e4m3"; throws kvik::Error naming the value otherwise.
DType parse_kv_dtype(const std::string& name);

}  // namespace kvik::cli
