// The AMX kernel table over emulated tile instructions (amx_emulated_kernels.cpp): for CPUs with AVX-512.
#pragma once

#include <cstdint>

#include "kernels/cpu/cpu_kernels.h"

namespace kvik::test {

// Over the AVX-512 table, or (avx512_bf16) over the one with the vdpbf16ps kernel: call that only where the CPU has
// AVX512_BF16.
const CpuKernels& emulated_amx_kernels(bool avx512_bf16 = false);
// How many tile configurations the calling thread has loaded (a kernel call configures once).
int64_t emulated_tile_configs();

}  // namespace kvik::test
