// kvik bake-ablation (a direction removed from the weights, written as GGUF) and kvik trace (one forward step as
// a table of shapes with this model's numbers).
#include <cmath>
#include <cstdio>

#include "cli/commands.h"
#include "core/error.h"
#include "engine/step_trace.h"
#include "interp/bake.h"
#include "interp/interp.h"
#include "tokenizer/tokenizer.h"

namespace kvik::cli {
namespace {

std::string dims(const std::vector<int64_t>& d) {
  std::string s = "[";
  for (int64_t v : d) s += (s.size() > 1 ? ", " : "") + std::to_string(v);
  return s + "]";
}

std::string list(const std::vector<int64_t>& v, size_t max = 12) {
  std::string s = "[";
  for (size_t i = 0; i < v.size() && i < max; ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + (v.size() > max ? ", ...]" : "]");
}

void trace_row(const std::string& code, const std::string& shape, const std::string& numbers, const std::string& note) {
  std::string line = fmt::format("  {:<38} {:<18} {:<22} {}", code, shape, numbers, note);
  line.erase(line.find_last_not_of(' ') + 1);
  std::printf("%s\n", line.c_str());
}

// The table of shapes: the rows inside the layer loop indented under `for l in range(L)`.
void print_trace(const StepTrace& t, int64_t n_layers) {
  bool in_loop = false;
  for (const StepTraceRow& r : t.rows) {
    if (r.per_layer && !in_loop) std::printf("  for l in range(%ld):\n", static_cast<long>(n_layers));
    if (!r.per_layer && in_loop) {
      std::string per_layer;
      for (size_t l = 1; l < t.stream_rms.size(); ++l)
        per_layer += fmt::format("{}{:.3f}", l > 1 ? " " : "", t.stream_rms[l]);
      std::printf("  stream rms after each layer: %s\n", per_layer.c_str());
    }
    in_loop = r.per_layer;
    std::string numbers = r.dims.empty() ? "" : dims(r.dims);
    if (r.code == "slot_mapping") numbers = list(t.slot_mapping);
    if (r.code.rfind("gate, up", 0) == 0) numbers += " x 2";
    trace_row((r.per_layer ? "  " : "") + r.code, r.shape, numbers, r.note);
  }
}

}  // namespace

Run add_trace(CLI::App& app) {
  struct Opts {
    std::string model, prompt;
    bool decode = false;
  };
  auto o = std::make_shared<Opts>();
  auto* c = app.add_subcommand("trace", "One forward step as a shape trace (prefill, or --decode one token)");
  c->add_option("--model,-m", o->model, "GGUF model file or Hugging Face directory")->required();
  c->add_option("--prompt,-p", o->prompt, "Prompt text")->required();
  c->add_flag("--decode", o->decode, "Trace the decode step of the prompt's last token on a cache of the rest");
  return [o]() {
    auto model = LlamaModel::load(o->model);
    auto tok = load_tokenizer(model->path());
    const ModelConfig& cfg = model->config();
    const std::vector<int32_t> ids = tok->encode(o->prompt, tok->add_bos(), false);
    const StepTrace t = trace_step(*model, ids, o->decode);
    std::printf(
        "%s step of %s: T = %ld, ctx = %ld, d = %ld, n_h = %ld, n_kv = %ld, d_h = %ld, d_ff = %ld, V = %ld, "
        "L = %ld\n",
        o->decode ? "decode" : "prefill", interp::model_id(*model).c_str(), static_cast<long>(t.T),
        static_cast<long>(t.ctx), static_cast<long>(cfg.dim), static_cast<long>(cfg.n_heads),
        static_cast<long>(cfg.n_kv_heads), static_cast<long>(cfg.head_dim), static_cast<long>(cfg.ff_dim),
        static_cast<long>(cfg.vocab_size), static_cast<long>(cfg.n_layers));
    print_trace(t, cfg.n_layers);
    std::printf("  next token: %d '%s' (p = %.3f)\n", t.next_token, tok->token_to_piece(t.next_token).c_str(),
                t.next_prob);
    return 0;
  };
}

Run add_bake_ablation(CLI::App& app) {
  struct Opts {
    std::string model, direction, layers, out, type;
  };
  auto o = std::make_shared<Opts>();
  auto* c = app.add_subcommand("bake-ablation", "Remove a direction from the weights that write the residual stream");
  c->add_option("--model,-m", o->model, "GGUF model file")->required();
  c->add_option("--direction", o->direction, "Direction JSON (kvik direction)")->required();
  c->add_option("--layers", o->layers,
                "Stream layers, e.g. 0-8 (0 = embedding rows, l = block l-1's o_proj and "
                "down; default: all)");
  c->add_option("--type", o->type, "Type of the rewritten matrices (default: each one's own type)");
  c->add_option("--out,-o", o->out, "GGUF file to write")->required();
  return [o]() {
    interp::BakeOptions opt;
    opt.model_path = o->model;
    opt.out_path = o->out;
    opt.direction = load_direction(o->direction);
    if (!o->layers.empty()) opt.layers = parse_layer_list(o->layers, "--layers");
    if (!o->type.empty()) {
      opt.type = dtype_from_name(o->type);
      if (!opt.type) fail("--type '{}' is not a GGUF type name (f32, f16, q8_0, q4_K, ...)", o->type);
    }
    const interp::BakeReport r = interp::bake_ablation(opt);
    std::printf("wrote %s: %d matrices orthogonalized to the direction (max |dW| %.4g)%s\n", o->out.c_str(),
                r.tensors_rewritten, r.max_abs_change,
                r.untied_output ? "; the tied LM head kept as output.weight" : "");
    return 0;
  };
}

}  // namespace kvik::cli
