// AMX-INT8 and AMX-BF16 kernels (kernels/cpu/amx_gemm.h, amx_support.h).
//  - Over emulated tile instructions (amx_emulated_kernels.cpp, every CPU with AVX-512): every AMX entry equals the
//    x16 scalar reference bit for bit, for every token count 1..16, one to three groups (a pair and a single), and
//    the shapes of real models; matmul through a table with AMX entries equals matmul without them for every token
//    count 1..64 and is batch invariant (a token's row equals its row computed alone).
//  - Over the real instructions (only where amx_status() allows them; otherwise skipped, naming why): the same.
//  - The start-up decision: on a CPU without AMX the table is not chosen and the reason says so; KVIK_ISA=avx512
//    keeps an AMX CPU on AVX-512.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "amx_emulated_kernels.h"
#include "kernels/cpu/amx_support.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/packed.h"
#include "random_weights.h"
#include "run_kvik.h"

using namespace kvik;
using kvik::test::Acts;
using kvik::test::random_acts;
using kvik::test::random_weights;
using kvik::test::Weights;

namespace {

bool cpu_has_avx512() {
  __builtin_cpu_init();
  return avx512_kernels() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
}

bool is_k_quant(DType t) { return t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K; }

// Activation rows [t0, t0 + R) of a in the AMX-BF16 tile layout.
std::vector<uint16_t> bf16_tiles(const Acts& a, int64_t t0, int64_t R) {
  const int64_t row = bf16_blocks(a.n) * 2 * kBF16TileK;
  std::vector<uint16_t> tiles(R * row);
  for (int64_t t = 0; t < R; ++t) bf16_tile_activations(a.xb.data() + (t0 + t) * a.n, a.n, tiles.data() + t * row);
  return tiles;
}

// The scalar reference over G groups for R tokens: y[t·16G + 16g + i].
void reference(DType t, const uint8_t* packed, size_t gb, int64_t G, const Acts& a, int64_t R, float* y) {
  for (int64_t g = 0; g < G; ++g)
    for (int64_t t0 = 0; t0 < R; t0 += kPackMaxTokens) {
      const int64_t r = std::min(kPackMaxTokens, R - t0);
      float* out = y + t0 * 16 * G + 16 * g;
      const uint8_t* grp = packed + gb * g;
      switch (t) {
        case DType::Q8_0: gemm_q8_0_x16_ref(grp, a.n / kQK8_0, a.s8(t0), r, out, 16 * G); break;
        case DType::Q4_0: gemm_q4_0_x16_ref(grp, a.n / kQK8_0, a.s8(t0), r, out, 16 * G); break;
        case DType::IQ4_NL: gemm_iq4_nl_x16_ref(grp, a.n / kQK8_0, a.s8(t0), r, out, 16 * G); break;
        case DType::Q5_0: gemm_q5_0_x16_ref(grp, a.n / kQK8_0, a.s8(t0), r, out, 16 * G); break;
        case DType::Q4_1: gemm_q4_1_x16_ref(grp, a.n / kQK8_0, a.s8(t0), r, out, 16 * G); break;
        case DType::Q5_1: gemm_q5_1_x16_ref(grp, a.n / kQK8_0, a.s8(t0), r, out, 16 * G); break;
        case DType::Q4_K: gemm_q4_k_x16_ref(grp, a.n / kQK_K, a.k(t0), r, out, 16 * G); break;
        case DType::Q5_K: gemm_q5_k_x16_ref(grp, a.n / kQK_K, a.k(t0), r, out, 16 * G); break;
        case DType::BF16: gemm_bf16_x16_ref(grp, a.n, a.xb.data() + t0 * a.n, a.n, r, out, 16 * G); break;
        default: gemm_q6_k_x16_ref(grp, a.n / kQK_K, a.k(t0), r, out, 16 * G); break;
      }
    }
}

void run_amx(const CpuKernels& k, DType t, const uint8_t* packed, size_t gb, int64_t G, const Acts& a, int64_t R,
             float* y) {
  switch (t) {
    case DType::Q8_0: return k.amx_q8_0(packed, G, gb, a.n / kQK8_0, a.s8(), R, y, 16 * G);
    case DType::Q4_0: return k.amx_q4_0(packed, G, gb, a.n / kQK8_0, a.s8(), R, y, 16 * G);
    case DType::IQ4_NL: return k.amx_iq4_nl(packed, G, gb, a.n / kQK8_0, a.s8(), R, y, 16 * G);
    case DType::Q5_0: return k.amx_q5_0(packed, G, gb, a.n / kQK8_0, a.s8(), R, y, 16 * G);
    case DType::Q4_1: return k.amx_q4_1(packed, G, gb, a.n / kQK8_0, a.s8(), R, y, 16 * G);
    case DType::Q5_1: return k.amx_q5_1(packed, G, gb, a.n / kQK8_0, a.s8(), R, y, 16 * G);
    case DType::Q4_K: return k.amx_q4_k(packed, G, gb, a.n / kQK_K, a.k(), R, y, 16 * G);
    case DType::Q5_K: return k.amx_q5_k(packed, G, gb, a.n / kQK_K, a.k(), R, y, 16 * G);
    case DType::BF16: return k.amx_bf16(packed, G, gb, bf16_blocks(a.n), bf16_tiles(a, 0, R).data(), R, y, 16 * G);
    default: return k.amx_q6_k(packed, G, gb, a.n / kQK_K, a.k(), R, y, 16 * G);
  }
}

// Every AMX entry of table k against the reference: 1..3 groups, R = 1..16, two widths (BF16 also a partial last
// block and an odd width).
void expect_kernels_equal_reference(const CpuKernels& k, DType t) {
  std::mt19937 rng(29);
  const std::vector<int64_t> widths =
      t == DType::BF16 ? std::vector<int64_t>{100, 257, 2048} : std::vector<int64_t>{256, 2048};
  for (int64_t cols : widths) {
    for (int64_t G : {1, 2, 3}) {
      const Weights w = random_weights(t, 16 * G, cols, rng, false);
      const PackedBuffer p = pack_rows(w.m);
      ASSERT_TRUE(p);
      const size_t gb = packed_group_bytes(t, cols);
      const Acts a = random_acts(kAmxMaxTokens, cols, rng, false);
      std::vector<float> want(kAmxMaxTokens * 16 * G), got(want.size());
      reference(t, p.get(), gb, G, a, kAmxMaxTokens, want.data());
      for (int64_t R = 1; R <= kAmxMaxTokens; ++R) {
        std::fill(got.begin(), got.end(), -1.0f);
        run_amx(k, t, p.get(), gb, G, a, R, got.data());
        ASSERT_EQ(0, std::memcmp(want.data(), got.data(), sizeof(float) * R * 16 * G))
            << k.isa << " " << dtype_name(t) << " cols " << cols << " groups " << G << " R " << R;
      }
    }
  }
}

class AmxTypes : public ::testing::TestWithParam<DType> {};

TEST_P(AmxTypes, EmulatedTileKernelsEqualTheScalarReferenceBitForBit) {
  if (!cpu_has_avx512()) GTEST_SKIP() << "the AMX kernels' epilogue needs AVX-512, which this CPU lacks";
  const int64_t configs = test::emulated_tile_configs();
  expect_kernels_equal_reference(test::emulated_amx_kernels(), GetParam());
  EXPECT_GT(test::emulated_tile_configs(), configs);  // the kernels really ran on the (emulated) tiles
}

// The real tiles where amx_status() allows them (AMX-BF16 for BF16), skipping with the reason otherwise.
const CpuKernels* hardware_tiles(DType t, std::string& why) {
  const AmxStatus& s = amx_status();
  if (t == DType::BF16) {
    if (!s.bf16_usable) why = "AMX-BF16 not usable here: " + s.bf16_reason;
    return s.bf16_usable ? amx_kernels(true) : nullptr;
  }
  if (!s.usable) why = "AMX-INT8 not usable here: " + s.reason;
  return s.usable ? amx_kernels(false) : nullptr;
}

TEST_P(AmxTypes, HardwareTileKernelsEqualTheScalarReferenceBitForBit) {
  std::string why;
  const CpuKernels* k = hardware_tiles(GetParam(), why);
  if (!k) GTEST_SKIP() << why;
  expect_kernels_equal_reference(*k, GetParam());
}

// matmul with the AMX entries (emulated, or real where usable) against matmul without them: every token count
// 1..64 bit for bit, and each token's row equal to the row computed alone (batch invariance across the crossover).
void expect_matmul_unchanged(const CpuKernels& with_amx, DType t) {
  std::mt19937 rng(31);
  std::normal_distribution<float> g(0.0f, 1.0f);
  // Five full groups and a partial one; BF16 with a partial last block.
  const int64_t rows = 16 * 5 + 7, cols = is_k_quant(t) ? 512 : t == DType::BF16 ? 200 : 256;
  Weights plain = random_weights(t, rows, cols, rng, false);
  WeightMatrix packed = plain.m;
  const PackedBuffer owner = pack_rows(packed);
  packed.packed = owner.get();
  packed.packed_group_bytes = packed_group_bytes(t, cols);
  std::vector<float> x(64 * cols);
  for (auto& v : x) v = g(rng);
  std::vector<float> alone(64 * rows);
  override_cpu_kernels_for_testing(avx512_kernels());
  for (int64_t i = 0; i < 64; ++i) matmul(x.data() + i * cols, 1, packed, alone.data() + i * rows);
  override_cpu_kernels_for_testing(&with_amx);
  for (int64_t T = 1; T <= 64; ++T) {
    std::vector<float> y(T * rows);
    matmul(x.data(), T, packed, y.data());
    ASSERT_EQ(0, std::memcmp(y.data(), alone.data(), sizeof(float) * T * rows)) << dtype_name(t) << " T " << T;
  }
  override_cpu_kernels_for_testing(nullptr);
}

TEST_P(AmxTypes, MatmulOnEmulatedTilesIsBatchInvariantForEveryTokenCount) {
  if (!cpu_has_avx512()) GTEST_SKIP() << "the AMX kernels' epilogue needs AVX-512, which this CPU lacks";
  expect_matmul_unchanged(test::emulated_amx_kernels(), GetParam());
}

TEST_P(AmxTypes, MatmulOnHardwareTilesIsBatchInvariantForEveryTokenCount) {
  std::string why;
  const CpuKernels* k = hardware_tiles(GetParam(), why);
  if (!k) GTEST_SKIP() << why;
  expect_matmul_unchanged(*k, GetParam());
}

INSTANTIATE_TEST_SUITE_P(AmxWeightTypes, AmxTypes,
                         ::testing::Values(DType::Q8_0, DType::Q4_0, DType::IQ4_NL, DType::Q5_0, DType::Q4_1,
                                           DType::Q5_1, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::BF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// The start-up decision as a user sees it: the table cpu_kernels() chose and the reason AMX is not used.
TEST(Amx, StartupChoiceFollowsTheCpuAndKvikIsa) {
  const AmxStatus& s = amx_status();
  const char* force = std::getenv("KVIK_ISA");
  if (s.usable && !force) {
    EXPECT_EQ(cpu_kernels().isa, s.bf16_usable ? "amx_int8+amx_bf16+avx512_vnni" : "amx_int8+avx512_vnni");
    EXPECT_EQ(cpu_kernels().amx_bf16 != nullptr, s.bf16_usable);
  } else {
    EXPECT_EQ(cpu_kernels().amx_q8_0, nullptr);
    EXPECT_EQ(cpu_kernels().amx_bf16, nullptr);
    if (!s.usable) EXPECT_FALSE(s.reason.empty());
  }
  if (!s.bf16_usable) EXPECT_FALSE(s.bf16_reason.empty());
  EXPECT_TRUE(!s.bf16_usable || s.usable);  // AMX-BF16 is decided only after AMX-INT8
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("amx-int8")) {
    EXPECT_FALSE(s.cpu_has_amx);
    EXPECT_EQ(s.reason, "the CPU has no AMX-INT8");
    EXPECT_EQ(s.bf16_reason, "the CPU has no AMX-INT8");
  }
}

// KVIK_ISA caps the table a user's run chooses, and the start-up log names it (and, on an AMX CPU kept below AMX,
// says why).
TEST(Amx, KvikIsaCapsTheKernelsTheLogNames) {
  const std::string model = KVIK_SHARED_DIR "/models/stories260K.gguf";
  const std::string args = "generate -m " + model + " -p 'Once' -n 1 --threads 1";
  const test::Result forced = [&] {
    setenv("KVIK_ISA", "generic", 1);
    test::Result r = test::run(args);
    unsetenv("KVIK_ISA");
    return r;
  }();
  ASSERT_EQ(forced.code, 0) << forced.out;
  EXPECT_NE(forced.out.find("CPU kernels: generic,"), std::string::npos) << forced.out;
  const test::Result chosen = test::run(args);
  ASSERT_EQ(chosen.code, 0) << chosen.out;
  EXPECT_NE(chosen.out.find("CPU kernels: " + std::string(cpu_kernels().isa) + ","), std::string::npos) << chosen.out;
  if (amx_status().usable) {
    setenv("KVIK_ISA", "avx512", 1);
    const test::Result capped = test::run(args);
    unsetenv("KVIK_ISA");
    EXPECT_NE(capped.out.find("CPU kernels: avx512_vnni,"), std::string::npos) << capped.out;
    EXPECT_NE(capped.out.find("AMX-INT8 not used: KVIK_ISA"), std::string::npos) << capped.out;
  }
}

}  // namespace
