#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace kvik::cli {

Run add_tokenize(CLI::App& app) {
  struct Opts {
    std::string model, text, file;
    bool json = false, special = false;
  };
  auto o = std::make_shared<Opts>();
  auto* c = app.add_subcommand("tokenize", "Print the token ids a completion prompt feeds the model");
  c->add_option("--model,-m", o->model, "GGUF model file, or a directory with tokenizer.json")->required();
  auto* text = c->add_option("--text", o->text, "Text to tokenize");
  c->add_option("--file", o->file,
                "Tokenize every line of this file and print lines, tokens and tokens/s (a tokenizer speed bench)")
      ->excludes(text);
  c->add_flag("--parse-special", o->special, "Turn special-token texts such as <s> into their ids");
  c->add_flag("--json", o->json, "Print {\"ids\":[...]}");
  return [o]() {
    auto tok = load_tokenizer(o->model);
    if (!o->file.empty()) {
      std::ifstream in(o->file, std::ios::binary);
      if (!in) fail("{}: cannot open", o->file);
      std::vector<std::string> lines;
      for (std::string l; std::getline(in, l);) lines.push_back(std::move(l));
      const auto t0 = std::chrono::steady_clock::now();
      size_t n = 0;
      for (const std::string& l : lines) n += tok->encode(l, false, o->special).size();
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::printf("{\"lines\": %zu, \"tokens\": %zu, \"seconds\": %.3f, \"tokens_per_s\": %.0f}\n", lines.size(), n, s,
                  n / std::max(s, 1e-9));
      return 0;
    }
    const auto ids = tok->encode(o->text, tok->add_bos(), o->special);
    if (o->json) {
      std::printf("%s\n", nlohmann::json({{"ids", ids}}).dump().c_str());
    } else {
      for (int32_t id : ids) {
        nlohmann::json piece = tok->token_text(id);
        std::printf("%6d  %s\n", id, piece.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
      }
    }
    return 0;
  };
}

Run add_detokenize(CLI::App& app) {
  struct Opts {
    std::string model;
    std::vector<int32_t> ids;
  };
  auto o = std::make_shared<Opts>();
  auto* c = app.add_subcommand("detokenize", "Print the text of token ids");
  c->add_option("--model,-m", o->model, "GGUF model file, or a directory with tokenizer.json")->required();
  c->add_option("--ids", o->ids, "Comma-separated token ids, e.g. 1,2,3")->required()->delimiter(',');
  return [o]() {
    auto tok = load_tokenizer(o->model);
    for (int32_t id : o->ids)
      if (id < 0 || id >= tok->vocab_size())
        fail("token id {} is outside the vocabulary (0..{})", id, tok->vocab_size() - 1);
    const std::string text = tok->decode(o->ids, true);
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::printf("\n");
    return 0;
  };
}

}  // namespace kvik::cli
