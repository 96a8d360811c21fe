// kvik generate: one prompt (--prompt) or many (--prompts FILE.jsonl) through the engine.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "core/error.h"
#include "engine/engine_core.h"
#include "engine/parallel_engine.h"
#include "tokenizer/streaming_detokenizer.h"
#include "tokenizer/tokenizer.h"

namespace kvik::cli {

namespace {

struct Job {
  std::string prompt;
  SamplingParams params;
  std::vector<int32_t> prompt_ids;
  std::vector<int32_t> token_ids;
  std::string text;
  std::string finish_reason;
  RequestStats stats;
  std::unique_ptr<StreamingDetokenizer> detok;
};

SamplingParams params_from_json(const nlohmann::json& j, SamplingParams p, const std::string& where) {
  static const std::set<std::string> known = {"prompt", "max_tokens", "temperature", "top_k",
                                              "top_p",  "min_p",      "seed",        "ignore_eos"};
  for (auto it = j.begin(); it != j.end(); ++it)
    if (!known.count(it.key())) fail("{}: unknown field '{}'", where, it.key());
  try {
    if (j.contains("max_tokens")) p.max_tokens = j["max_tokens"].get<int32_t>();
    if (j.contains("temperature")) p.temperature = j["temperature"].get<float>();
    if (j.contains("top_k")) p.top_k = j["top_k"].get<int32_t>();
    if (j.contains("top_p")) p.top_p = j["top_p"].get<float>();
    if (j.contains("min_p")) p.min_p = j["min_p"].get<float>();
    if (j.contains("seed")) p.seed = j["seed"].get<uint64_t>();
    if (j.contains("ignore_eos")) p.ignore_eos = j["ignore_eos"].get<bool>();
  } catch (const nlohmann::json::exception& e) {
    fail("{}: {}", where, e.what());
  }
  if (auto err = p.validate()) fail("{}: {}", where, err->message);
  return p;
}

nlohmann::json job_json(const Job& j) {
  using namespace std::chrono;
  const double prefill_ms =
      j.stats.first_token ? duration<double, std::milli>(*j.stats.first_token - j.stats.arrival).count() : 0;
  const double decode_ms = j.stats.decode_time_s * 1000;
  const double n_decode = j.token_ids.empty() ? 0 : static_cast<double>(j.token_ids.size() - 1);
  return {{"prompt_token_ids", j.prompt_ids},
          {"token_ids", j.token_ids},
          {"text", j.text},
          {"finish_reason", j.finish_reason},
          {"spec_decode",
           {{"drafts", j.stats.spec_drafts},
            {"draft_tokens", j.stats.spec_draft_tokens},
            {"accepted_tokens", j.stats.spec_accepted_tokens}}},
          {"timings",
           {{"prefill_ms", prefill_ms},
            {"decode_ms", decode_ms},
            {"prefill_tok_s", prefill_ms > 0 ? j.prompt_ids.size() / (prefill_ms / 1000) : 0.0},
            {"decode_tok_s", decode_ms > 0 ? n_decode / (decode_ms / 1000) : 0.0}}}};
}

// --steer DIR.json:ALPHA[:LAYERS] and --ablate DIR.json[:LAYERS]: a steer defaults to the direction's own
// layer, an ablation to every layer.
Intervention intervention_flag(const std::string& spec, bool steer, const ModelConfig& c) {
  const std::string flag = steer ? "--steer" : "--ablate";
  std::vector<std::string> parts;
  for (size_t p = 0;;) {
    const size_t e = spec.find(':', p);
    parts.push_back(spec.substr(p, e == std::string::npos ? std::string::npos : e - p));
    if (e == std::string::npos) break;
    p = e + 1;
  }
  if (parts.size() < (steer ? 2u : 1u) || parts.size() > (steer ? 3u : 2u) || parts[0].empty())
    fail("{} '{}': expected {}", flag, spec, steer ? "DIR.json:ALPHA[:LAYERS]" : "DIR.json[:LAYERS]");
  const Direction d = load_direction(parts[0], c.dim);
  Intervention iv;
  iv.op = steer ? Intervention::Op::kSteer : Intervention::Op::kAblate;
  iv.direction = std::make_shared<const std::vector<float>>(d.vector);
  if (steer) {
    char* end = nullptr;
    iv.alpha = std::strtof(parts[1].c_str(), &end);
    if (parts[1].empty() || *end != '\0') fail("{} '{}': ALPHA '{}' is not a number", flag, spec, parts[1]);
  }
  const size_t li = steer ? 2 : 1;
  if (parts.size() > li) {
    iv.layers = parse_layer_list(parts[li], flag);
  } else if (steer) {
    iv.layers = {d.layer};
  } else {
    for (int32_t l = 0; l <= c.n_layers; ++l) iv.layers.push_back(l);
  }
  return iv;
}

std::shared_ptr<const InterventionList> interventions_from_flags(const std::vector<std::string>& steer,
                                                                 const std::vector<std::string>& ablate,
                                                                 const ModelConfig& c) {
  if (steer.empty() && ablate.empty()) return nullptr;
  std::vector<Intervention> items;
  for (const auto& s : steer) items.push_back(intervention_flag(s, true, c));
  for (const auto& s : ablate) items.push_back(intervention_flag(s, false, c));
  return make_interventions(std::move(items), c.n_layers, c.dim);
}

struct GenerateOpts {
  std::string model, prompt, prompts_file;
  std::vector<std::string> steer, ablate;
  SamplingParams params;
  std::string lora;  // --lora PATH
  float lora_scale = 1.0f;
  bool json = false;
  EngineFlags engine;
};

// --prompts FILE.jsonl (one {"prompt": ..., sampling fields...} per line) or the one --prompt.
std::vector<Job> read_jobs(const GenerateOpts& o) {
  std::vector<Job> jobs;
  if (o.prompts_file.empty()) {
    Job job;
    job.prompt = o.prompt;
    job.params = o.params;
    jobs.push_back(std::move(job));
    return jobs;
  }
  std::ifstream in(o.prompts_file);
  if (!in) fail("{}: cannot open", o.prompts_file);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = fmt::format("{}:{}", o.prompts_file, n);
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) fail("{}: not a JSON object", where);
    if (!j.contains("prompt") || !j["prompt"].is_string()) fail("{}: 'prompt' (a string) is required", where);
    Job job;
    job.prompt = j["prompt"].get<std::string>();
    job.params = params_from_json(j, o.params, where);
    jobs.push_back(std::move(job));
  }
  if (jobs.empty()) fail("{}: no prompts", o.prompts_file);
  return jobs;
}

