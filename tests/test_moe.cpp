// Mixture of experts (model/moe.h): the router as each family defines it, matmul_grouped (llama.cpp's mul_mat_id)
// and the grouped MoE MLP bit for bit against a token-by-token reference, the loader's errors, and kvik against
// llama.cpp on random-weight Mixtral- and Qwen3-MoE-shaped models (tests/fixtures/ref_synth_moe.json, made by
// tools/make_moe_ref_fixture.sh).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <unistd.h>
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/single_sequence.h"
#include "formats/gguf.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/packed.h"
#include "llamacpp_fixture.h"
#include "model/llama.h"
#include "model/moe.h"
#include "model/synth.h"
#include "random_weights.h"
#include "run_kvik.h"

using namespace kvik;
using kvik::test::random_weights;
using kvik::test::Weights;
namespace fs = std::filesystem;

namespace {

constexpr const char* kFixture = KVIK_SOURCE_DIR "/tests/fixtures/ref_synth_moe.json";

}  // namespace

// Mixtral (HF MixtralSparseMoeBlock): top-k of the logits, softmax over those k. Qwen3-MoE with norm_topk_prob:
// softmax over all, top-k, divided by their sum — the same numbers; without it the k plain probabilities.
TEST(Moe, RouterPicksTopKAndWeightsAsEachFamilyDefines) {
  std::mt19937 rng(3);
  std::normal_distribution<float> g(0.0f, 2.0f);
  const int64_t T = 5, E = 12, k = 3;
  std::vector<float> logits(T * E);
  for (auto& v : logits) v = g(rng);
  std::vector<int32_t> ids(T * k), ids_plain(T * k);
  std::vector<float> w(T * k), w_plain(T * k);
  route_experts(logits.data(), T, E, k, true, ids.data(), w.data());
  route_experts(logits.data(), T, E, k, false, ids_plain.data(), w_plain.data());
  EXPECT_EQ(ids, ids_plain);
  for (int64_t t = 0; t < T; ++t) {
    const float* l = &logits[t * E];
    std::vector<int32_t> order(E);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return l[a] > l[b]; });
    double top_sum = 0;  // Mixtral: softmax over the top-k logits
    for (int64_t s = 0; s < k; ++s) top_sum += std::exp(static_cast<double>(l[order[s]] - l[order[0]]));
    const auto p = test::probabilities(std::span<const float>(l, E));
    for (int64_t s = 0; s < k; ++s) {
      EXPECT_EQ(ids[t * k + s], order[s]) << "token " << t << " slot " << s;
      EXPECT_NEAR(w[t * k + s], std::exp(static_cast<double>(l[order[s]] - l[order[0]])) / top_sum, 1e-6);
      EXPECT_NEAR(w_plain[t * k + s], p[order[s]], 1e-6);
    }
  }
}

// matmul_grouped gives each group what matmul() gives its rows alone, bit for bit (packed and row-major).
TEST(Moe, GroupedMatmulEqualsSeparateCallsBitForBit) {
  std::mt19937 rng(11);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (DType t : {DType::F32, DType::Q8_0, DType::Q4_K, DType::Q6_K}) {
    for (bool pack : {false, true}) {
      const int64_t cols = 512;
      std::vector<Weights> ws;
      std::vector<PackedBuffer> packed;
      for (int64_t rows : {48, 37, 300}) {
        ws.push_back(random_weights(t, rows, cols, rng));
        if (pack) packed.push_back(pack_weight(ws.back().m));
      }
      const int64_t N = 60;
      std::vector<float> x(N * cols);
      for (auto& v : x) v = g(rng);
      // Groups: rows [0, 9), [9, 10), [10, 60) of x; one group of no rows.
      const int64_t begin[] = {0, 9, 10, 10}, count[] = {9, 1, 50, 0};
      std::vector<std::vector<float>> y(4);
      std::vector<MatmulGroup> groups;
      for (int i = 0; i < 4; ++i) {
        const WeightMatrix& w = ws[i % 3].m;
        y[i].assign(static_cast<size_t>(std::max<int64_t>(count[i], 1) * w.rows), -1.0f);
        groups.push_back({&w, begin[i], count[i], y[i].data()});
      }
      matmul_grouped(x.data(), N, groups);
      for (int i = 0; i < 3; ++i) {
        const WeightMatrix& w = ws[i].m;
        std::vector<float> ref(static_cast<size_t>(count[i] * w.rows));
        matmul(x.data() + begin[i] * cols, count[i], w, ref.data());
        EXPECT_EQ(0, std::memcmp(ref.data(), y[i].data(), ref.size() * sizeof(float)))
            << dtype_name(t) << (pack ? " packed" : "") << " group " << i;
      }
      EXPECT_EQ(y[3][0], -1.0f) << "a group without rows wrote";
    }
  }
}

