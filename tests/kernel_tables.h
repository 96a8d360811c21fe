// Every compiled CPU kernel table and whether this CPU can run it, for tests that hold each table against the
// generic reference (a table the CPU cannot run is skipped, not failed).
#pragma once

#include <string>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"

namespace kvik::test {

struct Table {
  std::string name;
  const CpuKernels* k;
  bool runnable;
};

inline std::vector<Table> tables() {
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
  std::vector<Table> t = {{"generic", &generic_kernels(), true}};
  if (avx2_kernels()) t.push_back({"avx2", avx2_kernels(), avx2});
  if (avx512_kernels()) t.push_back({"avx512", avx512_kernels(), avx512});
  return t;
}

}  // namespace kvik::test
