#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "cli/commands.h"
#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace kvik::cli {

Run add_render_chat(CLI::App& app) {
  struct Opts {
    std::string model, messages;
    bool add_generation_prompt = false;
  };
  auto o = std::make_shared<Opts>();
  auto* c = app.add_subcommand("render-chat", "Print the prompt a chat template makes of messages (exactly, no newline added)");
  c->add_option("--model,-m", o->model, "GGUF file or Hugging Face directory (tokenizer_config.json chat_template)")
      ->required();
  c->add_option("--messages", o->messages,
                "JSON file: an array of messages, or an object {\"messages\": [...], \"tools\": [...], ...} whose "
                "other keys become template variables")
      ->required();
  c->add_flag("--add-generation-prompt", o->add_generation_prompt, "End with the assistant header");
  return [o]() {
    auto tok = load_tokenizer(o->model);
    if (tok->chat_template().empty()) fail("{}: the model has no chat template", o->model);
    std::ifstream in(o->messages, std::ios::binary);
    if (!in) fail("{}: cannot open", o->messages);
    nlohmann::ordered_json j;
    try {
      j = nlohmann::ordered_json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      fail("{}: invalid JSON: {}", o->messages, e.what());
    }
    nlohmann::ordered_json messages, extra = nlohmann::ordered_json::object();
    if (j.is_array()) {
      messages = j;
    } else if (j.is_object() && j.contains("messages")) {
      messages = j["messages"];
      for (auto it = j.begin(); it != j.end(); ++it)
        if (it.key() != "messages") extra[it.key()] = it.value();
    } else {
      fail("{}: expected an array of messages or an object with \"messages\"", o->messages);
    }
    extra["bos_token"] = tok->bos_token();
    extra["eos_token"] = tok->eos_token();
    extra["add_generation_prompt"] = o->add_generation_prompt;
    const std::string text = render_chat_template(tok->chat_template(), messages, extra);
    std::fwrite(text.data(), 1, text.size(), stdout);
    return 0;
  };
}

}  // namespace kvik::cli
