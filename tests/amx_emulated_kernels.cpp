// The AMX kernels (kernels/cpu/amx_gemm.h) over a software model of the tile instructions, so their tile logic is
// tested on every CPU with AVX-512. The model follows Intel's pseudocode for LDTILECFG (palette 1), TILELOADD,
// TILEZERO, TDPBSUD, TDPBF16PS (fp32 adds of each pair's two products in order, round to nearest even, denormal
// inputs and results as zero) and TILESTORED, and checks the shape rules whose violation faults on hardware
// (rows ≤ 16, colsb ≤ 64, A.colsb = 4·B.rows, C.colsb = B.colsb, C.rows = A.rows). Compiled with the AVX-512 flags (the
// kernels' epilogue); call only where the CPU has AVX-512.
#include "amx_emulated_kernels.h"

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/cpu/amx_gemm.h"

namespace kvik::test {
namespace {

struct TileState {
  uint8_t data[8][16][64] = {};
  int rows[8] = {}, colsb[8] = {};
  bool configured = false;
};
thread_local TileState g_tiles;
thread_local int64_t g_configs = 0;

[[noreturn]] void fault(const std::string& what) { throw std::logic_error("emulated AMX fault: " + what); }

void check_tile(int t) {
  if (!g_tiles.configured) fault("tile instruction before ldtilecfg");
  if (g_tiles.rows[t] < 1 || g_tiles.rows[t] > 16 || g_tiles.colsb[t] < 4 || g_tiles.colsb[t] > 64)
    fault("tile " + std::to_string(t) + " is not configured");
}

// M, K, N of C [M][N] += A [M][K] · B [K][N] (in 4-byte units), after the shape rules whose violation faults on
// hardware.
struct DotShape {
  int M, K, N;
};
DotShape dot_shape(int C, int A, int B, const char* instruction) {
  check_tile(C), check_tile(A), check_tile(B);
  const int M = g_tiles.rows[C];
  if (g_tiles.colsb[A] != 4 * g_tiles.rows[B] || g_tiles.colsb[C] != g_tiles.colsb[B] || g_tiles.rows[A] != M)
    fault(std::string(instruction) + " with inconsistent tile shapes");
  return {M, g_tiles.colsb[A] / 4, g_tiles.colsb[C] / 4};
}

struct EmulatedTiles {
  static void configure(int R, int ka) {
    if (R < 1 || R > 16 || ka < 4 || ka > 64 || ka % 4) fault("bad shape R " + std::to_string(R));
    g_tiles = TileState{};
    g_tiles.rows[amx::kA] = R, g_tiles.colsb[amx::kA] = ka;
    for (int t : {amx::kB0, amx::kB1}) g_tiles.rows[t] = ka / 4, g_tiles.colsb[t] = 64;
    for (int t : {amx::kC0, amx::kC1}) g_tiles.rows[t] = R, g_tiles.colsb[t] = 64;
    g_tiles.configured = true;
    ++g_configs;
  }
  template <int T>
  static void load(const void* p, int64_t stride) {
    check_tile(T);
    for (int r = 0; r < 16; ++r) {
      std::memset(g_tiles.data[T][r], 0, 64);
      if (r < g_tiles.rows[T])
        std::memcpy(g_tiles.data[T][r], static_cast<const uint8_t*>(p) + r * stride, g_tiles.colsb[T]);
    }
  }
  template <int T>
  static void zero() {
    check_tile(T);
    std::memset(g_tiles.data[T], 0, sizeof(g_tiles.data[T]));
  }
  template <int C, int A, int B>
  static void dot() {
    const auto [M, K, N] = dot_shape(C, A, B, "tdpbsud");
    for (int m = 0; m < M; ++m)
      for (int n = 0; n < N; ++n) {
        int32_t acc;
        std::memcpy(&acc, &g_tiles.data[C][m][4 * n], 4);
        for (int k = 0; k < K; ++k)
          for (int e = 0; e < 4; ++e)  // signed byte of A times unsigned byte of B
            acc += static_cast<int32_t>(static_cast<int8_t>(g_tiles.data[A][m][4 * k + e])) *
                   static_cast<int32_t>(g_tiles.data[B][k][4 * n + e]);
        std::memcpy(&g_tiles.data[C][m][4 * n], &acc, 4);
      }
  }
  template <int C, int A, int B>
  static void dot_bf16() {
    const auto [M, K, N] = dot_shape(C, A, B, "tdpbf16ps");
    const auto flush = [](float v) { return std::fpclassify(v) == FP_SUBNORMAL ? std::copysign(0.0f, v) : v; };
    const auto bf16 = [&](const uint8_t* p) {
      uint32_t bits = 0;
      std::memcpy(reinterpret_cast<uint8_t*>(&bits) + 2, p, 2);
      float v;
      std::memcpy(&v, &bits, 4);
      return flush(v);
    };
    for (int m = 0; m < M; ++m)
      for (int n = 0; n < N; ++n) {
        float acc;
        std::memcpy(&acc, &g_tiles.data[C][m][4 * n], 4);
        for (int k = 0; k < K; ++k)
          for (int e = 0; e < 2; ++e) {  // the pair's even element, then its odd one
            const float prod =
                flush(bf16(&g_tiles.data[A][m][4 * k + 2 * e]) * bf16(&g_tiles.data[B][k][4 * n + 2 * e]));
            acc = flush(acc + prod);
          }
        std::memcpy(&g_tiles.data[C][m][4 * n], &acc, 4);
      }
  }
  template <int T>
  static void store(void* p, int64_t stride) {
    check_tile(T);
    for (int r = 0; r < g_tiles.rows[T]; ++r)
      std::memcpy(static_cast<uint8_t*>(p) + r * stride, g_tiles.data[T][r], g_tiles.colsb[T]);
  }
};

}  // namespace

const CpuKernels& emulated_amx_kernels(bool avx512_bf16) {
  static const CpuKernels k =
      amx::with_amx<EmulatedTiles>(*avx512_kernels(), "amx_int8+amx_bf16(emulated)+avx512_vnni", true);
  static const CpuKernels kb =
      amx::with_amx<EmulatedTiles>(*avx512_bf16_kernels(), "amx_int8+amx_bf16(emulated)+avx512_vnni+avx512_bf16", true);
  return avx512_bf16 ? kb : k;
}

int64_t emulated_tile_configs() { return g_configs; }

}  // namespace kvik::test