// Steps the engine until every job is done; with `stream`, prints the one job's text as it comes.
void run_jobs(EngineCore& engine, std::vector<Job>& jobs, bool stream) {
  while (engine.has_unfinished()) {
    for (auto& out : engine.step()) {
      Job& j = jobs[std::stoul(out.request_id)];
      for (int32_t id : out.new_token_ids) {
        j.token_ids.push_back(id);
        const std::string piece = j.detok->push(id);
        j.text += piece;
        if (stream) std::fwrite(piece.data(), 1, piece.size(), stdout), std::fflush(stdout);
      }
      if (out.finished) {
        const std::string rest = j.detok->flush();
        j.text += rest;
        if (stream) std::fwrite(rest.data(), 1, rest.size(), stdout);
        j.finish_reason = out.finish_reason;
        j.stats = out.stats;
      }
    }
  }
}

void print_jobs(const std::vector<Job>& jobs, bool stream) {
  for (const Job& j : jobs) {
    if (stream) {
      const nlohmann::json t = job_json(j)["timings"];
      std::printf("\n");
      std::fprintf(stderr,
                   "[%zu prompt tokens, %zu generated, prefill %.1f ms (%.1f tok/s), decode %.1f tok/s, finish: %s]\n",
                   j.prompt_ids.size(), j.token_ids.size(), t["prefill_ms"].get<double>(),
                   t["prefill_tok_s"].get<double>(), t["decode_tok_s"].get<double>(), j.finish_reason.c_str());
    } else {
      std::printf("%s\n", job_json(j).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    }
  }
}

int run(const GenerateOpts& o) {
  if (o.prompt.empty() && o.prompts_file.empty()) fail("give --prompt TEXT or --prompts FILE.jsonl");
  if (auto err = o.params.validate()) fail("{}", err->message);
  std::vector<Job> jobs = read_jobs(o);
  const EngineConfig cfg = o.engine.resolve();
  if (cfg.parallel.enabled() && (!o.lora.empty() || !o.steer.empty() || !o.ablate.empty()))
    fail("--lora, --steer and --ablate do not run with --tensor-parallel-size / --pipeline-parallel-size yet");
  if (auto rc = run_parallel_worker(o.model, cfg)) return *rc;  // ranks > 0 of mpirun
  auto model = load_model(o.model, cfg);
  auto tok = load_tokenizer(model->path());
  if (auto iv = interventions_from_flags(o.steer, o.ablate, model->config()))
    for (Job& j : jobs) j.params.interventions = iv;
  if (!o.lora.empty()) {  // one adapter for every prompt (llama.cpp's --lora / --lora-scaled)
    LoraLoadOptions lo;
    lo.scale = o.lora_scale;
    const auto lora = load_lora_adapter(o.lora, model->config(), lo);
    for (Job& j : jobs) j.params.lora = lora;
  }
  EngineCore engine(*model, cfg, tok->end_of_generation_ids());
  for (size_t i = 0; i < jobs.size(); ++i) {
    Job& j = jobs[i];
    j.prompt_ids = tok->encode(j.prompt, tok->add_bos(), false);
    j.detok = std::make_unique<StreamingDetokenizer>(*tok, j.prompt_ids);
    if (auto err = engine.add_request(std::to_string(i), j.prompt_ids, j.params))
      fail("prompt {}: {}", i + 1, err->message);
  }
  const bool stream = jobs.size() == 1 && !o.json;
  run_jobs(engine, jobs, stream);
  print_jobs(jobs, stream);
  return 0;
}

}  // namespace

