// Logit lens, directions, run-time steering/ablation through the model and the engine, and ablation baked
// into the weights (interp/, model/intervention.h).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "core/error.h"
#include "engine/engine_core.h"
#include "engine/single_sequence.h"
#include "interp/bake.h"
#include "interp/interp.h"
#include "model/synth.h"
#include "server/openai_schema.h"
#include "tokenizer/tokenizer.h"

namespace kvik {
namespace {

const std::string kStories = std::string(KVIK_SOURCE_DIR) + "/models/stories260K.gguf";
const std::string kFixtures = std::string(KVIK_SOURCE_DIR) + "/tests/fixtures/";

std::shared_ptr<const std::vector<float>> random_direction(int64_t d, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n;
  auto v = std::make_shared<std::vector<float>>(d);
  for (float& x : *v) x = n(rng);
  return v;
}

std::vector<int32_t> all_layers(const LlamaModel& m) {
  std::vector<int32_t> l;
  for (int32_t i = 0; i <= m.config().n_layers; ++i) l.push_back(i);
  return l;
}

std::shared_ptr<const InterventionList> one(const LlamaModel& m, Intervention::Op op,
                                            std::shared_ptr<const std::vector<float>> r, float alpha,
                                            std::vector<int32_t> layers) {
  Intervention iv;
  iv.op = op;
  iv.direction = std::move(r);
  iv.alpha = alpha;
  iv.layers = std::move(layers);
  return make_interventions({iv}, m.config().n_layers, m.config().dim);
}

// Greedy tokens and the logits of every step, one sequence with the given interventions.
struct Greedy {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;
};
Greedy greedy(LlamaModel& m, const std::vector<int32_t>& prompt, int n,
              std::shared_ptr<const InterventionList> iv = nullptr, DType kv = DType::F32) {
  SingleSequence seq(m, static_cast<int64_t>(prompt.size()) + n, kv);
  seq.set_interventions(std::move(iv));
  Greedy g;
  std::vector<float> l = seq.append(prompt);
  for (int i = 0; i < n; ++i) {
    const int32_t next = static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
    g.tokens.push_back(next);
    g.logits.push_back(l);
    l = seq.append(std::vector<int32_t>{next});
  }
  return g;
}

TEST(Lens, LastLayerIsTheModelsOwnDistribution) {
  auto m = LlamaModel::load(kStories);
  auto tok = load_tokenizer(kStories);
  const auto ids = tok->encode("Once upon a time, there was a little girl named Lily. She", true, false);
  std::vector<float> logits;
  const interp::StreamCapture s = interp::capture_stream(*m, ids, nullptr, &logits);
  ASSERT_EQ(s.x.size(), static_cast<size_t>(m->config().n_layers + 1));
  const interp::Lens lens = interp::logit_lens(*m, s, ids, 5);
  const int64_t V = m->config().vocab_size;
  for (int64_t t = 0; t < s.T; ++t) {
    const std::vector<float> p = interp::softmax(&logits[t * V], V);
    const interp::LensCell& c = lens.cells.back()[t];
    for (const auto& tp : c.top) EXPECT_NEAR(tp.prob, p[tp.id], 1e-6f) << "position " << t;
    EXPECT_EQ(c.top[0].id, interp::top_k(p, 1)[0].id);
  }
  // At the last position the target is the model's own greedy token, ranked first at the output layer.
  EXPECT_EQ(lens.cells.back().back().target_rank, 0);
  EXPECT_EQ(lens.cells.back().back().target, lens.cells.back().back().top[0].id);
  // Layer 0 (the embedding) does not already know the answer the output layer gives.
  EXPECT_GT(lens.cells.front().back().target_rank, 0);
}

TEST(Intervention, AblationLeavesNoComponentAfterEachAblatedLayer) {
  auto m = LlamaModel::load(kStories);
  const int64_t d = m->config().dim;
  const auto r = random_direction(d, 7);
  double n = 0;
  for (float v : *r) n += v * v;
  const std::vector<int32_t> ids = {1, 403, 407, 261, 378, 432, 261, 370, 262};
  for (const std::vector<int32_t>& layers : {all_layers(*m), std::vector<int32_t>{2, 3}, std::vector<int32_t>{5}}) {
    const interp::StreamCapture plain = interp::capture_stream(*m, ids);
    const interp::StreamCapture s = interp::capture_stream(*m, ids, one(*m, Intervention::Op::kAblate, r, 0, layers));
    for (int32_t l : layers)
      for (int64_t t = 0; t < s.T; ++t) {
        double dot = 0, xx = 0, plain_dot = 0;
        for (int64_t i = 0; i < d; ++i) {
          dot += s.row(l, t)[i] * (*r)[i] / std::sqrt(n);
          plain_dot += plain.row(l, t)[i] * (*r)[i] / std::sqrt(n);
          xx += static_cast<double>(s.row(l, t)[i]) * s.row(l, t)[i];
        }
        EXPECT_LE(std::abs(dot), 1e-5 * std::sqrt(xx)) << "layer " << l << " position " << t;
        EXPECT_GT(std::abs(plain_dot), 1e-3 * std::sqrt(xx)) << "the check must be able to fail";
      }
    // Layers before the first ablated one are untouched.
    for (int32_t l = 0; l < layers.front(); ++l) EXPECT_EQ(s.x[l], plain.x[l]) << "layer " << l;
  }
}

TEST(Intervention, SteeringWithAlphaZeroIsBitIdentical) {
  auto m = LlamaModel::load(kStories);
  const std::vector<int32_t> prompt = {1, 403, 407, 261, 378};
  const Greedy plain = greedy(*m, prompt, 24);
  const auto r = random_direction(m->config().dim, 3);
  const Greedy zero = greedy(*m, prompt, 24, one(*m, Intervention::Op::kSteer, r, 0.0f, all_layers(*m)));
  EXPECT_EQ(zero.tokens, plain.tokens);
  for (size_t i = 0; i < plain.logits.size(); ++i)
    EXPECT_EQ(std::memcmp(zero.logits[i].data(), plain.logits[i].data(), plain.logits[i].size() * sizeof(float)), 0);
  const Greedy strong = greedy(*m, prompt, 24, one(*m, Intervention::Op::kSteer, r, 8.0f, {3}));
  EXPECT_NE(strong.tokens, plain.tokens) << "steering by 8 must change the continuation";
}

TEST(Intervention, ValidationNamesWhatIsWrong) {
  auto m = LlamaModel::load(kStories);
  const auto r = random_direction(m->config().dim, 1);
  EXPECT_THROW(one(*m, Intervention::Op::kSteer, r, 1, {6}), Error);  // L = 5
  EXPECT_THROW(one(*m, Intervention::Op::kSteer, r, 1, {-1}), Error);
  EXPECT_THROW(one(*m, Intervention::Op::kSteer, r, 1, {}), Error);
  EXPECT_THROW(one(*m, Intervention::Op::kSteer, random_direction(10, 1), 1, {1}), Error);
  EXPECT_THROW(one(*m, Intervention::Op::kSteer, std::make_shared<std::vector<float>>(64, 0.0f), 1, {1}), Error);
  EXPECT_EQ(parse_layer_list("3,1-2", "x"), (std::vector<int32_t>{3, 1, 2}));
  for (const char* bad : {"", "a", "1,", "3-1", "1-2-3", "-1", "1.5"})
    EXPECT_THROW(parse_layer_list(bad, "x"), Error) << bad;
  EXPECT_THROW(load_direction("/nonexistent.json"), Error);
  EXPECT_THROW(load_direction(kFixtures + "loop_direction.json", 65), Error);
  EXPECT_EQ(load_direction(kFixtures + "loop_direction.json", 64).vector.size(), 64u);
  // The cache key tells steering strengths apart.
  EXPECT_NE(one(*m, Intervention::Op::kSteer, r, 1, {1})->cache_key,
            one(*m, Intervention::Op::kSteer, r, 2, {1})->cache_key);
  EXPECT_NE(one(*m, Intervention::Op::kSteer, r, 1, {1})->cache_key,
            one(*m, Intervention::Op::kAblate, r, 1, {1})->cache_key);
}

// Bakes `direction` into `model` (all layers unless given) and compares greedy tokens and logits with run-time
// ablation of the same layers on the original.
void expect_baked_equals_runtime(const std::string& model, const std::vector<float>& direction,
                                 std::optional<DType> type, float tol, std::vector<int32_t> layers = {}) {
  interp::BakeOptions o;
  o.model_path = model;
  o.out_path = ::testing::TempDir() + "baked.gguf";
  o.direction.vector = direction;
  o.layers = layers;
  o.type = type;
  const interp::BakeReport rep = interp::bake_ablation(o);
  EXPECT_GT(rep.tensors_rewritten, 0);
  auto orig = LlamaModel::load(model);
  auto baked = LlamaModel::load(o.out_path);
  if (layers.empty()) layers = all_layers(*orig);
  const auto iv = one(*orig, Intervention::Op::kAblate, std::make_shared<std::vector<float>>(direction), 0, layers);
  for (const std::vector<int32_t>& prompt :
       {std::vector<int32_t>{1, 403, 407, 261, 378}, std::vector<int32_t>{1, 326, 269, 301}}) {
    const Greedy rt = greedy(*orig, prompt, 32, iv);
    const Greedy bk = greedy(*baked, prompt, 32);
    EXPECT_EQ(bk.tokens, rt.tokens);
    const Greedy plain = greedy(*orig, prompt, 32);
    EXPECT_NE(plain.logits[0], rt.logits[0]) << "the ablation must change something";
    float max_diff = 0, max_logit = 0;  // tolerance relative to the logits' range
    for (size_t i = 0; i < rt.logits.size() && bk.tokens == rt.tokens; ++i)
      for (size_t v = 0; v < rt.logits[i].size(); ++v) {
        max_diff = std::max(max_diff, std::abs(rt.logits[i][v] - bk.logits[i][v]));
        max_logit = std::max(max_logit, std::abs(rt.logits[i][v]));
      }
    EXPECT_LE(max_diff, tol * max_logit);
    std::printf("  baked vs run-time: max |logit diff| over 32 steps %.3g (max |logit| %.3g)\n", max_diff, max_logit);
  }
}

TEST(Bake, BakedAblationEqualsRuntimeAblationF32) {
  const Direction d = load_direction(kFixtures + "loop_direction.json");
  expect_baked_equals_runtime(kStories, d.vector, std::nullopt, 1e-5f);
  expect_baked_equals_runtime(kStories, d.vector, std::nullopt, 1e-5f, {0, 1, 2});  // a prefix from the embedding
}

TEST(Bake, BakedAblationEqualsRuntimeAblationRequantized) {
  SynthOptions s;
  s.out_path = ::testing::TempDir() + "synth_q8.gguf";
  s.dim = 128, s.layers = 2, s.heads = 8, s.kv_heads = 2, s.ff = 256, s.vocab = 512, s.context = 256, s.seed = 5;
  s.type = DType::Q8_0;
  synth_llama_gguf(s);
  const auto r = random_direction(128, 11);
  expect_baked_equals_runtime(s.out_path, *r, std::nullopt, 0.05f);  // q8_0 requantization error on the logits
  EXPECT_THROW(expect_baked_equals_runtime(kStories, std::vector<float>(64, 1.0f), DType::Q8_0, 1), Error)
      << "d_ff 172 cannot be q8_0: a clear error";
}

TEST(Bake, BakedGgufMatchesLlamaCpp) {
  const nlohmann::json ref = nlohmann::json::parse(std::ifstream(kFixtures + "ref_baked_ablation.json"));
  interp::BakeOptions o;
  o.model_path = kStories;
  o.out_path = ::testing::TempDir() + "baked_ref.gguf";
  o.direction = load_direction(kFixtures + "loop_direction.json");
  interp::bake_ablation(o);
  auto baked = LlamaModel::load(o.out_path);
  for (const auto& c : ref["cases"]) {
    const auto prompt = c["prompt_ids"].get<std::vector<int32_t>>();
    const auto want = c["generated"].get<std::vector<int32_t>>();
    EXPECT_EQ(greedy(*baked, prompt, static_cast<int>(want.size()), nullptr, DType::F16).tokens, want) << c["prompt"];
  }
}

// Runs every prompt through one engine (greedy, `n` tokens); `iv[i]` (may be null) is prompt i's interventions.
std::map<std::string, std::vector<int32_t>> run_engine(EngineCore& e, const std::vector<std::vector<int32_t>>& prompts,
                                                       const std::vector<std::shared_ptr<const InterventionList>>& iv,
                                                       int n, const std::string& prefix = "r") {
  for (size_t i = 0; i < prompts.size(); ++i) {
    SamplingParams sp;
    sp.temperature = 0;
    sp.max_tokens = n;
    sp.ignore_eos = true;
    sp.interventions = i < iv.size() ? iv[i] : nullptr;
    EXPECT_FALSE(e.add_request(prefix + std::to_string(i), prompts[i], sp));
  }
  std::map<std::string, std::vector<int32_t>> out;
  while (e.has_unfinished())
    for (auto& o : e.step())
      out[o.request_id].insert(out[o.request_id].end(), o.new_token_ids.begin(), o.new_token_ids.end());
  return out;
}

EngineConfig engine_config() {
  EngineConfig c;
  c.max_model_len = 256;
  c.num_kv_blocks = 512;
  c.log_stats = false;
  c.kv_cache_dtype = DType::F32;  // as the reference path (SingleSequence) the outputs are compared with
  return c;
}

TEST(InterventionEngine, OneSteeredRequestInABatchOf16LeavesThePlainOnesIdentical) {
  auto m = LlamaModel::load(kStories);
  std::vector<std::vector<int32_t>> prompts;
  std::mt19937 rng(9);
  for (int i = 0; i < 17; ++i) {
    std::vector<int32_t> p = {1};
    for (int j = 0; j < 3 + i % 7; ++j) p.push_back(static_cast<int32_t>(3 + rng() % 500));
    prompts.push_back(p);
  }
  prompts[16] = prompts[3];  // the steered request shares a prompt with a plain one: no prefix cache sharing
  const auto r = random_direction(m->config().dim, 5);
  const auto steer = one(*m, Intervention::Op::kSteer, r, 6.0f, {2, 3});
  std::map<std::string, std::vector<int32_t>> alone;
  for (size_t i = 0; i < 16; ++i) alone["r" + std::to_string(i)] = greedy(*m, prompts[i], 24).tokens;
  const auto steered_alone = greedy(*m, prompts[16], 24, steer).tokens;
  ASSERT_NE(steered_alone, alone["r3"]);

  EngineCore e(*m, engine_config(), {2});
  std::vector<std::shared_ptr<const InterventionList>> iv(17);
  iv[16] = steer;
  auto out = run_engine(e, prompts, iv, 24);
  EXPECT_EQ(out["r16"], steered_alone);
  out.erase("r16");
  EXPECT_EQ(out, alone);
  // Again on the warm engine: plain prompts hit the prefix cache, the steered one must not take plain KV (nor the
  // plain ones its KV), and an ablating request with the same prompt is a third, separate cache entry.
  iv[15] = one(*m, Intervention::Op::kAblate, r, 0, all_layers(*m));
  prompts[15] = prompts[3];
  auto again = run_engine(e, prompts, iv, 24, "b");
  EXPECT_EQ(again["b16"], steered_alone);
  EXPECT_EQ(again["b15"], greedy(*m, prompts[3], 24, iv[15]).tokens);
  EXPECT_EQ(again["b3"], alone["r3"]);
  SamplingParams sp;
  sp.interventions =
      make_interventions({Intervention{Intervention::Op::kSteer, random_direction(32, 1), 1, {1}}}, 8, 32);
  EXPECT_NE(e.add_request("other-model", prompts[0], sp), std::nullopt) << "a list built for another shape is refused";
  for (size_t i = 0; i < 15; ++i) EXPECT_EQ(again["b" + std::to_string(i)], alone["r" + std::to_string(i)]) << i;
}

// The looping example of docs/interpretability.md on stories260K: prompts whose greedy continuation loops vs ones
// that do not, a direction between them, and the repetition rate (share of repeated 4-grams in 64 generated tokens)
// with and without ablating it, and steering away from it. Half the prompts find the direction, the other half measure.
// Prints what it finds; asserts only the mechanics (the numbers are reported, whether they help or not).
TEST(Looping, RepetitionRateWithAndWithoutTheDirection) {
  auto m = LlamaModel::load(kStories);
  auto tok = load_tokenizer(kStories);
  const std::vector<std::string> loops = {"Tim and Sue",  "The cat sat",        "The sun was shining",
                                          "Ben liked to", "He saw a",           "It was a sunny day",
                                          "The toy car",  "They played all day"};
  const std::vector<std::string> fine = {"Once upon a time",        "Once upon a time, there was a big dog",
                                         "Max was a happy dog",     "Once there was a kind old man",
                                         "There was a little girl", "One day, a little boy named Tom",
                                         "The little fish",         "Lily wanted to play"};
  const auto enc = [&](const std::string& s) { return tok->encode(s, true, false); };
  std::vector<std::vector<int32_t>> pos, neg, held;
  for (size_t i = 0; i < loops.size(); ++i) (i % 2 ? held : pos).push_back(enc(loops[i]));
  for (size_t i = 0; i < fine.size(); ++i) (i % 2 ? held : neg).push_back(enc(fine[i]));
  const auto dir = interp::find_direction(*m, pos, neg, 3, interp::Pooling::kMean);
  const auto r = std::make_shared<std::vector<float>>(dir.direction.vector);
  const auto rate = [&](std::shared_ptr<const InterventionList> iv, const std::vector<std::vector<int32_t>>& ps) {
    double sum = 0;
    for (const auto& p : ps) sum += interp::repeated_4gram_rate(greedy(*m, p, 64, iv).tokens);
    return sum / ps.size();
  };
  const double base_train = rate(nullptr, pos), base_held = rate(nullptr, held);
  const double abl_held = rate(one(*m, Intervention::Op::kAblate, r, 0, all_layers(*m)), held);
  const double steer_held = rate(one(*m, Intervention::Op::kSteer, r, -2.0f, {3}), held);
  std::printf("  looping prompts (train) repetition rate %.3f; non-looping (train) %.3f\n", base_train,
              rate(nullptr, neg));
  std::printf("  held-out prompts: plain %.3f, ablated (all layers) %.3f, steered away (alpha -2 at layer 3) %.3f\n",
              base_held, abl_held, steer_held);
  EXPECT_GT(base_train, rate(nullptr, neg)) << "the looping prompts were chosen because they loop";
  EXPECT_NE(abl_held, base_held) << "the ablation must change the continuations";
  EXPECT_DOUBLE_EQ(interp::repeated_4gram_rate({1, 2, 3, 4, 1, 2, 3, 4}), 1.0 / 5.0);
  EXPECT_DOUBLE_EQ(interp::repeated_4gram_rate({1, 1, 1, 1, 1, 1}), 2.0 / 3.0);
}

TEST(ServerInterventions, ParsedResolvedAndBadOnesAre400NamingTheField) {
  using server::ApiError;
  const nlohmann::json body = nlohmann::json::parse(R"({"prompt": "Once", "interventions": [
      {"direction": "loop", "op": "steer", "alpha": -2, "layers": [3]}, {"direction": "loop", "op": "ablate"}]})");
  auto parsed = server::parse_generate_request(body, false);
  ASSERT_TRUE(std::holds_alternative<server::GenerateRequest>(parsed));
  const auto& specs = std::get<server::GenerateRequest>(parsed).interventions;
  ASSERT_EQ(specs.size(), 2u);
  server::DirectionRegistry reg;
  reg.n_layers = 5;
  reg.dim = 64;
  reg.by_name["loop"] = load_direction(kFixtures + "loop_direction.json", 64);
  const auto list = server::resolve_interventions(specs, &reg);
  ASSERT_EQ(list->items.size(), 2u);
  EXPECT_EQ(list->items[0].layers, (std::vector<int32_t>{3}));
  EXPECT_FLOAT_EQ(list->items[0].alpha, -2.0f);
  EXPECT_EQ(list->items[1].layers, (std::vector<int32_t>{0, 1, 2, 3, 4, 5}));  // ablate: every layer
  EXPECT_EQ(server::resolve_interventions({}, &reg), nullptr);

