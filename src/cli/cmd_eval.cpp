// kvik eval quant-error: the quantization-error table (fake-quantized weights: RMSE, perplexity, top-1
// agreement with the original) and its outlier report, on the user's model and text.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/error.h"
#include "core/log.h"
#include "engine/engine_core.h"
#include "eval/quant_error.h"
#include "tokenizer/tokenizer.h"

namespace kvik::cli {
namespace {

nlohmann::json to_json(const QuantErrorReport& r) {
  nlohmann::json rows = nlohmann::json::array(), layers = nlohmann::json::array();
  for (const QuantErrorRow& q : r.rows)
    rows.push_back({{"scheme", q.scheme},
                    {"description", q.description},
                    {"bits_per_weight", q.bits_per_weight},
                    {"weight_rmse", q.weight_rmse},
                    {"ppl", q.ppl},
                    {"top1_agreement", q.top1_agreement},
                    {"matrices", q.matrices},
                    {"skipped_matrices", q.skipped_matrices}});
  for (const LayerOutliers& l : r.outliers) {
    nlohmann::json dims = nlohmann::json::array();
    for (const auto& [dim, ratio] : l.dims) dims.push_back({{"dim", dim}, {"max_over_rms", ratio}});
    layers.push_back({{"layer", l.layer}, {"rms", l.rms}, {"outlier_dims", dims}});
  }
  return {{"base_ppl", r.base_ppl},
          {"schemes", rows},
          {"outliers", {{"threshold_x_rms", r.outlier_threshold}, {"layers", layers}}}};
}

void print_table(const QuantErrorReport& r) {
  std::printf("%-16s %6s %11s %10s %8s %7s  %s\n", "scheme", "bits/w", "weight RMSE", "PPL", "dPPL", "top-1", "");
  std::printf("%-16s %6s %11s %10.4f %8s %7s\n", "original", "", "", r.base_ppl, "", "");
  for (const QuantErrorRow& q : r.rows) {
    if (q.skipped_matrices == q.matrices) {
      std::printf("%-16s %6.2f  n/a: no layer matrix has rows that are a multiple of its block\n", q.scheme.c_str(),
                  q.bits_per_weight);
      continue;
    }
    std::printf(
        "%-16s %6.2f %11.3e %10.4f %+7.2f%% %6.2f%%  %s\n", q.scheme.c_str(), q.bits_per_weight, q.weight_rmse, q.ppl,
        100 * (q.ppl / r.base_ppl - 1), 100 * q.top1_agreement,
        q.skipped_matrices
            ? fmt::format("({} of {} matrices kept unquantized: row length)", q.skipped_matrices, q.matrices).c_str()
            : "");
  }
  std::printf("\noutliers: residual-stream dimensions with |x| > %.0f x the layer's RMS (after each block)\n",
              r.outlier_threshold);
  for (const LayerOutliers& l : r.outliers) {
    std::string dims;
    for (size_t i = 0; i < l.dims.size() && i < 8; ++i)
      dims += fmt::format("{}{} ({:.1f}x)", i ? ", " : "", l.dims[i].first, l.dims[i].second);
    if (l.dims.size() > 8) dims += fmt::format(", ... {} more", l.dims.size() - 8);
    std::printf("  layer %3lld  rms %8.4f  %3zu dims%s%s\n", (long long)l.layer, l.rms, l.dims.size(),
                l.dims.empty() ? "" : ": ", dims.c_str());
  }
}

}  // namespace

Run add_eval(CLI::App& app) {
  struct Opts {
    std::string model, file, kv = "auto";
    std::vector<std::string> schemes;
    int threads = 0;
    bool json = false;
    PerplexityOptions ppl;
  };
  auto o = std::make_shared<Opts>();
  auto* e = app.add_subcommand("eval", "Evaluations of a model on a text (see: kvik eval quant-error --help)");
  e->require_subcommand(1);
  auto* c = e->add_subcommand("quant-error",
                              "Quantization error per scheme: weight RMSE, perplexity and top-1 agreement, "
                              "and the outlier dimensions");
  c->add_option("--model,-m", o->model, "GGUF model file or Hugging Face directory")->required();
  c->add_option("--file,-f", o->file, "Text file to score")->required();
  c->add_option("--schemes", o->schemes, "Only these schemes (names as the table prints them)")->delimiter(',');
  add_perplexity_flags(c, o->ppl, o->kv, o->threads);
  c->add_flag("--json", o->json, "Print one JSON object");
  return [o]() {
    const EngineConfig load_cfg = resolve_perplexity_flags(o->ppl, o->kv, o->threads);
    for (const std::string& s : o->schemes) {
      bool known = false;
      for (const FakeQuantScheme& f : fake_quant_schemes()) known |= f.name == s;
      if (!known) fail("--schemes: unknown scheme '{}'", s);
    }
    auto tok = load_tokenizer(o->model);
    const PerplexityWindows w = make_windows(*tok, read_text_file(o->file), o->ppl.ctx, o->ppl.chunks);
    log_info("quant-error: {} windows of {} tokens", w.chunks, w.ctx);
    const std::string path = o->model;
    const QuantErrorReport r =
        quant_error([&path, &load_cfg] { return load_model(path, load_cfg); }, w, o->ppl, o->schemes);
    if (o->json)
      std::printf("%s\n", to_json(r).dump().c_str());
    else
      print_table(r);
    return 0;
  };
}

}  // namespace kvik::cli
