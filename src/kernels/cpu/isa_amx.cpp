// The AMX kernel tables (amx_gemm.h over the real tile instructions): the AVX-512 table plus the amx_* entries, with
// or without AMX-BF16. Chosen by cpu_kernels() only after amx_support.cpp has obtained the tile-data permission from
// the kernel and self-tests in child processes have run these kernels against the AVX-512 ones.
#include "kernels/cpu/amx_support.h"

#ifdef KVIK_NO_AMX
namespace kvik {
const CpuKernels* amx_kernels(bool, bool) { return nullptr; }
}  // namespace kvik
#else
#include "kernels/cpu/amx_gemm.h"

namespace kvik {
namespace {

// The 64-byte operand of ldtilecfg (palette 1).
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);

struct HwTiles {
  // The configuration is per thread; it is loaded again only when the shape changes.
  static void configure(int R, int ka) {
    thread_local int cur_r = -1, cur_ka = -1;
    if (R == cur_r && ka == cur_ka) return;
    TileConfig c;
    c.rows[amx::kA] = static_cast<uint8_t>(R), c.colsb[amx::kA] = static_cast<uint16_t>(ka);
    for (int t : {amx::kB0, amx::kB1}) c.rows[t] = static_cast<uint8_t>(ka / 4), c.colsb[t] = 64;
    for (int t : {amx::kC0, amx::kC1}) c.rows[t] = static_cast<uint8_t>(R), c.colsb[t] = 64;
    _tile_loadconfig(&c);
    cur_r = R, cur_ka = ka;
  }
  // GCC's tile intrinsics paste the tile number into the instruction text: it must be a literal.
  template <int T>
  static void load(const void* p, int64_t stride) {
    if constexpr (T == amx::kA)
      _tile_loadd(0, p, stride);
    else if constexpr (T == amx::kB0)
      _tile_loadd(1, p, stride);
    else if constexpr (T == amx::kB1)
      _tile_loadd(2, p, stride);
    else
      static_assert(T == amx::kA, "tiles A, B0, B1 are loaded");
  }
  template <int T>
  static void zero() {
    if constexpr (T == amx::kC0)
      _tile_zero(3);
    else if constexpr (T == amx::kC1)
      _tile_zero(4);
    else
      static_assert(T == amx::kC0, "tiles C0, C1 are zeroed");
  }
  template <int C, int A, int B>
  static void dot() {
    static_assert(A == amx::kA && ((C == amx::kC0 && B == amx::kB0) || (C == amx::kC1 && B == amx::kB1)));
    if constexpr (C == amx::kC0)
      _tile_dpbsud(3, 0, 1);
    else
      _tile_dpbsud(4, 0, 2);
  }
  template <int C, int A, int B>
  static void dot_bf16() {
    if constexpr (C == amx::kC0 && A == amx::kA && B == amx::kB0)
      _tile_dpbf16ps(3, 0, 1);
    else if constexpr (C == amx::kC1 && A == amx::kA && B == amx::kB1)
      _tile_dpbf16ps(4, 0, 2);
    else
      static_assert(C == amx::kC0, "C0 = A·B0, C1 = A·B1");
  }
  template <int T>
  static void store(void* p, int64_t stride) {
    if constexpr (T == amx::kC0)
      _tile_stored(3, p, stride);
    else if constexpr (T == amx::kC1)
      _tile_stored(4, p, stride);
    else
      static_assert(T == amx::kC0, "tiles C0, C1 are stored");
  }
};

}  // namespace

// [amx_bf16][avx512_bf16]: the AMX entries over the AVX-512 table, with or without its vdpbf16ps kernel.
const CpuKernels* amx_kernels(bool amx_bf16, bool avx512_bf16) {
  static const CpuKernels t[2][2] = {
      {amx::with_amx<HwTiles>(*avx512_kernels(), "amx_int8+avx512_vnni", false),
       amx::with_amx<HwTiles>(*avx512_bf16_kernels(), "amx_int8+avx512_vnni+avx512_bf16", false)},
      {amx::with_amx<HwTiles>(*avx512_kernels(), "amx_int8+amx_bf16+avx512_vnni", true),
       amx::with_amx<HwTiles>(*avx512_bf16_kernels(), "amx_int8+amx_bf16+avx512_vnni+avx512_bf16", true)}};
  return &t[amx_bf16][avx512_bf16];
}

}  // namespace kvik
#endif
