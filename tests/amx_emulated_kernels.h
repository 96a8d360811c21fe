// The AMX kernel table over emulated tile instructions (amx_emulated_kernels.cpp): for CPUs with AVX-512.
#pragma once

#include <cstdint>

#include "kernels/cpu/cpu_kernels.h"

namespace kvik::test {

const CpuKernels& emulated_amx_kernels();
// How many tile configurations the calling thread has loaded (a kernel call configures once).
int64_t emulated_tile_configs();

}  // namespace kvik::test