Run add_generate(CLI::App& app) {
  auto o = std::make_shared<GenerateOpts>();
  o->params.max_tokens = 16;
  auto* c = app.add_subcommand("generate", "Continue prompts and print the continuations");
  c->add_option("--model,-m", o->model, "GGUF model file")->required();
  auto* p1 = c->add_option("--prompt,-p", o->prompt, "Prompt text");
  auto* p2 = c->add_option("--prompts", o->prompts_file,
                           "JSONL file: one {\"prompt\": ..., \"max_tokens\": N, ...} per line, run together");
  p1->excludes(p2);
  c->add_option("--max-tokens,-n", o->params.max_tokens, "Tokens to generate at most")->capture_default_str();
  c->add_option("--temperature", o->params.temperature, "0 = greedy")->capture_default_str();
  c->add_option("--top-k", o->params.top_k, "Keep the k most likely tokens (0 = all)")->capture_default_str();
  c->add_option("--top-p", o->params.top_p, "Keep the smallest set with this much probability")->capture_default_str();
  c->add_option("--min-p", o->params.min_p, "Drop tokens below min_p x the top probability")->capture_default_str();
  c->add_option("--seed", o->params.seed, "Random seed (default: random)");
  c->add_flag("--ignore-eos", o->params.ignore_eos, "Keep generating after EOS");
  c->add_option("--steer", o->steer,
                "Steer every prompt: DIR.json:ALPHA[:LAYERS] adds ALPHA x r to the stream "
                "(layers e.g. 3,5-7; default the direction's layer); repeatable");
  c->add_option("--ablate", o->ablate,
                "Ablate: DIR.json[:LAYERS] removes r from the stream (default: every "
                "layer); repeatable");
  c->add_option("--lora", o->lora, "LoRA adapter for every prompt: a PEFT directory or a GGUF LoRA file");
  c->add_option("--lora-scale", o->lora_scale, "Multiplier on the adapter's alpha / r")->capture_default_str();
  c->add_flag("--json", o->json, "Print one JSON object with ids, text, finish_reason and timings");
  add_engine_flags(c, o->engine);
  return [o]() { return run(*o); };
}

}  // namespace kvik::cli
