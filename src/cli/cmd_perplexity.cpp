// kvik perplexity: llama-perplexity's number on the user's model and text, and with --reference the agreement
// figures of llama-perplexity --kl-divergence against a second model (the unquantized original).
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "core/error.h"
#include "core/log.h"
#include "core/thread_pool.h"
#include "engine/engine_core.h"
#include "eval/perplexity.h"
#include "tokenizer/tokenizer.h"

namespace kvik::cli {

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open the text file", path);
  std::ostringstream s;
  s << in.rdbuf();
  if (s.str().empty()) fail("{}: the text file is empty", path);
  return s.str();
}

void add_perplexity_flags(CLI::App* c, PerplexityOptions& o, std::string& kv, int& threads) {
  c->add_option("--ctx,-c", o.ctx, "Tokens per window (only the second half of each is scored)")->capture_default_str();
  c->add_option("--chunks", o.chunks, "Windows to score (default: all that fit the text)");
  c->add_option("--batch-size,-b", o.batch_tokens, "Tokens per forward pass (batch-size / ctx windows at once)")
      ->capture_default_str();
  c->add_option("--kv-cache-dtype", kv, "KV cache element type")->capture_default_str();
  c->add_option("--threads,-t", threads, "Compute threads (default: all cores)");
}

EngineConfig resolve_perplexity_flags(PerplexityOptions& o, const std::string& kv, int threads) {
  if (o.batch_tokens < 1) fail("--batch-size must be positive");
  o.kv_dtype = parse_kv_dtype(kv);
  EngineConfig load_cfg;
  load_cfg.num_threads = threads;
  return load_cfg;
}

Run add_perplexity(CLI::App& app) {
  struct Opts {
    std::string model, file, reference, kv = "auto";
    int threads = 0;
    bool json = false;
    PerplexityOptions ppl;
  };
  auto o = std::make_shared<Opts>();
  auto* c = app.add_subcommand("perplexity", "Perplexity of a model on a text, as llama-perplexity computes it");
  c->add_option("--model,-m", o->model, "GGUF model file or Hugging Face directory")->required();
  c->add_option("--file,-f", o->file, "Text file to score")->required();
  c->add_option("--reference", o->reference,
                "Base model (e.g. the F16 original): adds mean KL divergence, top-1 agreement and RMS of Δp");
  add_perplexity_flags(c, o->ppl, o->kv, o->threads);
  c->add_flag("--json", o->json, "Print one JSON object");
  return [o]() {
    const EngineConfig load_cfg = resolve_perplexity_flags(o->ppl, o->kv, o->threads);
    auto model = load_model(o->model, load_cfg);
    auto tok = load_tokenizer(model->path());
    std::unique_ptr<LlamaModel> ref;
    if (!o->reference.empty()) ref = load_model(o->reference, load_cfg);
    const PerplexityWindows w = make_windows(*tok, read_text_file(o->file), o->ppl.ctx, o->ppl.chunks);
    if (o->ppl.ctx > model->config().context_length)
      log_warn("--ctx {} is longer than the model's training context {}", o->ppl.ctx, model->config().context_length);
    log_info("perplexity: {} tokens, {} windows of {} ({} scored each), {} windows per pass, {} threads",
             w.tokens.size(), w.chunks, w.ctx, w.scored(), windows_per_pass(o->ppl),
             ThreadPool::global().num_threads());
    const PerplexityResult r = perplexity(*model, w, o->ppl, ref.get());
    const double tok_s = r.evaluated_tokens * (ref ? 2 : 1) / std::max(r.seconds, 1e-9);
    if (o->json) {
      nlohmann::json j = {{"ppl", r.ppl}, {"ppl_stderr", r.ppl_stderr}, {"tokens", r.tokens}, {"chunks", r.chunks}};
      if (ref)
        j.update({{"kld_mean", *r.kld_mean}, {"top1_agreement", *r.top1_agreement}, {"delta_p_rms", *r.delta_p_rms}});
      std::printf("%s\n", j.dump().c_str());
      return 0;
    }
    std::printf("PPL = %.4f +/- %.5f  (%lld scored tokens in %d windows of %d)\n", r.ppl, r.ppl_stderr,
                (long long)r.tokens, r.chunks, w.ctx);
    if (ref) {
      std::printf("mean KL divergence vs %s: %.6f\n", o->reference.c_str(), *r.kld_mean);
      std::printf("same top token: %.3f %%\n", 100 * *r.top1_agreement);
      std::printf("RMS of delta p: %.3f %%\n", 100 * *r.delta_p_rms);
    }
    std::printf("%.2f s, %.0f tokens/s through the model%s\n", r.seconds, tok_s, ref ? "s (both)" : "");
    return 0;
  };
}

}  // namespace kvik::cli