// The grouped MoE MLP equals running each token alone through its k experts, bit for bit, whatever the batch
// (T = 1 decode, a small prefill, and more tokens than one chunk of the workspace).
TEST(Moe, GroupedMlpEqualsPerTokenReferenceBitForBit) {
  std::mt19937 rng(5);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (DType t : {DType::F32, DType::Q8_0, DType::Q4_K}) {
    ModelConfig c;
    c.dim = 256, c.n_experts = 8, c.n_experts_used = 3, c.expert_ff_dim = 256, c.norm_topk_prob = t != DType::Q8_0;
    std::vector<Weights> store;
    std::vector<PackedBuffer> packed;
    MoeWeights w;
    store.push_back(random_weights(DType::F32, c.n_experts, c.dim, rng));
    w.router = store.back().m;
    for (int64_t e = 0; e < c.n_experts; ++e) {
      for (auto* list : {&w.gate, &w.up, &w.down}) {
        const bool down = list == &w.down;
        store.push_back(random_weights(t, down ? c.dim : c.expert_ff_dim, down ? c.expert_ff_dim : c.dim, rng));
        list->push_back(store.back().m);
        if (e % 2 == 0) packed.push_back(pack_weight(list->back()));  // packed and row-major experts side by side
      }
    }
    MoeWorkspace ws;
    for (int64_t T : {int64_t{1}, int64_t{7}, kMoeChunkTokens + 13}) {
      std::vector<float> xn(T * c.dim), out(T * c.dim);
      for (auto& v : xn) v = g(rng);
      moe_mlp(w, c, xn.data(), T, ws, out.data());
      for (int64_t i = 0; i < T; ++i) {
        const float* x = &xn[i * c.dim];
        std::vector<float> logits(c.n_experts), gate(c.expert_ff_dim), up(c.expert_ff_dim), y(c.dim), ref(c.dim);
        std::vector<int32_t> ids(c.n_experts_used);
        std::vector<float> wt(c.n_experts_used);
        matmul(x, 1, w.router, logits.data());
        route_experts(logits.data(), 1, c.n_experts, c.n_experts_used, c.norm_topk_prob, ids.data(), wt.data());
        for (int64_t s = 0; s < c.n_experts_used; ++s) {
          matmul(x, 1, w.gate[ids[s]], gate.data());
          matmul(x, 1, w.up[ids[s]], up.data());
          silu_mul(gate.data(), up.data(), c.expert_ff_dim);
          matmul(gate.data(), 1, w.down[ids[s]], y.data());
          for (int64_t j = 0; j < c.dim; ++j) ref[j] = s == 0 ? wt[s] * y[j] : ref[j] + wt[s] * y[j];
        }
        ASSERT_EQ(0, std::memcmp(ref.data(), &out[i * c.dim], sizeof(float) * c.dim))
            << dtype_name(t) << " T " << T << " token " << i;
      }
    }
  }
}

