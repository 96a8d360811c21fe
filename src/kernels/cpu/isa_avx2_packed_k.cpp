// The AVX2 table's kernels on repacked K-quant weights (avx2_packed_k_impl.h, without AVX-VNNI).
#include "kernels/cpu/avx2_packed.h"
#include "kernels/cpu/avx2_packed_k_impl.h"

namespace kvik::avx2 {

void gemm_q4_k_x16(const uint8_t* g, int64_t nb, const ActQ8KS& x, int64_t R, float* y, int64_t ys) {
  gemm_q4_k<false>(g, nb, x, R, y, ys);
}
void gemm_q5_k_x16(const uint8_t* g, int64_t nb, const ActQ8KS& x, int64_t R, float* y, int64_t ys) {
  gemm_q5_k<false>(g, nb, x, R, y, ys);
}
void gemm_q6_k_x16(const uint8_t* g, int64_t nb, const ActQ8KS& x, int64_t R, float* y, int64_t ys) {
  gemm_q6_k<false>(g, nb, x, R, y, ys);
}

}  // namespace kvik::avx2
