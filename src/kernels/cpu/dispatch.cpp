#include <cpuid.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "kernels/cpu/amx_support.h"
#include "kernels/cpu/cpu_kernels.h"

namespace kvik {

namespace {
bool avx512_usable() {
  __builtin_cpu_init();
  return avx512_kernels() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("fma");
}

bool avx_vnni_usable() { return avx_vnni_kernels() && cpu_has_avx_vnni(); }

bool avx512_bf16_usable() { return avx512_usable() && avx512_bf16_kernels() && __builtin_cpu_supports("avx512bf16"); }

// Levels from the top: amx, avx512_bf16, avx512, avx_vnni, avx2, generic; KVIK_ISA names the highest one allowed.
const CpuKernels& choose() {
  const char* force = std::getenv("KVIK_ISA");
  const bool allow_amx = !force || std::strcmp(force, "amx") == 0;
  const bool allow_bf16 = allow_amx || std::strcmp(force, "avx512_bf16") == 0;
  const bool allow_avx512 = allow_bf16 || std::strcmp(force, "avx512") == 0;
  const bool allow_vnni = allow_avx512 || std::strcmp(force, "avx_vnni") == 0;
  const bool allow_avx2 = allow_vnni || std::strcmp(force, "avx2") == 0;
  const bool bf16 = allow_bf16 && avx512_bf16_usable();
  if (allow_amx && avx512_usable() && amx_status().usable) return *amx_kernels(amx_status().bf16_usable, bf16);
  if (bf16) return *avx512_bf16_kernels();
  if (allow_avx512 && avx512_usable()) return *avx512_kernels();
  if (allow_vnni && avx_vnni_usable()) return *avx_vnni_kernels();
  // Every AVX2 CPU also has F16C (clang cannot query "f16c" through __builtin_cpu_supports).
  if (allow_avx2 && avx2_kernels() && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    return *avx2_kernels();
  return generic_kernels();
}

std::atomic<const CpuKernels*> g_override{nullptr};
}  // namespace

// AVX-VNNI is CPUID.(EAX=7, ECX=1):EAX bit 4 (GCC 12's __builtin_cpu_supports does not know it).
bool cpu_has_avx_vnni() {
  __builtin_cpu_init();
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __get_cpuid_count(7, 1, &a, &b, &c, &d) &&
         ((a >> 4) & 1u);
}

const CpuKernels& cpu_kernels() {
  static const CpuKernels& k = choose();
  const CpuKernels* o = g_override.load(std::memory_order_relaxed);
  return o ? *o : k;
}

void override_cpu_kernels_for_testing(const CpuKernels* k) { g_override.store(k, std::memory_order_relaxed); }

}  // namespace kvik
