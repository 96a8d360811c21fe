// What one core can do with the AVX2 int8 product sequences of the packed kernels, with nothing else in the loop:
// weights from a 32 KB buffer and activations from L1, every sum in a register. The 4 tokens' activation rows are
// 1 KB apart, not 4 KB: some L1 caches serve loads 4 KB apart slowly, which would measure the cache, not the
// instructions (the kernels' rows are nb · 32 bytes apart and run alike at 2048-8224 columns).
// Per k-group, 16 rows (two ymm) × 4 tokens, as avx2_packed_q_impl.h's Q8_0 kernel:
//   avx2_signed  broadcast, vpsignb, vpmaddubsw, vpmaddwd (by 1), vpaddd per token and half (Q8_0 without VNNI, and
//                llama.cpp's AVX2 mul_sum_i8_pairs)
//   avx2_unsigned the same without vpsignb (what u8 weights against s8 activations would need, were there no
//                saturation)
//   avx_vnni     broadcast, vpdpbusd (only where the CPU has AVX-VNNI)
// GOPS = 2 × multiply-adds per second, median of 5 runs of about 0.3 s each; compare bench_matmul_packed's q8_0 GOPS
// (KVIK_ISA=avx2 / avx_vnni, --threads 1) to see how close the kernel is to its instruction sequence's limit.
//   bench_avx2_int8_ceiling
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"

namespace {

alignas(64) int8_t g_x[4][1024];
alignas(64) uint8_t g_w[32768];

#define KVIK_HALF(W, AW, ACC)                                    \
  "vpsignb %%" W ", %%ymm0, %%ymm15\n vpmaddubsw %%ymm15, %%" AW \
  ", %%ymm15\n vpmaddwd %%ymm2, %%ymm15, %%ymm15\n"              \
  " vpaddd %%ymm15, %%" ACC ", %%" ACC "\n"
#define KVIK_TOKEN(OFF, A0, A1) \
  "vpbroadcastd " OFF "(%[x]), %%ymm0\n" KVIK_HALF("ymm3", "ymm4", A0) KVIK_HALF("ymm11", "ymm12", A1)
#define KVIK_HALF_U(AW, ACC) \
  "vpmaddubsw %%ymm0, %%" AW ", %%ymm15\n vpmaddwd %%ymm2, %%ymm15, %%ymm15\n vpaddd %%ymm15, %%" ACC ", %%" ACC "\n"
#define KVIK_TOKEN_U(OFF, A0, A1) \
  "vpbroadcastd " OFF "(%[x]), %%ymm0\n" KVIK_HALF_U("ymm4", A0) KVIK_HALF_U("ymm12", A1)
#define KVIK_TOKEN_V(OFF, A0, A1)                                               \
  "vpbroadcastd " OFF "(%[x]), %%ymm0\n %{vex%} vpdpbusd %%ymm0, %%ymm4, %%" A0 \
  "\n %{vex%} vpdpbusd %%ymm0, %%ymm12, %%" A1 "\n"
#define KVIK_CLOBBERS                                                                                                  \
  "xmm0", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", \
      "xmm15"

enum class Seq { kSigned, kUnsigned, kVnni };

// One k-group (4 bytes of 16 rows) for 4 tokens: 256 multiply-adds.
template <Seq S>
inline void k_group(const int8_t* x, const uint8_t* w) {
  if constexpr (S == Seq::kSigned)
    asm volatile(
        "vpxor (%[w]), %%ymm2, %%ymm3\n vpabsb %%ymm3, %%ymm4\n vpxor 32(%[w]), %%ymm2, %%ymm11\n"
        " vpabsb %%ymm11, %%ymm12\n" KVIK_TOKEN("0", "ymm14", "ymm13") KVIK_TOKEN("1024", "ymm10", "ymm9")
            KVIK_TOKEN("2048", "ymm8", "ymm7") KVIK_TOKEN("3072", "ymm6", "ymm5")
        :
        : [x] "r"(x), [w] "r"(w)
        : KVIK_CLOBBERS);
  else if constexpr (S == Seq::kUnsigned)
    asm volatile("vmovdqa (%[w]), %%ymm4\n vmovdqa 32(%[w]), %%ymm12\n" KVIK_TOKEN_U("0", "ymm14", "ymm13")
                     KVIK_TOKEN_U("1024", "ymm10", "ymm9") KVIK_TOKEN_U("2048", "ymm8", "ymm7")
                         KVIK_TOKEN_U("3072", "ymm6", "ymm5")
                 :
                 : [x] "r"(x), [w] "r"(w)
                 : KVIK_CLOBBERS);
  else
    asm volatile("vmovdqa (%[w]), %%ymm4\n vmovdqa 32(%[w]), %%ymm12\n" KVIK_TOKEN_V("0", "ymm14", "ymm13")
                     KVIK_TOKEN_V("1024", "ymm10", "ymm9") KVIK_TOKEN_V("2048", "ymm8", "ymm7")
                         KVIK_TOKEN_V("3072", "ymm6", "ymm5")
                 :
                 : [x] "r"(x), [w] "r"(w)
                 : KVIK_CLOBBERS);
}

template <Seq S>
double gops() {
  constexpr int64_t kGroups = 1 << 22;  // about 0.3 s at 150 GOPS
  std::vector<double> runs;
  for (int r = 0; r < 5; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < kGroups; ++i) k_group<S>(&g_x[0][0] + 4 * (i & 255), g_w + 64 * (i & 511));
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    runs.push_back(2.0 * 256 * kGroups / s / 1e9);
  }
  std::sort(runs.begin(), runs.end());
  return runs[runs.size() / 2];
}

}  // namespace

int main() {
  if (!__builtin_cpu_supports("avx2")) {
    std::printf("{\"error\": \"the CPU has no AVX2\"}\n");
    return 1;
  }
  std::printf("{\"threads\": 1, \"avx2_signed_gops\": %.1f, \"avx2_unsigned_gops\": %.1f", gops<Seq::kSigned>(),
              gops<Seq::kUnsigned>());
  if (kvik::cpu_has_avx_vnni())
    std::printf(", \"avx_vnni_gops\": %.1f}\n", gops<Seq::kVnni>());
  else
    std::printf(", \"avx_vnni_gops\": null}\n");
}
