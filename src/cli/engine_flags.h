// The engine flags shared by `generate`, `bench`, `serve` and `chat`, spelled as vLLM spells them.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "engine/engine_core.h"

namespace kvik::cli {

struct EngineFlags {
  EngineConfig config;
  std::string kv_cache_dtype = "f32";
  // The engine config the flags give (string-valued flags resolved). Load the model with load_model(path, it)
  // and build the engine with it: the thread count and the repack switch are fields of it, applied there.
  EngineConfig resolve() const;
};

void add_engine_flags(CLI::App* cmd, EngineFlags& f);

}  // namespace kvik::cli
