// AMX-INT8 and AMX-BF16 kernels (kernels/cpu/amx_gemm.h, amx_support.h).
//  - Over emulated tile instructions (amx_emulated_kernels.cpp, every CPU with AVX-512): every AMX entry equals the
//    x16 scalar reference bit for bit, for every token count 1..16, one to three groups (a pair and a single), and
//    the shapes of real models; matmul through a table with AMX entries equals matmul without them for every token
//    count 1..64 and is batch invariant (a token's row equals its row computed alone).
//  - Over the real instructions (only where amx_status() allows them; otherwise skipped, naming why): the same.
//  - A BF16 model end to end: the same logits, bit for bit, on the FMA, vdpbf16ps and (emulated) AMX-BF16 kernels.
//  - The start-up self-test (amx_self_test.h): it passes over emulated tiles (and real ones where usable), fails
//    naming the type when any one type's AMX entry is wrong (one ulp off, last token unwritten, another type's
//    kernel; in the forked form also a kernel that dies), and covers exactly the table's non-null AMX-INT8 entries;
//    the AMX-BF16 one likewise passes, and fails on a wrong or dying kernel.
//  - The start-up decision: on a CPU without AMX the table is not chosen and the reason says so; KVIK_ISA=avx512
//    keeps an AMX CPU on AVX-512.
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "amx_emulated_kernels.h"
#include "engine/engine_core.h"
#include "engine/single_sequence.h"
#include "kernels/cpu/amx_self_test.h"
#include "kernels/cpu/amx_support.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/packed.h"
#include "model/llama.h"
#include "model/synth.h"
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

// Activation rows [t0, t0 + R) of a in the AMX-BF16 tile layout (bf16 pairs in input order).
std::vector<uint16_t> bf16_tiles(const Acts& a, int64_t t0, int64_t R) {
  const int64_t row = bf16_blocks(a.n) * kBF16TileK;
  std::vector<uint16_t> tiles(R * row);
  for (int64_t t = 0; t < R; ++t)
    bf16_pair_activations(a.xb.data() + (t0 + t) * a.n, a.n, false, tiles.data() + t * row);
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
    return s.bf16_usable ? amx_kernels(true, false) : nullptr;
  }
  if (!s.usable) why = "AMX-INT8 not usable here: " + s.reason;
  return s.usable ? amx_kernels(false, false) : nullptr;
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
  struct Restore {  // a failed ASSERT returns early: later tests must see the CPU's own table again
    ~Restore() { override_cpu_kernels_for_testing(nullptr); }
  } restore;
  override_cpu_kernels_for_testing(avx512_kernels());
  for (int64_t i = 0; i < 64; ++i) matmul(x.data() + i * cols, 1, packed, alone.data() + i * rows);
  override_cpu_kernels_for_testing(&with_amx);
  for (int64_t T = 1; T <= 64; ++T) {
    std::vector<float> y(T * rows);
    matmul(x.data(), T, packed, y.data());
    ASSERT_EQ(0, std::memcmp(y.data(), alone.data(), sizeof(float) * T * rows)) << dtype_name(t) << " T " << T;
  }
}

TEST_P(AmxTypes, MatmulOnEmulatedTilesIsBatchInvariantForEveryTokenCount) {
  if (!cpu_has_avx512()) GTEST_SKIP() << "the AMX kernels' epilogue needs AVX-512, which this CPU lacks";
  expect_matmul_unchanged(test::emulated_amx_kernels(), GetParam());
}

