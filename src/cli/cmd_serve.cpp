// kvik serve: the OpenAI-compatible HTTP server. The listener starts first (answering 503 while the model
// loads), then the model, tokenizer, engine and engine thread come up. SIGINT/SIGTERM drain the server (503 to
// new requests while the in-flight ones finish, aborted after a grace period), then close it and exit 0.
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "cli/commands.h"
#include "cli/default_model.h"
#include "cli/engine_flags.h"
#include "cli/serve_data_parallel.h"
#include "core/error.h"
#include "core/log.h"
#include "engine/async_engine.h"
#include "engine/engine_core.h"
#include "engine/parallel_engine.h"
#include "engine/structured/vocab_trie.h"
#include "model/llama.h"
#include "server/generation_config.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "tokenizer/tokenizer.h"

namespace kvik::cli {

namespace {

// The front end's flags (connections, timeouts, TLS, CORS, logging), spelled as vLLM / llama-server spell them.
void add_http_flags(CLI::App* c, server::ServerConfig& s) {
  c->add_option("--max-connections", s.max_connections, "Open connections served at once; beyond, 503 + Retry-After")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  c->add_option("--http-threads", s.num_http_threads, "I/O threads of the HTTP front end (any number of clients)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  c->add_option("--timeout-keep-alive", s.keep_alive_timeout_s, "Seconds an idle keep-alive connection stays open")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  c->add_option("--header-timeout", s.header_timeout_s, "Seconds to receive a request's headers (408 beyond)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  c->add_option("--body-timeout", s.body_timeout_s, "Seconds to receive a request's body once its headers are in (408)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  c->add_option("--write-timeout", s.write_timeout_s, "Seconds one write to a client may take before it is dropped")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  c->add_option("--max-request-bytes", s.max_body_bytes, "Largest request body (413 beyond)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  c->add_option("--max-stream-buffer", s.max_stream_buffer,
                "Bytes of output queued for a client that does not read before its request is aborted")
      ->check(CLI::Range(size_t{1024}, size_t{1} << 30))
      ->capture_default_str();
  c->add_option("--allowed-origins", s.allowed_origins,
                "CORS: origins browsers may call from ('*' = any; '' = no CORS headers)")
      ->delimiter(',')
      ->capture_default_str();
  c->add_option("--ssl-keyfile", s.ssl_keyfile, "PEM private key: serve HTTPS (with --ssl-certfile)")
      ->check(CLI::ExistingFile);
  c->add_option("--ssl-certfile", s.ssl_certfile, "PEM certificate chain: serve HTTPS (with --ssl-keyfile)")
      ->check(CLI::ExistingFile);
  c->add_option("--max-logprobs", s.max_logprobs, "Most logprobs / top_logprobs a request may ask for")
      ->check(CLI::Range(0, 20))
      ->capture_default_str();
  c->add_flag("--disable-log-requests{false}", s.log_requests, "No access-log line per request");
  c->add_option("--tool-call-parser", s.tool_call_parser,
                "Tool-call syntax of the model: hermes, llama3_json or mistral (default: from the chat template)")
      ->check(CLI::IsMember({"hermes", "llama3_json", "mistral"}));
  c->add_flag("--enable-auto-tool-choice", s.enable_auto_tool_choice,
              "tool_choice \"auto\": parse the model's tool calls (a lazy grammar keeps them well-formed)");
  c->add_option("--reasoning-parser", s.reasoning_parser,
                "Move <think>…</think> into reasoning_content: qwen3 or deepseek_r1")
      ->check(CLI::IsMember({"qwen3", "deepseek_r1"}));
  c->add_option_function<std::string>(
       "--chat-template-content-format",
       [&s](const std::string& v) { s.chat_template_content_format = content_format_from_name(v); },
       "How message content reaches the chat template: auto (detected from the template, as vLLM), string (text "
       "parts joined by newlines) or openai (a list of {\"type\": \"text\"} parts)")
      ->check(CLI::IsMember({"auto", "string", "openai"}))
      ->default_str("auto");
  c->add_option("--responses-store-max", s.response_store.max_responses,
                "Most /v1/responses kept in memory for GET and previous_response_id (least recently used go first)")
      ->capture_default_str();
  c->add_option("--responses-store-bytes", s.response_store.max_bytes,
                "Bytes the stored /v1/responses may hold, with their conversations")
      ->capture_default_str();
}

// --direction NAME=FILE, each checked against the model's d.
server::DirectionRegistry load_directions(const std::vector<std::string>& specs, const ModelConfig& c) {
  server::DirectionRegistry r;
  r.n_layers = c.n_layers;
  r.dim = c.dim;
  for (const std::string& s : specs) {
    const size_t eq = s.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == s.size()) fail("--direction '{}': expected NAME=FILE", s);
    const std::string name = s.substr(0, eq);
    if (r.by_name.count(name)) fail("--direction: the name '{}' is given twice", name);
    Direction d = load_direction(s.substr(eq + 1), c.dim);
    if (d.layer < 0 || d.layer > c.n_layers)
      fail("--direction '{}': its layer {} is outside 0..{}", s, d.layer, c.n_layers);
    r.by_name.emplace(name, std::move(d));
  }
  return r;
}

struct ServeOpts {
  std::string model;
  server::ServerConfig server;
  EngineFlags engine;
  double shutdown_grace_s = 10;
  std::vector<std::string> directions;
  std::string chat_template;  // --chat-template FILE: its text
  std::string chat_template_file;
  std::string generation_config = "auto";
  struct {
    bool enable = false;               // --enable-lora
    std::vector<std::string> modules;  // --lora-modules name=path ...
    int64_t max_loras = 1;             // --max-loras
    int64_t max_rank = 16;             // --max-lora-rank
  } lora;
  int64_t data_parallel_size = 1;  // --data-parallel-size: replicas behind one endpoint (serve_data_parallel.h)
};

// Loads the model and runs the engine behind `http` until the listener returns (after stop()); a watchdog
// aborts in-flight requests when the grace period after `stopping` runs out, so shutdown never hangs.
void serve_model(const ServeOpts& o, server::HttpServer& http, std::atomic<bool>& stopping, std::thread& listener) {
  if (const char* d = std::getenv("KVIK_SERVE_TEST_LOAD_DELAY_MS"))
    std::this_thread::sleep_for(std::chrono::milliseconds(std::atoi(d)));
  const EngineConfig cfg = o.engine.resolve();
  auto model = load_model(o.model, cfg);
  auto tok = load_tokenizer(model->path());  // GGUF file or Hugging Face directory
  if (!o.chat_template.empty()) tok->set_chat_template(o.chat_template);
  const server::DirectionRegistry directions = load_directions(o.directions, model->config());
  std::unique_ptr<server::LoraRegistry> loras;
  if (o.lora.enable) {
    loras = std::make_unique<server::LoraRegistry>(model->config(), o.lora.max_rank, o.server.served_model_name);
    for (const std::string& spec : o.lora.modules) {
      const auto [name, path] = server::parse_lora_module(spec);
      if (auto err = loras->load(name, path)) fail("--lora-modules {}: {}", spec, err->message);
      log_info("LoRA adapter '{}' loaded from {}", name, path);
    }
  }
  EngineConfig ecfg = cfg;
  ecfg.max_loras = o.lora.max_loras;
  EngineCore core(*model, ecfg, tok->end_of_generation_ids());
  core.enable_structured_output(structured::VocabTrie::token_bytes_of(*tok));  // response_format, guided_*
  server::ServerMetrics metrics(o.server.served_model_name);
  if (o.lora.enable) metrics.enable_lora_info(o.lora.max_loras);
  auto engine = std::make_unique<AsyncEngine>(
      core, [&metrics](const EngineCore& c, const std::vector<RequestOutput>& outs) { metrics.on_step(c, outs); });
  server::ModelContext ctx;
  ctx.tokenizer = tok.get();
  ctx.engine = engine.get();
  ctx.metrics = &metrics;
  ctx.max_model_len = core.config().max_model_len;
  ctx.directions = &directions;
  ctx.loras = loras.get();
  http.set_ready(ctx);
  log_info("Model {} ready as '{}' (max_model_len {})", o.model, o.server.served_model_name, ctx.max_model_len);

  // After SIGINT / SIGTERM the server drains (503 to new requests) while the in-flight ones finish; then the
  // listener closes and listen() returns once the last connection is done.
  std::thread watchdog([&] {
    while (!stopping) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(o.shutdown_grace_s);
    while (engine->num_in_flight() > 0 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    engine->abort_all();
    // Aborted streams end with their final chunk; a client that does not read them is cut off.
    for (int i = 0; i < 40 && engine->num_in_flight() > 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    http.stop();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    http.close_all();
  });
  listener.join();
  stopping = true;
  watchdog.join();
  engine->shutdown();
}

int run(ServeOpts& o) {
  // Signals go to one thread that waits for them; every other thread inherits the mask — MPI's and PMIx's too,
  // which MPI_Init (in run_parallel_worker) starts: unblocked there, a SIGTERM would end rank 0 at once.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  if (o.model.empty()) o.model = default_model_path();
  if (auto rc = run_parallel_worker(o.model, o.engine.resolve())) return *rc;  // ranks > 0 of mpirun
  if (o.server.served_model_name.empty()) o.server.served_model_name = std::filesystem::path(o.model).stem().string();
  if (!o.chat_template_file.empty()) o.chat_template = read_text_file(o.chat_template_file);
  if (!o.lora.modules.empty() && !o.lora.enable) fail("--lora-modules needs --enable-lora");
  if (o.data_parallel_size > 1)
    return serve_data_parallel(
        {o.data_parallel_size, o.model, o.chat_template, o.server, o.engine.config.num_threads, o.shutdown_grace_s});
  adopt_block_hash_seed();  // a data-parallel replica hashes blocks as its front does
  if (o.lora.enable && o.engine.config.parallel.enabled())
    fail("--enable-lora does not run with --tensor-parallel-size / --pipeline-parallel-size yet");
  o.server.generation_defaults = server::load_generation_defaults(o.generation_config, o.model);
  if (!o.server.generation_defaults.empty())
    log_info("Default sampling parameters from generation_config.json: {}",
             server::describe_defaults(o.server.generation_defaults));

  ::signal(SIGPIPE, SIG_IGN);  // a client that hangs up is a failed write, not a dead server

  server::HttpServer http(o.server);
  o.server.port = http.bind();  // --port 0: the port the kernel chose, for the log line below and its readers
  std::atomic<bool> stopping{false};
  std::thread listener([&] { http.listen(); });
  // The web pages' address: a wildcard listen address is reached through the loopback.
  const std::string scheme = o.server.ssl_keyfile.empty() ? "http" : "https";
  const bool wildcard = o.server.host == "0.0.0.0" || o.server.host == "::";
  log_info(
      "Listening on {}://{}:{} (loading the model; /health answers 503 until it is ready); web page: {}://{}:{}/ "
      "(chat; /dashboard, /trace)",
      scheme, o.server.host, o.server.port, scheme, wildcard ? "127.0.0.1" : o.server.host, o.server.port);
  std::thread signal_thread([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    if (stopping.exchange(true)) return;
    log_info("{}: draining (new requests get 503; in-flight requests get {} s), then shutting down",
             sig == SIGINT ? "SIGINT" : "SIGTERM", o.shutdown_grace_s);
    http.drain();
  });
  auto shutdown_threads = [&] {
    if (!stopping.exchange(true)) http.stop();
    pthread_kill(signal_thread.native_handle(), SIGTERM);  // wakes sigwait when no signal came
    signal_thread.join();
  };
  try {
    serve_model(o, http, stopping, listener);
    shutdown_threads();
    log_info("Shut down cleanly");
    return 0;
  } catch (...) {
    shutdown_threads();
    if (listener.joinable()) listener.join();
    throw;
  }
}

}  // namespace

Run add_serve(CLI::App& app) {
  auto o = std::make_shared<ServeOpts>();
  auto* c = app.add_subcommand("serve", "Serve a model over an OpenAI-compatible HTTP API");
  c->add_option("model,--model,-m", o->model,
                "GGUF model file or Hugging Face directory (default: the bundled models/stories260K.gguf)");
  c->add_option("--host", o->server.host, "Address to listen on")->capture_default_str();
  c->add_option("--port", o->server.port,
                "Port to listen on (0: a free port the kernel picks, named by the log line 'Listening on ...')")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  c->add_option("--served-model-name", o->server.served_model_name,
                "Model name in the API (default: the model file's name without .gguf)");
  c->add_option("--api-key", o->server.api_key, "Require 'Authorization: Bearer KEY' on /v1/* and tokenizer routes");
  c->add_option("--max-waiting", o->server.max_waiting, "Answer 429 once this many requests wait for the engine")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  c->add_option("--shutdown-grace", o->shutdown_grace_s,
                "Seconds in-flight requests may run after SIGINT/SIGTERM before they are aborted")
      ->capture_default_str();
  c->add_option("--chat-template", o->chat_template_file, "Jinja chat template file used instead of the model's")
      ->check(CLI::ExistingFile);
  c->add_option("--generation-config", o->generation_config,
                "Default sampling parameters: 'auto' (the model folder's generation_config.json), 'vllm' (none), "
                "or a folder / file")
      ->capture_default_str();
  add_http_flags(c, o->server);
  c->add_option("--direction", o->directions,
                "Register a direction for requests' \"interventions\": NAME=FILE (kvik direction's JSON); repeatable");
  c->add_flag("--enable-lora", o->lora.enable, "Serve LoRA adapters: a request's \"model\" selects one by name");
  c->add_option("--lora-modules", o->lora.modules,
                "Adapters to load at start: name=path (PEFT directory or GGUF LoRA) ...")
      ->expected(1, -1);
  c->add_option("--max-loras", o->lora.max_loras, "Most distinct adapters in one step (the base model needs no slot)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  c->add_option("--max-lora-rank", o->lora.max_rank, "Largest LoRA rank accepted")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  add_engine_flags(c, o->engine);
  c->add_option("--data-parallel-size,--dp", o->data_parallel_size,
                "Engine replicas (processes) behind this endpoint; a request goes to the replica holding the "
                "longest cached prefix of its prompt, else to the least loaded")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  return [o]() { return run(*o); };
}

}  // namespace kvik::cli
