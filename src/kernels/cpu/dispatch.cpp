#include <cstdlib>
#include <cstring>

#include "kernels/cpu/cpu_kernels.h"

namespace kvik {

namespace {
const CpuKernels& choose() {
  const char* force = std::getenv("KVIK_ISA");
  const bool allow_avx512 = !force || std::strcmp(force, "avx512") == 0;
  const bool allow_avx2 = allow_avx512 || std::strcmp(force, "avx2") == 0;
  __builtin_cpu_init();
  if (allow_avx512 && avx512_kernels() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("fma"))
    return *avx512_kernels();
  // Every AVX2 CPU also has F16C (clang cannot query "f16c" through __builtin_cpu_supports).
  if (allow_avx2 && avx2_kernels() && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    return *avx2_kernels();
  return generic_kernels();
}
}  // namespace

const CpuKernels& cpu_kernels() {
  static const CpuKernels& k = choose();
  return k;
}

}  // namespace kvik