// Expert parallelism's dispatch and combine: two ranks each holding half of the experts (MoeWeights::first_expert)
// produce partial sums that add up to the whole block's output — bit for bit with k = 1 (every token's one expert
// is on one rank; the other contributes exactly 0, also to a token or a whole batch routed entirely elsewhere), and
// up to the addition order with k = 2 (the all-reduce adds the two ranks' sums, one process adds in routing order).
TEST(Moe, ExpertParallelHalvesAddUpToTheWholeBlock) {
  std::mt19937 rng(17);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (DType t : {DType::F32, DType::Q8_0}) {
    for (int64_t k : {1, 2}) {
      ModelConfig c;
      c.dim = 128, c.n_experts = 8, c.n_experts_used = k, c.expert_ff_dim = 64, c.norm_topk_prob = true;
      std::vector<Weights> store;
      MoeWeights whole, half[2];
      store.push_back(random_weights(DType::F32, c.n_experts, c.dim, rng));
      whole.router = half[0].router = half[1].router = store.back().m;
      for (int64_t e = 0; e < c.n_experts; ++e) {
        MoeWeights& h = half[e / 4];
        h.first_expert = e / 4 * 4;
        store.push_back(random_weights(t, c.expert_ff_dim, c.dim, rng));
        whole.gate.push_back(store.back().m), h.gate.push_back(store.back().m);
        store.push_back(random_weights(t, c.expert_ff_dim, c.dim, rng));
        whole.up.push_back(store.back().m), h.up.push_back(store.back().m);
        store.push_back(random_weights(t, c.dim, c.expert_ff_dim, rng));
        whole.down.push_back(store.back().m), h.down.push_back(store.back().m);
      }
      MoeWorkspace ws;
      for (int64_t T : {int64_t{1}, int64_t{7}, kMoeChunkTokens + 13}) {
        std::vector<float> xn(T * c.dim), out(T * c.dim);
        for (auto& v : xn) v = g(rng);
        moe_mlp(whole, c, xn.data(), T, ws, out.data());
        std::vector<float> part[2];
        for (int r = 0; r < 2; ++r) {  // stale values in the output buffer must not survive (a rank with no tokens)
          part[r].assign(T * c.dim, std::nanf(""));
          moe_mlp(half[r], c, xn.data(), T, ws, part[r].data());
        }
        for (int64_t i = 0; i < T * c.dim; ++i) {
          const float sum = part[0][i] + part[1][i];
          if (k == 1)
            ASSERT_EQ(sum, out[i]) << dtype_name(t) << " T " << T << " element " << i;
          else
            ASSERT_NEAR(sum, out[i], 1e-5f * std::max(1.0f, std::fabs(out[i])))
                << dtype_name(t) << " T " << T << " element " << i;
        }
      }
    }
  }
}

