// kvik: an LLM inference engine. `kvik <command> --help` for each command.
#include <cstdio>
#include <map>
#include <string>

#include "cli/commands.h"
#include "core/error.h"
#include "dist/communicator.h"
#include "kernels/cpu/cpu_kernels.h"

int main(int argc, char** argv) {
  // The kernel table first, while the process has one thread: on an AMX CPU choosing it runs the AMX self-test in a
  // forked child, which must not happen after MPI or the thread pool have started.
  kvik::cpu_kernels();
  CLI::App app{"kvik: LLM inference on the CPU (GGUF Llama models)"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Help for every command");
  std::map<std::string, kvik::cli::Run> runs;
  runs["generate"] = kvik::cli::add_generate(app);
  runs["tokenize"] = kvik::cli::add_tokenize(app);
  runs["detokenize"] = kvik::cli::add_detokenize(app);
  runs["inspect"] = kvik::cli::add_inspect(app);
  runs["synth"] = kvik::cli::add_synth(app);
  runs["render-chat"] = kvik::cli::add_render_chat(app);
  runs["chat"] = kvik::cli::add_chat(app);
  runs["serve"] = kvik::cli::add_serve(app);
  runs["bench"] = kvik::cli::add_bench(app);
  runs["quantize"] = kvik::cli::add_quantize(app);
  runs["bench-serve"] = kvik::cli::add_bench_serve(app);
  runs["perplexity"] = kvik::cli::add_perplexity(app);
  runs["eval"] = kvik::cli::add_eval(app);
  runs["lens"] = kvik::cli::add_lens(app);
  runs["direction"] = kvik::cli::add_direction(app);
  runs["trace"] = kvik::cli::add_trace(app);
  runs["bake-ablation"] = kvik::cli::add_bake_ablation(app);
  runs["merge-lora"] = kvik::cli::add_merge_lora(app);
  runs["synth-lora"] = kvik::cli::add_synth_lora(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    for (auto* sub : app.get_subcommands()) return runs.at(sub->get_name())();
  } catch (const std::exception& e) {
    // A rank of an mpirun job ends the whole job (the others may be waiting on it): no rank hangs.
    if (kvik::dist::launched_by_mpirun() && kvik::dist::world()->size() > 1)
      kvik::dist::world()->abort(std::string("error: ") + e.what());
    std::fprintf(stderr, "kvik: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