  const std::pair<const char*, const char*> bad[] = {
      {R"({"prompt": "x", "interventions": {}})", "interventions"},
      {R"({"prompt": "x", "interventions": [1]})", "interventions[0]"},
      {R"({"prompt": "x", "interventions": [{"op": "steer", "alpha": 1}]})", "interventions[0].direction"},
      {R"({"prompt": "x", "interventions": [{"direction": "loop", "op": "boost"}]})", "interventions[0].op"},
      {R"({"prompt": "x", "interventions": [{"direction": "loop", "op": "steer"}]})", "interventions[0].alpha"},
      {R"({"prompt": "x", "interventions": [{"direction": "loop", "op": "ablate", "alpha": 1}]})",
       "interventions[0].alpha"},
      {R"({"prompt": "x", "interventions": [{"direction": "loop", "op": "ablate", "layers": [-1]}]})",
       "interventions[0].layers"},
      {R"({"prompt": "x", "interventions": [{"direction": "loop", "op": "ablate", "extra": 1}]})",
       "interventions[0].extra"},
  };
  for (const auto& [json, field] : bad) {
    auto r = server::parse_generate_request(nlohmann::json::parse(json), false);
    ASSERT_TRUE(std::holds_alternative<ApiError>(r)) << json;
    EXPECT_EQ(std::get<ApiError>(r).param, field) << json;
  }
  const auto resolve_error = [&](const char* json, const server::DirectionRegistry* r) {
    auto p = server::parse_generate_request(nlohmann::json::parse(json), false);
    try {
      server::resolve_interventions(std::get<server::GenerateRequest>(p).interventions, r);
    } catch (const ApiError& e) {
      return e.param;
    }
    return std::string("no error");
  };
  EXPECT_EQ(resolve_error(R"({"prompt": "x", "interventions": [{"direction": "nope", "op": "ablate"}]})", &reg),
            "interventions[0].direction");
  EXPECT_EQ(resolve_error(R"({"prompt": "x", "interventions": [{"direction": "loop", "op": "ablate", "layers": [6]}]})",
                          &reg),
            "interventions[0].layers");
  EXPECT_EQ(resolve_error(R"({"prompt": "x", "interventions": [{"direction": "loop", "op": "ablate"}]})", nullptr),
            "interventions");
}

}  // namespace
}  // namespace kvik
