// kvik bake-ablation (a direction removed from the weights, written as GGUF) and kvik trace (one forward step as
// the course's shape table, "Spåra tensorerna", with this model's numbers).
#include <cmath>
#include <cstdio>

#include "cli/commands.h"
#include "core/error.h"
#include "engine/single_sequence.h"
#include "interp/bake.h"
#include "interp/interp.h"
#include "tokenizer/tokenizer.h"

namespace kvik::cli {
namespace {

std::string dims(std::initializer_list<int64_t> d) {
  std::string s = "[";
  for (int64_t v : d) s += (s.size() > 1 ? ", " : "") + std::to_string(v);
  return s + "]";
}

std::string list(const std::vector<int64_t>& v, size_t max = 12) {
  std::string s = "[";
  for (size_t i = 0; i < v.size() && i < max; ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + (v.size() > max ? ", ...]" : "]");
}

void trace_row(const char* code, const char* shape, const std::string& numbers, const std::string& note = "") {
  std::string line = fmt::format("  {:<38} {:<18} {:<22} {}", code, shape, numbers, note);
  line.erase(line.find_last_not_of(' ') + 1);
  std::printf("%s\n", line.c_str());
}

// The table of one step of T new tokens on a context of `ctx` tokens (the cache after this step).
void print_trace(const ModelConfig& c, int64_t T, int64_t ctx, const std::vector<int64_t>& slots,
                 const std::vector<double>& rms) {
  const int64_t nh = c.n_heads, nkv = c.n_kv_heads, dh = c.head_dim, d = c.dim;
  trace_row("ids", "[T]", dims({T}), "token ids of this step");
  trace_row("x = E[ids]", "[T, d]", dims({T, d}), fmt::format("|x| rms {:.4f}", rms[0]));
  std::printf("  for l in range(%ld):\n", static_cast<long>(c.n_layers));
  trace_row("  h = rmsnorm(x, g1[l])", "[T, d]", dims({T, d}));
  trace_row("  q = h @ W_q[l] -> heads", "[n_h, T, d_h]", dims({nh, T, dh}));
  trace_row("  k = h @ W_k[l] -> heads", "[n_kv, T, d_h]", dims({nkv, T, dh}));
  trace_row("  v = h @ W_v[l] -> heads", "[n_kv, T, d_h]", dims({nkv, T, dh}));
  trace_row("  q, k = rope(q, pos), rope(k, pos)", "", "", fmt::format("rope dims {} of {}", c.rope_dim, dh));
  trace_row("  K, V = cache[l].append(k, v)", "[n_kv, ctx, d_h]", dims({nkv, ctx, dh}),
            fmt::format("ctx = {} old + {} new", ctx - T, T));
  trace_row("  S = q @ K^T / sqrt(d_h) + mask", "[n_h, T, ctx]", dims({nh, T, ctx}),
            fmt::format("each KV head serves {} query heads", nh / nkv));
  trace_row("  P = softmax(S)", "[n_h, T, ctx]", dims({nh, T, ctx}));
  trace_row("  o = (P @ V) -> [T, n_h*d_h]", "[T, n_h*d_h]", dims({T, nh * dh}));
  trace_row("  x = x + o @ W_o[l]", "[T, d]", dims({T, d}));
  trace_row("  h = rmsnorm(x, g2[l])", "[T, d]", dims({T, d}));
  trace_row("  gate, up = h @ W_gate[l], W_up[l]", "[T, d_ff] x 2", dims({T, c.ff_dim}) + " x 2");
  trace_row("  x = x + (silu(gate)*up) @ W_down[l]", "[T, d]", dims({T, d}));
  std::string per_layer;
  for (size_t l = 1; l < rms.size(); ++l) per_layer += fmt::format("{}{:.3f}", l > 1 ? " " : "", rms[l]);
  std::printf("  stream rms after each layer: %s\n", per_layer.c_str());
  trace_row("h = rmsnorm(x[-1], g_final)", "[d]", dims({d}), "only the last position samples");
  trace_row("logits = h @ W_U", "[V]", dims({c.vocab_size}), c.tied_embeddings ? "W_U = E (tied)" : "");
  trace_row("slot_mapping", "[T]", list(slots), "cache slot of each new token's K/V");
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
    if (ids.empty() || (o->decode && ids.size() < 2)) fail("--prompt needs {} token(s)", o->decode ? 2 : 1);
    if (static_cast<int64_t>(ids.size()) > cfg.context_length)
      fail("--prompt is {} tokens, longer than the model's context ({})", ids.size(), cfg.context_length);
    const int64_t n_ctx = static_cast<int64_t>(ids.size());
    SingleSequence seq(*model, n_ctx);
    const std::span<const int32_t> all(ids);
    if (o->decode) seq.append(all.first(ids.size() - 1));
    const std::span<const int32_t> step = o->decode ? all.last(1) : all;
    const int64_t T = static_cast<int64_t>(step.size());
    std::vector<double> rms(static_cast<size_t>(cfg.n_layers + 1));
    seq.set_observer([&](int32_t layer, const float* x, int64_t n) {
      double ss = 0;
      for (int64_t i = (n - 1) * cfg.dim; i < n * cfg.dim; ++i) ss += static_cast<double>(x[i]) * x[i];
      rms[layer] = std::sqrt(ss / cfg.dim);
    });
    const std::vector<float> logits = seq.append(step);
    std::vector<int64_t> slots;
    for (int64_t t = n_ctx - T; t < n_ctx; ++t) slots.push_back(t);  // contiguous blocks: slot = position
    std::printf(
        "%s step of %s: T = %ld, ctx = %ld, d = %ld, n_h = %ld, n_kv = %ld, d_h = %ld, d_ff = %ld, V = %ld, "
        "L = %ld\n",
        o->decode ? "decode" : "prefill", interp::model_id(*model).c_str(), static_cast<long>(T),
        static_cast<long>(n_ctx), static_cast<long>(cfg.dim), static_cast<long>(cfg.n_heads),
        static_cast<long>(cfg.n_kv_heads), static_cast<long>(cfg.head_dim), static_cast<long>(cfg.ff_dim),
        static_cast<long>(cfg.vocab_size), static_cast<long>(cfg.n_layers));
    print_trace(cfg, T, n_ctx, slots, rms);
    const auto top = interp::top_k(interp::softmax(logits.data(), cfg.vocab_size), 1)[0];
    std::printf("  next token: %d '%s' (p = %.3f)\n", top.id, tok->token_to_piece(top.id).c_str(), top.prob);
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
