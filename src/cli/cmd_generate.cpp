#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/generate.h"
#include "kernels/cpu/cpu_kernels.h"

namespace kvik::cli {

void set_threads(int threads) {
  ThreadPool::global().set_num_threads(threads);
}

Run add_generate(CLI::App& app) {
  struct Opts {
    std::string model, prompt;
    int max_tokens = 16, top_k = 0, threads = 0;
    float temperature = 1.0f, top_p = 1.0f, min_p = 0.0f;
    std::optional<uint64_t> seed;
    bool json = false, ignore_eos = false;
    int64_t max_model_len = 0;
    std::string kv_cache_dtype = "f32";
  };
  auto o = std::make_shared<Opts>();
  auto* c = app.add_subcommand("generate", "Continue a prompt and print the continuation");
  c->add_option("--model,-m", o->model, "GGUF model file")->required();
  c->add_option("--prompt,-p", o->prompt, "Prompt text")->required();
  c->add_option("--max-tokens,-n", o->max_tokens, "Tokens to generate at most")->capture_default_str();
  c->add_option("--temperature", o->temperature, "0 = greedy")->capture_default_str();
  c->add_option("--top-k", o->top_k, "Keep the k most likely tokens (0 = all)")->capture_default_str();
  c->add_option("--top-p", o->top_p, "Keep the smallest set with this much probability")->capture_default_str();
  c->add_option("--min-p", o->min_p, "Drop tokens below min_p x the top probability")->capture_default_str();
  c->add_option("--seed", o->seed, "Random seed (default: random)");
  c->add_flag("--ignore-eos", o->ignore_eos, "Keep generating after EOS");
  c->add_option("--max-model-len", o->max_model_len, "Context length (default: the model's)");
  c->add_option("--kv-cache-dtype", o->kv_cache_dtype, "KV cache element type: f32 or f16")
      ->check(CLI::IsMember({"f32", "f16"}))->capture_default_str();
  c->add_option("--threads,-t", o->threads, "Threads (default: all cores)");
  c->add_flag("--json", o->json, "Print one JSON object with ids, text, finish_reason and timings");
  return [o]() {
    set_threads(o->threads);
    SamplingParams sp;
    sp.temperature = o->temperature;
    sp.top_k = o->top_k;
    sp.top_p = o->top_p;
    sp.min_p = o->min_p;
    sp.seed = o->seed;
    sp.max_tokens = o->max_tokens;
    sp.ignore_eos = o->ignore_eos;
    if (auto err = sp.validate(); !err.empty()) fail("{}", err);
    auto model = LlamaModel::load(o->model);
    auto tok = load_tokenizer_from_gguf(model->gguf());
    auto ids = tok->encode(o->prompt, tok->add_bos(), false);
    GenerateOptions go;
    go.max_model_len = o->max_model_len;
    go.kv_dtype = o->kv_cache_dtype == "f16" ? KvDType::kF16 : KvDType::kF32;
    if (!o->json) go.on_text = [](const std::string& s) {
      std::fwrite(s.data(), 1, s.size(), stdout);
      std::fflush(stdout);
    };
    GenerateResult r = generate(*model, *tok, ids, sp, go);
    const double prefill_tok_s = r.prefill_ms > 0 ? r.prompt_token_ids.size() / (r.prefill_ms / 1000) : 0;
    const double decode_tok_s = r.decode_ms > 0 ? r.decode_steps / (r.decode_ms / 1000) : 0;
    if (o->json) {
      nlohmann::json j = {{"prompt_token_ids", r.prompt_token_ids},
                          {"token_ids", r.token_ids},
                          {"text", r.text},
                          {"finish_reason", r.finish_reason},
                          {"timings",
                           {{"prefill_ms", r.prefill_ms},
                            {"decode_ms", r.decode_ms},
                            {"prefill_tok_s", prefill_tok_s},
                            {"decode_tok_s", decode_tok_s}}}};
      std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    } else {
      std::printf("\n");
      std::fprintf(stderr, "[%zu prompt tokens in %.1f ms (%.1f tok/s), %zu generated, %.1f tok/s decode, finish: %s, isa: %s]\n",
                   r.prompt_token_ids.size(), r.prefill_ms, prefill_tok_s, r.token_ids.size(), decode_tok_s,
                   r.finish_reason.c_str(), std::string(cpu_kernels().isa).c_str());
    }
    return 0;
  };
}

}  // namespace kvik::cli
