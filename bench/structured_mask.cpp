// Structured-output mask cost per engine step, as a fraction of the step: 32 constrained requests (JSON
// schemas, regexes, json_object, a GBNF grammar) decoding through EngineCore, the masks computed for the
// real vocabulary of the model's tokenizer. Prints one JSON object.
// Usage: bench_structured_mask --model M.gguf --tokenizer DIR [--requests 32] [--steps 40]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "engine/engine_core.h"
#include "engine/structured/vocab_trie.h"
#include "model/llama.h"
#include "tokenizer/tokenizer.h"

using namespace kvik;
using Clock = std::chrono::steady_clock;

namespace {

double secs(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}
double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
}

std::vector<StructuredOutputSpec> specs() {
  std::vector<StructuredOutputSpec> s;
  const char* schemas[] = {
      R"({"type":"object","properties":{"name":{"type":"string","maxLength":40},"age":{"type":"integer"},
          "email":{"type":"string","pattern":"^[a-z0-9._]{1,20}@[a-z0-9]{1,12}\\.(com|org|net)$"},
          "tags":{"type":"array","items":{"type":"string","maxLength":12},"maxItems":5}},"required":["name","age"]})",
      R"({"type":"object","properties":{"city":{"type":"string"},"temperature":{"type":"number"},
          "unit":{"enum":["celsius","fahrenheit"]},"forecast":{"type":"array","items":{"type":"object",
          "properties":{"day":{"type":"string","pattern":"^\\d{4}-\\d{2}-\\d{2}$"},"rain":{"type":"boolean"}},
          "required":["day","rain"]},"minItems":1,"maxItems":7}},"required":["city","temperature","unit"]})",
      R"({"type":"object","properties":{"answer":{"anyOf":[{"type":"string","maxLength":64},{"type":"null"}]},
          "confidence":{"type":"number"},"sources":{"type":"array","items":{"type":"object","properties":
          {"title":{"type":"string"},"url":{"type":"string","pattern":"^https://[a-z.]{3,30}/[a-z0-9/]{0,30}$"}},
          "required":["title"]}}},"required":["answer"]})",
      R"({"type":"object","properties":{"id":{"type":"integer"},"status":{"enum":["open","closed","pending"]},
          "items":{"type":"array","items":{"type":"object","properties":{"sku":{"type":"string","maxLength":10},
          "qty":{"type":"integer"},"price":{"type":"number"}},"required":["sku","qty"]}},"note":{"type":"string"}},
          "required":["id","status","items"]})"};
  for (int i = 0; i < 4; ++i)
    for (const char* js : schemas) s.push_back(StructuredOutputSpec::json_schema(js));  // 16
  for (int i = 0; i < 2; ++i) {
    s.push_back(StructuredOutputSpec::regex(R"(\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01]))"));
    s.push_back(StructuredOutputSpec::regex(R"([A-Za-z ,.'!?]{1,200})"));
    s.push_back(StructuredOutputSpec::regex(R"([a-z0-9._%+-]{1,30}@[a-z0-9-]{1,20}\.[a-z]{2,6})"));
    s.push_back(StructuredOutputSpec::regex(R"((\+1 )?\(\d{3}\) \d{3}-\d{4})"));
  }  // 8
  for (int i = 0; i < 4; ++i) s.push_back(StructuredOutputSpec::json_object());
  for (int i = 0; i < 4; ++i)
    s.push_back(StructuredOutputSpec::grammar(
        "root ::= (expr \"=\" ws term \"\\n\")+\nexpr ::= term ([-+*/] term)*\n"
        "term ::= [0-9]+ | \"(\" expr \")\" | ident\nident ::= [a-z] [a-z0-9_]*\nws ::= \" \"?\n"));
  return s;
}

}  // namespace

