// kvik chat: an interactive conversation on stdin/stdout in the model's chat format, through the engine. Each
// input line is a user turn; the prefix cache keeps the earlier turns' KV, so a turn prefills only what is new
// (server/chat_session.h).
#include <cstdio>
#include <iostream>

#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "core/error.h"
#include "core/log.h"
#include "engine/engine_core.h"
#include "engine/parallel_engine.h"
#include "model/llama.h"
#include "server/chat_session.h"
#include "tokenizer/tokenizer.h"

namespace kvik::cli {

namespace {

void print(std::string_view s) {
  std::fwrite(s.data(), 1, s.size(), stdout);
  std::fflush(stdout);
}

}  // namespace

Run add_chat(CLI::App& app) {
  struct Opts {
    std::string model, system;
    SamplingParams params;
    EngineFlags engine;
  };
  auto o = std::make_shared<Opts>();
  o->params.temperature = 0;
  o->params.max_tokens = 256;
  auto* c = app.add_subcommand("chat", "Chat on stdin/stdout in the model's chat format (greedy unless --temperature)");
  c->add_option("--model,-m", o->model, "GGUF file or Hugging Face directory")->required();
  c->add_option("--system", o->system, "System message");
  c->add_option("--max-tokens", o->params.max_tokens, "Tokens per reply")->capture_default_str();
  c->add_option("--temperature", o->params.temperature, "0 = greedy")->capture_default_str();
  c->add_option("--seed", o->params.seed, "Random seed (default: random)");
  add_engine_flags(c, o->engine);
  return [o]() {
    EngineConfig cfg = o->engine.resolve();
    if (auto rc = run_parallel_worker(o->model, cfg)) return *rc;  // ranks > 0 of mpirun
    auto model = load_model(o->model, cfg);
    auto tok = load_tokenizer(o->model);
    if (tok->chat_template().empty())
      log_warn("{}: the model has no chat template; using the plain \"role: content\" format", o->model);
    if (cfg.max_model_len == 0) cfg.max_model_len = std::min<int64_t>(model->config().context_length, 8192);
    EngineCore engine(*model, cfg, tok->end_of_generation_ids());
    server::ChatSession session(engine, *tok, o->system, o->params);
    for (std::string line; std::getline(std::cin, line);) {
      if (line.empty()) continue;
      session.send(line, print);
      print("\n");
    }
    return 0;
  };
}

}  // namespace kvik::cli
