// kvik's subcommands. Each registers its flags on a CLI11 subcommand and returns the function that runs it.
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

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
Run add_lens(CLI::App& app);
Run add_direction(CLI::App& app);
Run add_trace(CLI::App& app);
Run add_bake_ablation(CLI::App& app);

}  // namespace kvik::cli
