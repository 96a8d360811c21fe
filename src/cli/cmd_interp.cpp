// kvik lens / direction / trace: looking inside the model (docs/interpretability.md).
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/error.h"
#include "engine/single_sequence.h"
#include "interp/interp.h"
#include "tokenizer/tokenizer.h"

namespace kvik::cli {
namespace {

// A token as a table shows it: its text with control characters escaped, quoted so spaces are visible.
std::string shown(const Tokenizer& tok, int32_t id) {
  std::string s;
  for (char ch : tok.token_to_piece(id)) {
    if (ch == '\n')
      s += "\\n";
    else if (ch == '\t')
      s += "\\t";
    else if (static_cast<unsigned char>(ch) < 0x20)
      s += fmt::format("\\x{:02x}", static_cast<unsigned char>(ch));
    else
      s += ch;
  }
  return "'" + s + "'";
}

std::vector<std::vector<int32_t>> read_prompts(const Tokenizer& tok, const std::string& path) {
  std::ifstream in(path);
  if (!in) fail("{}: cannot open", path);
  std::vector<std::vector<int32_t>> out;
  std::string line;
  while (std::getline(in, line))
    if (line.find_first_not_of(" \t\r") != std::string::npos) out.push_back(tok.encode(line, tok.add_bos(), false));
  if (out.empty()) fail("{}: no prompts (one prompt a line)", path);
  return out;
}

nlohmann::json lens_json(const Tokenizer& tok, const interp::Lens& lens, const std::vector<int32_t>& ids,
                         int64_t first) {
  nlohmann::json layers = nlohmann::json::array();
  for (size_t l = 0; l < lens.cells.size(); ++l) {
    nlohmann::json positions = nlohmann::json::array();
    for (int64_t t = first; t < lens.T; ++t) {
      const interp::LensCell& c = lens.cells[l][t];
      nlohmann::json top = nlohmann::json::array();
      for (const auto& p : c.top) top.push_back({{"id", p.id}, {"token", tok.token_to_piece(p.id)}, {"prob", p.prob}});
      positions.push_back({{"position", t},
                           {"input_token", tok.token_to_piece(ids[t])},
                           {"top", top},
                           {"target", c.target},
                           {"target_token", tok.token_to_piece(c.target)},
                           {"target_rank", c.target_rank},
                           {"target_prob", c.target_prob}});
    }
    layers.push_back({{"layer", l}, {"positions", positions}});
  }
  return {{"token_ids", ids}, {"layers", layers}};
}

void print_lens(const Tokenizer& tok, const interp::Lens& lens, const std::vector<int32_t>& ids, int64_t first) {
  const bool color = isatty(fileno(stdout));
  const int64_t L = static_cast<int64_t>(lens.cells.size()) - 1;
  for (int64_t t = first; t < lens.T; ++t) {
    const int32_t target = lens.cells[0][t].target;
    std::printf("position %ld, input %s -> %s %s  (layer 0 = embedding, %ld = output)\n", static_cast<long>(t),
                shown(tok, ids[t]).c_str(), t + 1 < lens.T ? "next token" : "model predicts",
                shown(tok, target).c_str(), static_cast<long>(L));
    for (int64_t l = 0; l <= L; ++l) {
      const interp::LensCell& c = lens.cells[l][t];
      std::string row = fmt::format("  {:>3} | rank {:>5} p={:.3f} |", l, c.target_rank, c.target_prob);
      for (const auto& p : c.top) {
        const std::string cell = fmt::format(" {} {:.3f}", shown(tok, p.id), p.prob);
        row += p.id == target ? (color ? "\033[1;32m" + cell + "\033[0m" : " [" + cell.substr(1) + "]") : cell;
      }
      std::printf("%s\n", row.c_str());
    }
  }
}

}  // namespace

Run add_lens(CLI::App& app) {
  struct Opts {
    std::string model, prompt, positions = "last";
    int32_t top_k = 5;
    bool json = false;
  };
  auto o = std::make_shared<Opts>();
  auto* c = app.add_subcommand("lens", "Logit lens: what each layer would predict (LMHead(FinalNorm(x_l)))");
  c->add_option("--model,-m", o->model, "GGUF model file or Hugging Face directory")->required();
  c->add_option("--prompt,-p", o->prompt, "Prompt text")->required();
  c->add_option("--top-k", o->top_k, "Tokens shown per layer")->capture_default_str()->check(CLI::Range(1, 100));
  c->add_option("--positions", o->positions, "all | last")
      ->capture_default_str()
      ->check(CLI::IsMember({"all", "last"}));
  c->add_flag("--json", o->json, "Print JSON instead of the table");
  return [o]() {
    auto model = LlamaModel::load(o->model);
    auto tok = load_tokenizer(model->path());
    const std::vector<int32_t> ids = tok->encode(o->prompt, tok->add_bos(), false);
    if (ids.empty()) fail("--prompt encodes to no tokens");
    if (static_cast<int64_t>(ids.size()) > model->config().context_length)
      fail("--prompt is {} tokens, longer than the model's context ({})", ids.size(), model->config().context_length);
    const interp::StreamCapture s = interp::capture_stream(*model, ids);
    const interp::Lens lens = interp::logit_lens(*model, s, ids, o->top_k);
    const int64_t first = o->positions == "all" ? 0 : lens.T - 1;
    if (o->json)
      std::printf(
          "%s\n",
          lens_json(*tok, lens, ids, first).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    else
      print_lens(*tok, lens, ids, first);
    return 0;
  };
}

Run add_direction(CLI::App& app) {
  struct Opts {
    std::string model, positive, negative, position = "last", out;
    int32_t layer = 0;
  };
  auto o = std::make_shared<Opts>();
  auto* c = app.add_subcommand("direction", "A concept direction: mean stream difference of two prompt groups");
  c->add_option("--model,-m", o->model, "GGUF model file or Hugging Face directory")->required();
  c->add_option("--positive", o->positive, "Prompts with the concept, one a line")->required();
  c->add_option("--negative", o->negative, "Prompts without it, one a line")->required();
  c->add_option("--layer", o->layer, "Stream layer (0 = after the embedding, L = the output)")->required();
  c->add_option("--position", o->position, "last | mean (pool each prompt's last position or all)")
      ->capture_default_str()
      ->check(CLI::IsMember({"last", "mean"}));
  c->add_option("--out,-o", o->out, "Direction JSON to write")->required();
  return [o]() {
    auto model = LlamaModel::load(o->model);
    auto tok = load_tokenizer(model->path());
    const auto pos = read_prompts(*tok, o->positive), neg = read_prompts(*tok, o->negative);
    for (const auto* group : {&pos, &neg})
      for (const auto& p : *group)
        if (static_cast<int64_t>(p.size()) > model->config().context_length)
          fail("a prompt of {} tokens is longer than the model's context ({})", p.size(),
               model->config().context_length);
    const auto r = interp::find_direction(*model, pos, neg, o->layer,
                                          o->position == "last" ? interp::Pooling::kLast : interp::Pooling::kMean);
    interp::save_direction(r, model->config().dim, o->out);
    std::printf("direction at layer %d: |mean(+) - mean(-)| = %.4f, %zu positive / %zu negative prompts -> %s\n",
                o->layer, r.direction.norm, pos.size(), neg.size(), o->out.c_str());
    std::printf("layer | x.r (+) mean +- std | x.r (-) mean +- std | separation (gap / pooled std)\n");
    for (size_t l = 0; l < r.separation.size(); ++l) {
      const auto& s = r.separation[l];
      const double pooled = std::sqrt((s.pos_std * s.pos_std + s.neg_std * s.neg_std) / 2);
      std::printf("%5zu | %9.4f +- %7.4f | %9.4f +- %7.4f | %s\n", l, s.pos_mean, s.pos_std, s.neg_mean, s.neg_std,
                  pooled > 0 ? fmt::format("{:.2f}", (s.pos_mean - s.neg_mean) / pooled).c_str() : "-");
    }
    return 0;
  };
}

}  // namespace kvik::cli
