// kvik render-chat: prints the prompt the model's chat format makes of messages, exactly as the server and
// `kvik chat` render it (chat/render_chat).
#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/log.h"
#include "server/chat_prompt.h"
#include "tokenizer/tokenizer.h"

namespace kvik::cli {

namespace {

// The --messages file: an array of messages, or {"messages": [...], other template variables...}.
void read_messages(const std::string& path, nlohmann::ordered_json& messages, nlohmann::ordered_json& extra) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open", path);
  nlohmann::ordered_json j;
  try {
    j = nlohmann::ordered_json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: invalid JSON: {}", path, e.what());
  }
  extra = nlohmann::ordered_json::object();
  if (j.is_array()) {
    messages = std::move(j);
  } else if (j.is_object() && j.contains("messages")) {
    messages = j["messages"];
    for (auto it = j.begin(); it != j.end(); ++it)
      if (it.key() != "messages") extra[it.key()] = it.value();
  } else {
    fail("{}: expected an array of messages or an object with \"messages\"", path);
  }
}

}  // namespace

Run add_render_chat(CLI::App& app) {
  struct Opts {
    std::string model, messages;
    bool add_generation_prompt = false;
  };
  auto o = std::make_shared<Opts>();
  auto* c = app.add_subcommand("render-chat",
                               "Print the prompt a chat template makes of messages (exactly, no newline added)");
  c->add_option("--model,-m", o->model, "GGUF file or Hugging Face directory (tokenizer_config.json chat_template)")
      ->required();
  c->add_option("--messages", o->messages,
                "JSON file: an array of messages, or an object {\"messages\": [...], \"tools\": [...], ...} whose "
                "other keys become template variables")
      ->required();
  c->add_flag("--add-generation-prompt", o->add_generation_prompt, "End with the assistant header");
  return [o]() {
    auto tok = load_tokenizer(o->model);
    if (tok->chat_template().empty())
      log_warn("{}: the model has no chat template; printing the plain \"role: content\" fallback", o->model);
    nlohmann::ordered_json messages, extra;
    read_messages(o->messages, messages, extra);
    const ChatPrompt p = render_chat(server::chat_format(*tok), messages, o->add_generation_prompt, extra);
    std::fwrite(p.text.data(), 1, p.text.size(), stdout);
    return 0;
  };
}

}  // namespace kvik::cli
