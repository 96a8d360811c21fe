// The AVX2 table with AVX-VNNI's vpdpbusd in the packed integer kernels (avx2_packed_q_impl.h, avx2_packed_k_impl.h),
// compiled with -mavxvnni: CPUs with AVX2 and AVX-VNNI but no AVX-512 (Intel Alder Lake and later clients, Sierra
// Forest and other E-core Xeons). Their results are the AVX2 kernels' bit for bit (both are the packed references').
#include "kernels/cpu/avx2_packed_k_impl.h"
#include "kernels/cpu/avx2_packed_q_impl.h"
#include "kernels/cpu/cpu_kernels.h"

namespace kvik {
namespace {

template <avx2::Q T>
void gemm_vnni(const uint8_t* g, int64_t nb, const ActQ8S& x, int64_t R, float* y, int64_t ys) {
  avx2::gemm_x16<T, true>(g, nb, x, R, y, ys);
}

}  // namespace

const CpuKernels* avx_vnni_kernels() {
  static const CpuKernels* t = []() -> const CpuKernels* {
    if (!avx2_kernels()) return nullptr;
    static CpuKernels k = *avx2_kernels();
    k.isa = "avx2+avx_vnni";
    k.gemm_q8_0_x16 = gemm_vnni<avx2::Q::kQ8_0>;
    k.gemm_q4_0_x16 = gemm_vnni<avx2::Q::kQ4_0>;
    k.gemm_iq4_nl_x16 = gemm_vnni<avx2::Q::kIQ4_NL>;
    k.gemm_q5_0_x16 = gemm_vnni<avx2::Q::kQ5_0>;
    k.gemm_q4_1_x16 = gemm_vnni<avx2::Q::kQ4_1>;
    k.gemm_q5_1_x16 = gemm_vnni<avx2::Q::kQ5_1>;
    k.gemm_q4_k_x16 = avx2::gemm_q4_k<true>;
    k.gemm_q5_k_x16 = avx2::gemm_q5_k<true>;
    k.gemm_q6_k_x16 = avx2::gemm_q6_k<true>;
    return &k;
  }();
  return t;
}

}  // namespace kvik
