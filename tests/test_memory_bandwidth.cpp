// The memory probe behind `kvik bench`'s decode roofline: every pattern returns a plausible rate quickly, the best
// is the fastest all-thread pattern, and `kvik bench --json` reports the probe with a roofline fraction ≤ 1 (the
// bandwidth is at least what decode itself streamed).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "core/thread_pool.h"
#include "kernels/cpu/memory_bandwidth.h"

TEST(MemoryBandwidth, EveryPatternMeasuresAPlausibleRateQuickly) {
  const auto t0 = std::chrono::steady_clock::now();
  const kvik::MemoryProbe p = kvik::probe_memory_bandwidth();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GE(p.buffer_bytes, int64_t{512} << 20);
  EXPECT_LE(p.buffer_bytes, int64_t{1} << 30);
  const int nt = kvik::ThreadPool::global().num_threads();
  ASSERT_EQ(p.patterns.size(), nt > 1 ? 7u : 4u);
  double best = 0, one = 0;
  for (const kvik::MemoryPattern& m : p.patterns) {
    EXPECT_GT(m.gbs, 0.5) << m.name;     // even a loaded laptop streams more than this
    EXPECT_LT(m.gbs, 5000.0) << m.name;  // and no machine streams this much from DRAM
    (m.threads == nt ? best : one) = std::max(m.threads == nt ? best : one, m.gbs);
    std::printf("%-20s x%d %.1f GB/s\n", m.name.c_str(), m.threads, m.gbs);
  }
  EXPECT_EQ(p.best_gbs, best);
  if (nt > 1) EXPECT_EQ(p.one_thread_gbs, one);
  EXPECT_EQ(kvik::measure_memory_bandwidth_gbs() > 0, true);
  EXPECT_LT(s, 30.0);
}

TEST(MemoryBandwidth, BenchReportsTheProbeAndAnHonestRoofline) {
  const std::string cmd = std::string(KVIK_BINARY) +
                          " bench -m " KVIK_SOURCE_DIR
                          "/models/stories260K.gguf --num-prompts 1 --input-len 16 --output-len 48 --json 2>/dev/null";
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(cmd.c_str(), "r"), pclose);
  ASSERT_TRUE(pipe);
  std::string out;
  std::array<char, 4096> buf;
  while (fgets(buf.data(), buf.size(), pipe.get())) out += buf.data();
  const auto j = nlohmann::json::parse(out.substr(out.rfind('\n', out.size() - 2) + 1));  // the last line
  ASSERT_TRUE(j["memory_probe"].is_object()) << out;
  EXPECT_EQ(j["memory_probe"]["patterns"].size(), kvik::ThreadPool::global().num_threads() > 1 ? 7u : 4u);
  EXPECT_GT(j["memory_bandwidth_gbs"].get<double>(), 0.5);
  EXPECT_GE(j["memory_bandwidth_gbs"].get<double>(), j["memory_probe"]["best_gbs"].get<double>());
  EXPECT_GE(j["memory_bandwidth_gbs"].get<double>(), j["decode_gbs"].get<double>() * (1 - 1e-9));
  EXPECT_GT(j["roofline_fraction"].get<double>(), 0.0);
  EXPECT_LE(j["roofline_fraction"].get<double>(), 1.0 + 1e-9);
  EXPECT_TRUE(j["roofline_basis"] == "probe" || j["roofline_basis"] == "decode");
}