// BF16 as it runs on AMX CPUs (which have AVX512_BF16): tiles for whole token tiles, the vdpbf16ps kernel for the
// rest, both equal to the FMA kernel bit for bit.
TEST(Amx, Bf16MatmulOnEmulatedTilesAndVdpbf16psIsBatchInvariant) {
  __builtin_cpu_init();
  if (!cpu_has_avx512() || !__builtin_cpu_supports("avx512bf16"))
    GTEST_SKIP() << "needs AVX-512 with AVX512_BF16, which this CPU lacks";
  expect_matmul_unchanged(test::emulated_amx_kernels(true), DType::BF16);
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

// The start-up self-test (amx_self_test.h). Wrong AMX kernels, each standing in for a tile kernel that computes
// wrongly on some CPU: the real kernel's result with one output one ulp off, the real kernel leaving the last token
// unwritten, another type's kernel whose packed layout is no larger (it reads only inside the weight), and one that
// dies (std::abort, for the forked form: ASan would turn a SIGSEGV into an exit code).
AmxGemmQ8S* g_real = nullptr;
AmxGemmQ8KS* g_real_k = nullptr;
enum class Wrong { kOneUlp, kLastTokenUnwritten, kDies };

template <class Act, Wrong W>
void wrong_kernel(const uint8_t* groups, int64_t G, size_t gb, int64_t nb, const Act& x, int64_t R, float* y,
                  int64_t ys) {
  if (W == Wrong::kDies) std::abort();
  if constexpr (std::is_same_v<Act, ActQ8S>)
    g_real(groups, G, gb, nb, x, W == Wrong::kLastTokenUnwritten ? R - 1 : R, y, ys);
  else
    g_real_k(groups, G, gb, nb, x, W == Wrong::kLastTokenUnwritten ? R - 1 : R, y, ys);
  float& last = y[(R - 1) * ys + kPackRows * G - 1];
  if (W == Wrong::kOneUlp) last = std::nextafter(last, INFINITY);
}

// `amx` with the entry of type e replaced by the wrong kernel W (the real one kept in g_real / g_real_k).
template <Wrong W>
CpuKernels with_wrong(const CpuKernels& amx, const AmxInt8Entry& e) {
  CpuKernels k = amx;
  if (e.amx_k)
    g_real_k = amx.*e.amx_k, k.*e.amx_k = wrong_kernel<ActQ8KS, W>;
  else
    g_real = amx.*e.amx, k.*e.amx = wrong_kernel<ActQ8S, W>;
  return k;
}

// `amx` with e's entry replaced by another type's whose packed group is no larger (so it reads only inside e's
// weight); found = false for Q4_K (no K-quant is smaller).
CpuKernels with_other_types_kernel(const CpuKernels& amx, const AmxInt8Entry& e, bool& found) {
  const std::map<DType, DType> other = {{DType::Q8_0, DType::Q4_0},   {DType::Q4_0, DType::IQ4_NL},
                                        {DType::IQ4_NL, DType::Q4_0}, {DType::Q5_0, DType::Q4_0},
                                        {DType::Q4_1, DType::Q4_0},   {DType::Q5_1, DType::Q5_0},
                                        {DType::Q5_K, DType::Q4_K},   {DType::Q6_K, DType::Q5_K}};
  CpuKernels k = amx;
  found = other.count(e.type) != 0;
  if (!found) return k;
  for (const AmxInt8Entry& o : amx_int8_entries()) {
    if (o.type != other.at(e.type)) continue;
    EXPECT_GE(packed_group_bytes(e.type, 512), packed_group_bytes(o.type, 512));
    if (e.amx_k)
      k.*e.amx_k = amx.*o.amx_k;
    else
      k.*e.amx = amx.*o.amx;
  }
  return k;
}

std::string differ_message(DType t) {
  return "the AMX self-test's " + std::string(dtype_name(t)) + " results differ from the AVX-512 kernels'";
}

// The self-test of `amx` (a table whose every entry is right) passes, and fails naming the type when any one type's
// entry is replaced by a wrong kernel; the types before it passed, the ones after it did not run.
void expect_self_test_catches_every_wrong_type(const CpuKernels& amx) {
  const CpuKernels& base = *avx512_kernels();
  AmxInt8SelfTest test;
  int running = -1;
  ASSERT_EQ(test.run(base, amx, &running), 0) << amx.isa;
  EXPECT_EQ(running, static_cast<int>(amx_int8_entries().size()) - 1);  // every type ran
  for (size_t i = 0; i < amx_int8_entries().size(); ++i) {
    const AmxInt8Entry& e = amx_int8_entries()[i];
    SCOPED_TRACE(std::string(amx.isa) + " " + std::string(dtype_name(e.type)));
    bool has_other = false;
    const CpuKernels other = with_other_types_kernel(amx, e, has_other);
    std::vector<CpuKernels> wrongs = {with_wrong<Wrong::kOneUlp>(amx, e),
                                      with_wrong<Wrong::kLastTokenUnwritten>(amx, e)};
    if (has_other) wrongs.push_back(other);
    for (size_t w = 0; w < wrongs.size(); ++w) {
      running = -1;
      const int code = test.run(base, wrongs[w], &running);
      EXPECT_EQ(code, static_cast<int>(i) + 1) << "wrong kernel " << w;
      EXPECT_EQ(running, static_cast<int>(i)) << "wrong kernel " << w;
      EXPECT_EQ(amx_self_test_failure(code), differ_message(e.type)) << "wrong kernel " << w;
    }
  }
  EXPECT_EQ(test.run(base, amx), 0);  // the same data, checked again: nothing was left behind
}

TEST(AmxSelfTest, PassesOnEmulatedTilesAndNamesEachWrongType) {
  if (!cpu_has_avx512()) GTEST_SKIP() << "the AMX kernels' epilogue needs AVX-512, which this CPU lacks";
  const int64_t configs = test::emulated_tile_configs();
  expect_self_test_catches_every_wrong_type(test::emulated_amx_kernels());
  EXPECT_GT(test::emulated_tile_configs(), configs);  // the kernels really ran on the (emulated) tiles
}

TEST(AmxSelfTest, PassesOnHardwareTilesAndNamesEachWrongType) {
  if (!amx_status().usable) GTEST_SKIP() << "AMX-INT8 not usable here: " << amx_status().reason;
  expect_self_test_catches_every_wrong_type(*amx_kernels(false, false));
}

// The start-up cost of the self-test's body (the data it builds and one run over every type), logged; the forked
// form adds one fork. Emulated tiles are far slower than real ones: this bounds the run from above.
TEST(AmxSelfTest, StartupCostIsSmall) {
  if (!cpu_has_avx512()) GTEST_SKIP() << "the AMX kernels' epilogue needs AVX-512, which this CPU lacks";
  const auto t0 = std::chrono::steady_clock::now();
  AmxInt8SelfTest test;
  const auto t1 = std::chrono::steady_clock::now();
  EXPECT_EQ(test.run(*avx512_kernels(), test::emulated_amx_kernels()), 0);
  const auto t2 = std::chrono::steady_clock::now();
  EXPECT_EQ(amx_int8_self_test_in_child(*avx512_kernels(), test::emulated_amx_kernels()), "");
  const auto t3 = std::chrono::steady_clock::now();
  const auto ms = [](auto d) { return std::chrono::duration<double, std::milli>(d).count(); };
  std::printf("AMX-INT8 self-test, %zu types: data %.2f ms, run (emulated tiles) %.2f ms, forked %.2f ms\n",
              amx_int8_entries().size(), ms(t1 - t0), ms(t2 - t1), ms(t3 - t2));
}

// The forked form amx_status() uses: a wrong result and a dying kernel each leave a reason that names the type.
TEST(AmxSelfTest, ForkedSelfTestNamesTheTypeThatDifferedOrDied) {
  if (!cpu_has_avx512()) GTEST_SKIP() << "the AMX kernels' epilogue needs AVX-512, which this CPU lacks";
  const CpuKernels& emulated = test::emulated_amx_kernels();
  for (DType t : {DType::Q8_0, DType::Q5_1, DType::Q5_K}) {
    const AmxInt8Entry* e = nullptr;
    for (const AmxInt8Entry& x : amx_int8_entries())
      if (x.type == t) e = &x;
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(amx_int8_self_test_in_child(*avx512_kernels(), with_wrong<Wrong::kOneUlp>(emulated, *e)),
              differ_message(t));
    EXPECT_EQ(amx_int8_self_test_in_child(*avx512_kernels(), with_wrong<Wrong::kDies>(emulated, *e)),
              std::string("the AMX self-test died with signal ") + strsignal(SIGABRT) + " while testing the " +
                  std::string(dtype_name(t)) + " kernels");
  }
}

// The AMX-BF16 self-test over `amx` (whose amx_bf16 is right): it passes, and fails on an entry one ulp off or
// leaving the last token unwritten; forked, it also names a kernel that dies.
decltype(CpuKernels::amx_bf16) g_real_bf16 = nullptr;

template <Wrong W>
void wrong_bf16(const uint8_t* groups, int64_t G, size_t gb, int64_t nblk, const uint16_t* x, int64_t R, float* y,
                int64_t ys) {
  if (W == Wrong::kDies) std::abort();
  g_real_bf16(groups, G, gb, nblk, x, W == Wrong::kLastTokenUnwritten ? R - 1 : R, y, ys);
  float& last = y[(R - 1) * ys + kPackRows * G - 1];
  if (W == Wrong::kOneUlp) last = std::nextafter(last, INFINITY);
}

template <Wrong W>
CpuKernels with_wrong_bf16(const CpuKernels& amx) {
  CpuKernels k = amx;
  g_real_bf16 = amx.amx_bf16, k.amx_bf16 = wrong_bf16<W>;
  return k;
}

void expect_bf16_self_test_catches_wrong_kernels(const CpuKernels& amx) {
  const CpuKernels& base = *avx512_kernels();
  ASSERT_NE(amx.amx_bf16, nullptr) << amx.isa;
  AmxBf16SelfTest test;
  EXPECT_EQ(test.run(base, amx), 0) << amx.isa;
  EXPECT_EQ(test.run(base, with_wrong_bf16<Wrong::kOneUlp>(amx)), 1) << amx.isa;
  EXPECT_EQ(test.run(base, with_wrong_bf16<Wrong::kLastTokenUnwritten>(amx)), 1) << amx.isa;
  EXPECT_EQ(amx_bf16_self_test_in_child(base, amx), "") << amx.isa;
  EXPECT_EQ(amx_bf16_self_test_in_child(base, with_wrong_bf16<Wrong::kOneUlp>(amx)),
            "the AMX-BF16 self-test's results differ from the AVX-512 kernels'");
  EXPECT_EQ(amx_bf16_self_test_in_child(base, with_wrong_bf16<Wrong::kDies>(amx)),
            std::string("the AMX-BF16 self-test died with signal ") + strsignal(SIGABRT));
}

TEST(AmxSelfTest, Bf16PassesOnEmulatedTilesAndFailsOnAWrongKernel) {
  if (!cpu_has_avx512()) GTEST_SKIP() << "the AMX kernels' epilogue needs AVX-512, which this CPU lacks";
  expect_bf16_self_test_catches_wrong_kernels(test::emulated_amx_kernels());
}

TEST(AmxSelfTest, Bf16PassesOnHardwareTilesAndFailsOnAWrongKernel) {
  if (!amx_status().bf16_usable) GTEST_SKIP() << "AMX-BF16 not usable here: " << amx_status().bf16_reason;
  expect_bf16_self_test_catches_wrong_kernels(*amx_kernels(true, false));
}

// Every non-null AMX-INT8 entry of the AMX tables is self-tested: the words in which a table with the AMX entries
// differs from the AVX-512 table it was built over (its name and the AMX-BF16 entry aside) are exactly the entries of
// amx_int8_entries(). A type given an amx_* entry later without a self-test fails here.
std::set<size_t> amx_words(const CpuKernels& amx, const CpuKernels& base) {
  static_assert(sizeof(CpuKernels) % sizeof(uintptr_t) == 0);
  std::array<uintptr_t, sizeof(CpuKernels) / sizeof(uintptr_t)> a{}, b{};
  std::memcpy(a.data(), &amx, sizeof(CpuKernels));
  std::memcpy(b.data(), &base, sizeof(CpuKernels));
  const auto offset = [&](const void* field) {
    return static_cast<size_t>(static_cast<const char*>(field) - reinterpret_cast<const char*>(&amx));
  };
  std::set<size_t> words;
  for (size_t i = 0; i < a.size(); ++i) {
    const size_t off = i * sizeof(uintptr_t);
    const bool isa = off >= offset(&amx.isa) && off < offset(&amx.isa) + sizeof(amx.isa);
    if (a[i] != b[i] && !isa && off != offset(&amx.amx_bf16)) words.insert(off);
  }
  return words;
}

TEST(AmxSelfTest, CoversEveryAmxInt8EntryOfTheTable) {
  if (!cpu_has_avx512()) GTEST_SKIP() << "the AMX tables are built over the AVX-512 one, which this CPU lacks";
  std::vector<std::pair<const CpuKernels*, const CpuKernels*>> tables = {
      {&test::emulated_amx_kernels(), avx512_kernels()}};
  if (amx_kernels(false, false)) tables.emplace_back(amx_kernels(false, false), avx512_kernels());
  for (auto [amx, base] : tables) {
    std::set<size_t> tested;
    std::set<DType> types;
    for (const AmxInt8Entry& e : amx_int8_entries()) {
      EXPECT_TRUE(types.insert(e.type).second) << dtype_name(e.type) << " listed twice";
      EXPECT_NE(e.amx == nullptr, e.amx_k == nullptr) << dtype_name(e.type);  // one activation form each
      EXPECT_TRUE(e.amx ? base->*e.x16 != nullptr : base->*e.x16_k != nullptr) << dtype_name(e.type);
      const void* field = e.amx ? static_cast<const void*>(&(amx->*e.amx)) : static_cast<const void*>(&(amx->*e.amx_k));
      tested.insert(static_cast<size_t>(static_cast<const char*>(field) - reinterpret_cast<const char*>(amx)));
    }
    EXPECT_EQ(amx_words(*amx, *base), tested) << amx->isa;
  }
}

// The start-up decision as a user sees it: the table cpu_kernels() chose and the reason AMX is not used.
TEST(Amx, StartupChoiceFollowsTheCpuAndKvikIsa) {
  const AmxStatus& s = amx_status();
  const char* force = std::getenv("KVIK_ISA");
  if (s.usable && !force) {
    __builtin_cpu_init();
    const std::string dp = __builtin_cpu_supports("avx512bf16") ? "+avx512_bf16" : "";
    EXPECT_EQ(cpu_kernels().isa, (s.bf16_usable ? "amx_int8+amx_bf16+avx512_vnni" : "amx_int8+avx512_vnni") + dp);
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

// kvik run with KVIK_ISA=isa (the test's own KVIK_ISA, if any, restored after).
test::Result run_with_isa(const char* isa, const std::string& args) {
  const char* outer = std::getenv("KVIK_ISA");
  const std::string saved = outer ? outer : "";
  setenv("KVIK_ISA", isa, 1);
  test::Result r = test::run(args);
  outer ? setenv("KVIK_ISA", saved.c_str(), 1) : unsetenv("KVIK_ISA");
  return r;
}

// KVIK_ISA caps the table a user's run chooses, and the start-up log names it (and, on an AMX CPU kept below AMX,
// says why); on a CPU with AVX512_BF16, avx512 keeps the FMA table and avx512_bf16 names the vdpbf16ps one.
TEST(Amx, KvikIsaCapsTheKernelsTheLogNames) {
  const std::string model = KVIK_SOURCE_DIR "/models/stories260K.gguf";
  const std::string args = "generate -m " + model + " -p 'Once' -n 1 --threads 1";
  const test::Result forced = run_with_isa("generic", args);
  ASSERT_EQ(forced.code, 0) << forced.out;
  EXPECT_NE(forced.out.find("CPU kernels: generic,"), std::string::npos) << forced.out;
  const test::Result chosen = test::run(args);
  ASSERT_EQ(chosen.code, 0) << chosen.out;
  EXPECT_NE(chosen.out.find("CPU kernels: " + std::string(cpu_kernels().isa) + ","), std::string::npos) << chosen.out;
  if (amx_status().usable) {
    const test::Result capped = run_with_isa("avx512", args);
    EXPECT_NE(capped.out.find("CPU kernels: avx512_vnni,"), std::string::npos) << capped.out;
    EXPECT_NE(capped.out.find("AMX-INT8 not used: KVIK_ISA"), std::string::npos) << capped.out;
  }
  __builtin_cpu_init();
  if (cpu_has_avx512() && __builtin_cpu_supports("avx512bf16")) {
    const test::Result fma = run_with_isa("avx512", args);
    EXPECT_NE(fma.out.find("CPU kernels: avx512_vnni,"), std::string::npos) << fma.out;
    const test::Result dp = run_with_isa("avx512_bf16", args);
    EXPECT_NE(dp.out.find("CPU kernels: avx512_vnni+avx512_bf16,"), std::string::npos) << dp.out;
  }
}

// A BF16 model end to end: the logits of a 20-token prompt and 4 decode steps are the same bits on every BF16
// kernel: the FMA table, the vdpbf16ps one, and AMX-BF16 (emulated) over either (tiles take the prompt's first 16
// tokens, the x16 kernels the rest and the decode steps).
std::vector<std::vector<float>> bf16_run(LlamaModel& m, const CpuKernels& k) {
  override_cpu_kernels_for_testing(&k);
  SingleSequence s(m, 64);
  std::vector<int32_t> prompt(20);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>(1 + (i * 37) % 500);
  std::vector<std::vector<float>> out = {s.append(prompt, static_cast<int64_t>(prompt.size()))};
  for (int step = 0; step < 4; ++step) {
    const int32_t tok = static_cast<int32_t>(1 + (step * 101) % 500);
    out.push_back(s.append(std::span<const int32_t>(&tok, 1)));
  }
  override_cpu_kernels_for_testing(nullptr);
  return out;
}

TEST(Amx, Bf16ModelLogitsAreTheSameBitsOnEveryBf16Kernel) {
  __builtin_cpu_init();
  if (!cpu_has_avx512() || !__builtin_cpu_supports("avx512bf16"))
    GTEST_SKIP() << "needs AVX-512 with AVX512_BF16, which this CPU lacks";
  SynthOptions o;
  o.out_path = ::testing::TempDir() + "kvik_amx_bf16_model.gguf";
  o.dim = 128, o.layers = 2, o.heads = 8, o.kv_heads = 2, o.ff = 256, o.vocab = 512, o.context = 1024, o.seed = 61;
  o.type = DType::BF16;
  synth_llama_gguf(o);
  EngineConfig cfg;
  cfg.repack_weights = true;
  auto m = load_model(o.out_path, cfg);
  const int64_t configs = test::emulated_tile_configs();
  const auto want = bf16_run(*m, *avx512_kernels());
  for (const CpuKernels* k :
       {avx512_bf16_kernels(), &test::emulated_amx_kernels(false), &test::emulated_amx_kernels(true)}) {
    const auto got = bf16_run(*m, *k);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_EQ(0, std::memcmp(want[i].data(), got[i].data(), want[i].size() * sizeof(float)))
          << k->isa << " call " << i;
  }
  EXPECT_GT(test::emulated_tile_configs(), configs);  // the weights were packed and the prompt ran on the tiles
}

}  // namespace
