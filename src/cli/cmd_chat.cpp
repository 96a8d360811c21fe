// kvik chat: an interactive conversation on stdin/stdout through the model's chat template. Each input line
// is a user turn; the whole conversation is rendered and prefilled again each turn (simple, and exact).
#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "cli/commands.h"
#include "core/error.h"
#include "engine/engine_core.h"
#include "engine/single_sequence.h"
#include "model/llama.h"
#include "tokenizer/streaming_detokenizer.h"
#include "tokenizer/tokenizer.h"

namespace kvik::cli {

Run add_chat(CLI::App& app) {
  struct Opts {
    std::string model, system;
    int max_tokens = 256;
    int threads = 0;
  };
  auto o = std::make_shared<Opts>();
  auto* c = app.add_subcommand("chat", "Chat on stdin/stdout with the model's chat template (greedy decoding)");
  c->add_option("--model,-m", o->model, "GGUF file or Hugging Face directory")->required();
  c->add_option("--system", o->system, "System message");
  c->add_option("--max-tokens", o->max_tokens, "Tokens per reply")->capture_default_str();
  c->add_option("--threads", o->threads, "Threads (0 = all cores)")->capture_default_str();
  return [o]() {
    EngineConfig cfg;
    cfg.num_threads = o->threads;
    auto model = load_model(o->model, cfg);
    auto tok = load_tokenizer(o->model);
    if (tok->chat_template().empty()) fail("{}: the model has no chat template", o->model);
    const int64_t max_len = std::min<int64_t>(model->config().context_length, 8192);
    SingleSequence seq(*model, max_len);
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    if (!o->system.empty()) messages.push_back({{"role", "system"}, {"content", o->system}});
    const nlohmann::ordered_json extra = {
        {"bos_token", tok->bos_token()}, {"eos_token", tok->eos_token()}, {"add_generation_prompt", true}};
    for (std::string line; std::getline(std::cin, line);) {
      if (line.empty()) continue;
      messages.push_back({{"role", "user"}, {"content", line}});
      const std::string prompt = render_chat_template(tok->chat_template(), messages, extra);
      // The template writes BOS itself; special-token texts in it become their ids.
      const std::vector<int32_t> ids = tok->encode(prompt, false, true);
      if (static_cast<int64_t>(ids.size()) + o->max_tokens > max_len)
        fail("the conversation ({} tokens) no longer fits the context of {}", ids.size(), max_len);
      seq.reset();
      std::vector<float> logits = seq.append(ids);
      StreamingDetokenizer detok(*tok, ids);
      std::string reply;
      for (int n = 0; n < o->max_tokens; ++n) {
        const int32_t next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
        if (tok->is_eog(next)) break;
        const std::string piece = detok.push(next);
        reply += piece;
        std::fwrite(piece.data(), 1, piece.size(), stdout);
        std::fflush(stdout);
        logits = seq.append(std::span<const int32_t>(&next, 1));
      }
      const std::string rest = detok.flush();
      reply += rest;
      std::fwrite(rest.data(), 1, rest.size(), stdout);
      std::printf("\n");
      std::fflush(stdout);
      messages.push_back({{"role", "assistant"}, {"content", reply}});
    }
    return 0;
  };
}

}  // namespace kvik::cli
