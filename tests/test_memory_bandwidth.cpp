// The bandwidth probe behind `kvik bench`'s decode roofline returns a plausible number quickly.
#include <gtest/gtest.h>

#include <chrono>

#include "kernels/cpu/memory_bandwidth.h"

TEST(MemoryBandwidth, MeasuresAPlausibleRateQuickly) {
  const auto t0 = std::chrono::steady_clock::now();
  const double gbs = kvik::measure_memory_bandwidth_gbs();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GT(gbs, 0.5);     // even a loaded laptop streams more than this
  EXPECT_LT(gbs, 5000.0);  // and no machine streams this much from DRAM
  EXPECT_LT(s, 30.0);
  std::printf("measured read bandwidth: %.1f GB/s in %.2f s\n", gbs, s);
}
