// kvik's subcommands. Each registers its flags on a CLI11 subcommand and returns the function that runs it.
#pragma once

#include <functional>
#include <string>

#include <CLI/CLI.hpp>

#include "engine/engine_core.h"
#include "eval/perplexity.h"

namespace kvik::cli {

using Run = std::function<int()>;

Run add_generate(CLI::App& app);
Run add_tokenize(CLI::App& app);
Run add_detokenize(CLI::App& app);
Run add_inspect(CLI::App& app);
Run add_synth(CLI::App& app);
Run add_render_chat(CLI::App& app);
Run add_chat(CLI::App& app);
Run add_serve(CLI::App& app);
Run add_bench(CLI::App& app);
Run add_quantize(CLI::App& app);
Run add_bench_serve(CLI::App& app);
Run add_perplexity(CLI::App& app);
Run add_eval(CLI::App& app);

// A whole text file (perplexity and eval); throws kvik::Error when it cannot be read or is empty.
std::string read_text_file(const std::string& path);

// --ctx, --chunks, --batch-size, --kv-cache-dtype and --threads of perplexity and eval.
void add_perplexity_flags(CLI::App* c, PerplexityOptions& o, std::string& kv, int& threads);
// Checks them, sets o.kv_dtype from `kv`, and returns the configuration the models load with (threads).
EngineConfig resolve_perplexity_flags(PerplexityOptions& o, const std::string& kv, int threads);
Run add_lens(CLI::App& app);
Run add_direction(CLI::App& app);
Run add_trace(CLI::App& app);
Run add_bake_ablation(CLI::App& app);
Run add_merge_lora(CLI::App& app);
Run add_synth_lora(CLI::App& app);

}  // namespace kvik::cli
