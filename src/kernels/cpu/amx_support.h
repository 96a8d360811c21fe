// Whether this process may run AMX tile instructions (Intel Sapphire Rapids and later), decided once:
//  1. the CPU reports AMX-TILE and AMX-INT8 (cpuid);
//  2. the Linux kernel grants this process the tile-data state (arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA); without
//     it the first tile instruction dies with SIGILL, the failure a native llama.cpp build shows on some VMs);
//  3. a self-test in a forked child runs the AMX kernels on a small packed Q8_0 and Q4_0 weight and compares them
//     bit for bit with the AVX-512 kernels; a child that faults or disagrees leaves the process on AVX-512.
// AMX-BF16 (packed BF16 weights) is decided after that, the same way: cpuid's AMX-BF16 and a second child comparing
// the BF16 tile kernel with the AVX-512 one bit for bit (tdpbf16ps must round as Intel's pseudocode says, which only
// the hardware can show); without it the INT8 kernels are still used.
// The reasons are logged at start-up when the CPU has AMX and it is not used.
#pragma once

#include <string>

#include "kernels/cpu/cpu_kernels.h"

namespace kvik {

struct AmxStatus {
  bool cpu_has_amx = false;  // cpuid reports AMX-TILE and AMX-INT8
  bool usable = false;       // all three checks passed
  std::string reason;        // why not, when !usable
  bool bf16_usable = false;  // usable, cpuid reports AMX-BF16 and its self-test passed
  std::string bf16_reason;   // why not, when !bf16_usable
};
const AmxStatus& amx_status();

// The AVX-512 table (avx512_bf16_kernels() when avx512_bf16) with the AMX-INT8 entries, and with AMX-BF16's when
// amx_bf16 (isa_amx.cpp); nullptr when the compiler could not build them.
const CpuKernels* amx_kernels(bool amx_bf16, bool avx512_bf16);

}  // namespace kvik