namespace {

struct Args {
  std::string model_path, tok_dir;
  int requests = 32, steps = 40;
};

// Per decode step (every request decoding one token): the step's and the mask's seconds.
struct StepTimes {
  std::vector<double> step_s, mask_s, frac, first_decode_mask;
  int finished = 0;
};

// Runs `steps` + 1 engine steps, replacing every finished request by a new one with the same spec.
StepTimes decode_loop(EngineCore& e, int requests, int steps, const std::function<void(size_t)>& add) {
  StepTimes t;
  for (int s = 0; s < steps + 1; ++s) {
    const auto a = Clock::now();
    auto outs = e.step();
    const double dt = secs(a, Clock::now());
    if (e.last_step_tokens() == requests) {  // every request decoding one token
      t.step_s.push_back(dt);
      t.mask_s.push_back(e.last_step_mask_seconds());
      t.frac.push_back(e.last_step_mask_seconds() / dt);
      if (t.first_decode_mask.size() < 3) t.first_decode_mask.push_back(e.last_step_mask_seconds());
    }
    for (const auto& o : outs)
      if (o.finished) {  // keep `requests` constrained requests running
        ++t.finished;
        const auto colon = o.request_id.find(':');
        add(static_cast<size_t>(std::stoul(o.request_id.substr(colon + 1))));
      }
  }
  return t;
}

nlohmann::json run(const Args& args) {
  auto tok = load_tokenizer(args.tok_dir);
  auto model = LlamaModel::load(args.model_path);
  if (model->config().vocab_size != tok->vocab_size())
    std::fprintf(stderr, "note: model vocab %lld, tokenizer vocab %d\n",
                 static_cast<long long>(model->config().vocab_size), tok->vocab_size());
  const auto t0 = Clock::now();
  auto bytes = structured::VocabTrie::token_bytes_of(*tok);
  structured::VocabTrie trie_probe(bytes);
  const double trie_s = secs(t0, Clock::now());

  EngineConfig c;
  c.max_num_seqs = args.requests;
  c.max_model_len = 1024;
  c.num_kv_blocks = (args.requests + 4) * (1024 / 16);
  c.log_stats = false;
  EngineCore e(*model, c, {tok->eos_id()});
  e.enable_structured_output(bytes);
  const auto all = specs();
  const std::vector<int32_t> prompt = tok->encode("Reply in the requested format.", true, false);
  int next_id = 0;
  auto add = [&](size_t k) {
    SamplingParams p;
    p.temperature = 1.0f;
    p.seed = static_cast<uint64_t>(next_id);
    p.max_tokens = 512;
    p.structured_output = all[k % all.size()];
    if (auto err = e.add_request(fmt::format("r{}:{}", next_id++, k), prompt, p))
      throw std::runtime_error(err->message);
  };
  const auto tc = Clock::now();
  for (int i = 0; i < args.requests; ++i) add(static_cast<size_t>(i));
  const double compile_s = secs(tc, Clock::now());
  const StepTimes t = decode_loop(e, args.requests, args.steps, add);
  return {
      {"vocab", tok->vocab_size()},
      {"trie_nodes", trie_probe.nodes().size()},
      {"trie_build_s", trie_s},
      {"compile_32_specs_s", compile_s},
      {"constrained_requests", args.requests},
      {"decode_steps", t.step_s.size()},
      {"requests_finished_and_replaced", t.finished},
      {"decode_step_s_mean", mean(t.step_s)},
      {"mask_s_mean", mean(t.mask_s)},
      {"mask_s_p50", quantile(t.mask_s, 0.5)},
      {"mask_s_p90", quantile(t.mask_s, 0.9)},
      {"mask_s_max", quantile(t.mask_s, 1.0)},
      {"mask_s_first_decode_steps", t.first_decode_mask},
      {"mask_fraction_of_step_mean", mean(t.frac)},
      {"mask_fraction_of_step_p50", quantile(t.frac, 0.5)},
      {"mask_fraction_of_step_max", quantile(t.frac, 1.0)},
      {"target_fraction", 0.10},
  };
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--model")
      args.model_path = argv[i + 1];
    else if (a == "--tokenizer")
      args.tok_dir = argv[i + 1];
    else if (a == "--requests")
      args.requests = std::stoi(argv[i + 1]);
    else if (a == "--steps")
      args.steps = std::stoi(argv[i + 1]);
  }
  if (args.model_path.empty() || args.tok_dir.empty()) {
    std::fprintf(stderr, "usage: bench_structured_mask --model M.gguf --tokenizer DIR [--requests 32] [--steps 40]\n");
    return 2;
  }
  try {
    std::printf("%s\n", run(args).dump(2).c_str());
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "bench_structured_mask: %s\n", ex.what());
    return 1;
  }
  return 0;
}