namespace {

// A copy of `src` with one u32 key changed, or without one tensor.
void rewrite(const std::string& src, const std::string& dst, const std::string& key, uint32_t value,
             const std::string& drop_tensor = "") {
  auto g = GgufFile::open(src);
  GgufWriter w;
  for (const auto& [k, v] : g->metadata())
    if (k == key)
      w.set_u32(k, value);
    else
      w.set_raw(k, v.raw);
  for (const auto& t : g->tensors())
    if (t.name != drop_tensor) w.add_tensor(t.name, t.dtype, t.shape, std::span<const uint8_t>(t.data, t.nbytes));
  w.write(dst);
}

std::string load_error(const std::string& path) {
  try {
    LlamaModel::load(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Moe, MalformedExpertModelsFailWithTheKeyOrTensorNamed) {
  const fs::path dir = fs::temp_directory_path() / ("kvik_moe_bad_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  SynthOptions o;
  o.out_path = (dir / "q3m.gguf").string();
  o.arch = "qwen3moe", o.experts = 4, o.experts_used = 2, o.expert_ff = 64, o.dim = 64, o.ff = 128;
  synth_llama_gguf(o);
  const std::string bad = (dir / "bad.gguf").string();
  rewrite(o.out_path, bad, "qwen3moe.expert_used_count", 5);
  EXPECT_NE(load_error(bad).find("expert_used_count' = 5 is out of range"), std::string::npos) << load_error(bad);
  rewrite(o.out_path, bad, "qwen3moe.expert_count", 0);
  EXPECT_NE(load_error(bad).find("expert_count' is missing"), std::string::npos) << load_error(bad);
  rewrite(o.out_path, bad, "", 0, "blk.1.ffn_down_exps.weight");
  EXPECT_NE(load_error(bad).find("'blk.1.ffn_down_exps.weight' is missing"), std::string::npos) << load_error(bad);
  rewrite(o.out_path, bad, "qwen3moe.expert_feed_forward_length", 32);
  EXPECT_NE(load_error(bad).find("'blk.0.ffn_gate_exps.weight' has shape [64, 64, 4], expected [64, 32, 4]"),
            std::string::npos)
      << load_error(bad);
  EXPECT_EQ(load_error(o.out_path), "");
  fs::remove_all(dir);
}

// Active parameters and the bytes one decode token reads count k of E experts per block.
TEST(Moe, ActiveParametersAndDecodeBytesCountOnlyRoutedExperts) {
  const fs::path dir = fs::temp_directory_path() / ("kvik_moe_params_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  SynthOptions o;
  o.out_path = (dir / "mix.gguf").string();
  o.arch = "mixtral", o.experts = 8, o.experts_used = 2, o.dim = 64, o.ff = 128, o.layers = 2;
  synth_llama_gguf(o);
  LoadOptions lo;
  lo.repack_weights = false;
  auto m = LlamaModel::load(o.out_path, lo);
  const int64_t expert_params = 3 * 64 * 128;  // gate, up, down of one expert
  EXPECT_EQ(m->parameter_count() - m->active_parameter_count(), 2 * 6 * expert_params);
  // F32 weights, not repacked: the decode bytes are the file's tensors less the embedding table and 6 of 8 experts.
  EXPECT_EQ(m->weight_bytes() - m->decode_bytes_per_token(), 512 * 64 * 4 + 2 * 6 * expert_params * 4);
  // kvik inspect says the same from the file alone, and the start-up log after loading.
  const auto r = kvik::test::run("inspect " + o.out_path);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("E            8  experts per block (mixture of experts), k = 2 used per token"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find(fmt::format("active parameters per token: {}", m->active_parameter_count())), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find(fmt::format("({}), active experts only", m->decode_bytes_per_token())), std::string::npos)
      << r.out;
  fs::remove_all(dir);
}

// kvik against llama.cpp, teacher-forced: llama.cpp's 256 greedy tokens go through kvik in one append; kvik's
// argmax must be llama.cpp's token at ≥ 99% of positions (F32), 97% (Q8_0) — the bounds of the dense parity
// tests — or 94% (Q4_K: mixtral_q4_k measures 94.9%, the dense Q4_0/Q4_K models 95-97%; see below), and the mean |Δp|
// over llama.cpp's top-5 ids stay ≤ 1e-3 (F32) / 0.01 (quantized). A MoE adds one effect dense models do not have:
// where two experts are a near-tie for the k-th place, the last-bit differences between the engines (f16 KV cache and
// flash attention there) can route a token to the other expert, and that token's whole MLP output changes. Measured
// (f32 KV cache, AVX-512 VNNI): F32 models agree 256/256 with mean |Δp| 3e-4 / 5e-4, yet one position of qwen3moe_f32
// deviates by 0.046 (its neighbours by < 0.002); the quantized ones 94.9-99.2% with mean |Δp| 0.005-0.009 and single
// positions up to 0.21. So the max is reported, not bounded, and a miss outside llama.cpp's top 3 (a flip that changes
// the token) is allowed once per quantized model, never for F32.
TEST(Moe, SynthModelsMatchLlamaCppTeacherForced) {
  const auto fx = test::read_fixture(kFixture, "tools/make_moe_ref_fixture.sh");
  const fs::path dir = fs::temp_directory_path() / ("kvik_moe_parity_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  ASSERT_GE(fx.at("models").size(), 6u);
  for (const auto& m : fx.at("models")) {
    const std::string name = m.at("name");
    SCOPED_TRACE("model " + name);
    SynthOptions o;
    ASSERT_TRUE(test::write_fixture_model(m, dir.string(), "tools/make_moe_ref_fixture.sh", &o));

    auto model = LlamaModel::load(o.out_path);
    const int64_t N = static_cast<int64_t>(m.at("generated").size()), V = model->config().vocab_size;
    ASSERT_EQ(N, 256);
    const auto logits = test::teacher_forced_logits(*model, m, std::getenv("MOE_F16") ? DType::F16 : DType::F32);
    const bool f32 = o.type == DType::F32;
    const double bound = f32 ? 0.99 : o.type == DType::Q8_0 ? 0.97 : 0.94, mean_dev_bound = f32 ? 1e-3 : 0.01;
    const test::Agreement a = test::agreement(name, logits, V, m, 0.02);
    EXPECT_GE(a.rate(), bound);
    EXPECT_LE(a.mean_dev, mean_dev_bound);
    EXPECT_LE(a.far_misses, f32 ? 0 : 1) << "misses outside llama.cpp's top 3";
    fs::remove(o.out_path);
  }
  fs::remove_all(dir);
}
