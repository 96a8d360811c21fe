// Whether this process may run AMX tile instructions (Intel Sapphire Rapids and later), decided once:
//  1. the CPU reports AMX-TILE and AMX-INT8 (cpuid);
//  2. the Linux kernel grants this process the tile-data state (arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA); without
//     it the first tile instruction dies with SIGILL, the failure a native llama.cpp build shows on some VMs);
//  3. a self-test in a forked child (amx_self_test.h) runs every AMX-INT8 entry of the table (Q8_0, Q4_0, IQ4_NL,
//     Q5_0, Q4_1, Q5_1, Q4_K, Q5_K, Q6_K: amx_int8_entries()) on a small packed weight of its type and compares it bit
//     for bit with the AVX-512 x16 kernel of the same type. A child that faults or disagrees on any one type leaves
//     the whole process on AVX-512 (AMX-INT8 and AMX-BF16 off), the reason naming the type ("the AMX self-test's
//     Q5_K results differ from the AVX-512 kernels'", "... died with signal ... while testing the Q5_K kernels"):
//     turning off only the failing type would keep running tile code on a CPU (or kernel, or hypervisor) that has
//     just shown it does not run it as specified, for a small gain; one bad type is reason enough to distrust all.
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

// The AMX-INT8 self-test of `amx` against `base` (amx_self_test.h) in a forked child: empty when every type agreed,
// else why not, naming the type. amx_status() runs it over the real tiles; tests over emulated or broken tables.
std::string amx_int8_self_test_in_child(const CpuKernels& base, const CpuKernels& amx);
// The same for AMX-BF16 (amx.amx_bf16 against base.gemm_bf16_x16).
std::string amx_bf16_self_test_in_child(const CpuKernels& base, const CpuKernels& amx);

// The AVX-512 table (avx512_bf16_kernels() when avx512_bf16) with the AMX-INT8 entries, and with AMX-BF16's when
// amx_bf16 (isa_amx.cpp); nullptr when the compiler could not build them.
const CpuKernels* amx_kernels(bool amx_bf16, bool avx512_bf16);

}  // namespace kvik
