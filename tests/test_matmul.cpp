// matmul is batch-invariant: T rows at once give, bit for bit, what T single-row calls give — for every weight type,
// for T that are and are not multiples of the 4-token tile, and for sizes that run on one thread and on the pool.
// It also agrees with a float reference on the dequantized weights.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/ops.h"
#include "random_weights.h"
#include "tensor/dtype.h"

using namespace kvik;
using kvik::test::random_weights;
using kvik::test::Weights;

namespace {

class MatmulTypes : public ::testing::TestWithParam<DType> {};

TEST_P(MatmulTypes, BatchedRowsEqualSingleRowsBitForBit) {
  std::mt19937 rng(5);
  std::normal_distribution<float> g(0.0f, 1.0f);
  const DType t = GetParam();
  // (rows, cols): a partial 16-row task, and one big enough to run on the thread pool.
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{37, 512}, {300, 1024}}) {
    const Weights w = random_weights(t, rows, cols, rng);
    for (int64_t T : {1, 2, 3, 4, 5, 7, 8, 9, 13, 70, 137}) {  // 70, 137: several token blocks
      std::vector<float> x(static_cast<size_t>(T * cols)), y(static_cast<size_t>(T * rows)),
          y1(static_cast<size_t>(rows));
      for (auto& v : x) v = g(rng);
      matmul(x.data(), T, w.m, y.data());
      for (int64_t i = 0; i < T; ++i) {
        matmul(x.data() + i * cols, 1, w.m, y1.data());
        ASSERT_EQ(0, std::memcmp(y1.data(), y.data() + i * rows, sizeof(float) * rows))
            << dtype_name(t) << " rows " << rows << " T " << T << " token " << i;
      }
    }
  }
}

// Several outputs of one input (q/k/v, gate/up) give what separate calls give, whatever the token count.
TEST_P(MatmulTypes, SharedInputOutputsEqualSeparateCallsBitForBit) {
  std::mt19937 rng(7);
  std::normal_distribution<float> g(0.0f, 1.0f);
  const DType t = GetParam();
  const int64_t cols = 512;
  const Weights a = random_weights(t, 300, cols, rng), b = random_weights(t, 37, cols, rng),
                c = random_weights(t, 64, cols, rng);
  for (int64_t T : {1, 9, 100}) {
    std::vector<float> x(T * cols);
    for (auto& v : x) v = g(rng);
    std::vector<float> ya(T * 300), yb(T * 37), yc(T * 64), ra(T * 300), rb(T * 37), rc(T * 64);
    matmul(x.data(), T, {{&a.m, ya.data()}, {&b.m, yb.data()}, {&c.m, yc.data()}});
    matmul(x.data(), T, a.m, ra.data()), matmul(x.data(), T, b.m, rb.data()), matmul(x.data(), T, c.m, rc.data());
    EXPECT_EQ(ya, ra) << dtype_name(t) << " T " << T;
    EXPECT_EQ(yb, rb) << dtype_name(t) << " T " << T;
    EXPECT_EQ(yc, rc) << dtype_name(t) << " T " << T;
  }
}

TEST_P(MatmulTypes, AgreesWithDequantizedFloatReference) {
  std::mt19937 rng(9);
  std::normal_distribution<float> g(0.0f, 1.0f);
  const DType t = GetParam();
  const int64_t rows = 20, cols = 512, T = 6;
  const Weights w = random_weights(t, rows, cols, rng);
  std::vector<float> x(T * cols), y(T * rows), wf(cols);
  for (auto& v : x) v = g(rng);
  matmul(x.data(), T, w.m, y.data());
  for (int64_t r = 0; r < rows; ++r) {
    dequantize_row(t, w.m.row(r), wf.data(), cols);
    for (int64_t i = 0; i < T; ++i) {
      double ref = 0, mag = 0;
      for (int64_t c = 0; c < cols; ++c)
        ref += double(wf[c]) * x[i * cols + c], mag += std::fabs(double(wf[c]) * x[i * cols + c]);
      // Activations are rounded to the partner type (8-bit: ~1% per element; f16/bf16 less; f32 none).
      const double tol = t == DType::F32 ? 1e-5 : t == DType::F16 ? 2e-3 : 2e-2;
      EXPECT_NEAR(y[i * rows + r], ref, tol * mag) << dtype_name(t) << " row " << r << " token " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllWeightTypes, MatmulTypes,
                         ::testing::Values(DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1,
                                           DType::Q5_0, DType::Q5_1, DType::IQ4_NL, DType::Q4_K, DType::Q5_K,
                                           DType::Q6_K),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
